package frontend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// list_jobs limits (CONTRACT.md).
const (
	ListPageSizeDefault = wire.ListPageSizeDefault
	ListPageSizeMax     = wire.ListPageSizeMax

	listToolName = "list_jobs"
)

// ListJobsIn are list_jobs' arguments.
type ListJobsIn struct {
	Kind     string `json:"kind,omitempty" jsonschema:"only jobs of this kind (eval, export); omit for all kinds"`
	Status   string `json:"status,omitempty" jsonschema:"only jobs in this status: queued, running, awaiting_input, succeeded, failed, cancelling or cancelled; omit for all"`
	PageSize int    `json:"page_size,omitempty" jsonschema:"rows per page, 1-100 (default 20)"`
	Cursor   string `json:"cursor,omitempty" jsonschema:"next_cursor from the previous page, verbatim, with the same kind, status and page_size; omit for the first page"`
}

// ListJobsOut is list_jobs' result (wire.ListJobsOut).
type ListJobsOut = wire.ListJobsOut

func (f *Core) listJobsTool() toolDef {
	td := newTool(f, authz.ActionList, &mcp.Tool{
		Name:  listToolName,
		Title: "List jobs",
		Description: "List your jobs (all of your tenant's with jobs:admin), one page at a time: running jobs first, newest " +
			"start first, then finished jobs, most recently finished first. Each row carries the job's handle for get_*. " +
			"Filter by kind and status; pass next_cursor back as cursor with the SAME filters for the next page. " +
			"A cursor expires after a few minutes (cursor_expired): then start again without cursor. A job that finishes " +
			"while you page can appear again further on with its new status; dedupe by job_id.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, f.listJobs)
	// Tell models the enums and bounds; validation stays in listJobs so errors name the field.
	statuses := make([]string, len(jobstore.Statuses))
	for i, st := range jobstore.Statuses {
		statuses[i] = string(st)
	}
	td = td.enum("kind", workflows.DefaultKindNames()...).enum("status", statuses...).bounds("page_size", 1, ListPageSizeMax)
	td.tool.InputSchema.(*jsonschema.Schema).Properties["page_size"].Default = []byte(strconv.Itoa(ListPageSizeDefault))
	return td
}

// listFilter is list_jobs' validated, normalized filter set. Every field is either zero or one
// of our own constants: nothing the caller typed reaches a query.
type listFilter struct {
	kind     string           // "" (any) or a registered kind's name (workflows)
	status   workflows.Status // "" (any) or one of listStatuses
	pageSize int              // 1..ListPageSizeMax
	all      bool             // tenant-wide (jobs:admin) rather than the caller's own jobs
}

// parseListFilter validates in (except the cursor) into a listFilter.
func parseListFilter(in ListJobsIn, all bool) (listFilter, error) {
	lf := listFilter{pageSize: in.PageSize, all: all}
	if in.Kind != "" {
		k, ok := workflows.LookupKind(in.Kind)
		if !ok {
			return lf, invalidArg("kind", "must be one of %s (or omitted for all kinds)", strings.Join(workflows.DefaultKindNames(), ", "))
		}
		lf.kind = k.Name // our constant, not the caller's string
	}
	if in.Status != "" {
		for _, s := range jobstore.Statuses {
			if in.Status == string(s) {
				lf.status = s
			}
		}
		if lf.status == "" {
			return lf, invalidArg("status", "must be one of queued, running, awaiting_input, succeeded, failed, cancelling, cancelled (or omitted for all)")
		}
	}
	switch {
	case lf.pageSize == 0:
		lf.pageSize = ListPageSizeDefault
	case lf.pageSize < 1 || lf.pageSize > ListPageSizeMax:
		return lf, invalidArg("page_size", "must be between 1 and %d", ListPageSizeMax)
	}
	return lf, nil
}

// fingerprint binds a cursor to this exact traversal. Absent filters are left out (an absent
// filter is not the same as an empty one); the page size is always present, normalized.
func (lf listFilter) fingerprint() string {
	pairs := map[string]string{
		"q":         "list_jobs/v1", // bump when the query shape changes meaning
		"page_size": strconv.Itoa(lf.pageSize),
		"scope":     "own",
	}
	if lf.all {
		pairs["scope"] = "tenant"
	}
	if lf.kind != "" {
		pairs["kind"] = lf.kind
	}
	if lf.status != "" {
		pairs["status"] = string(lf.status)
	}
	return handle.FilterFingerprint(pairs)
}

// listJobFilter is the store filter of a listing by tenant/sub. tenant and sub come from the
// verified principal and are still validated; kind and status are our own constants. Runs
// closed by continue-as-new are left out so each job appears once (its current run). A
// subject no store can match (ownerMatchable) is errOwnerUnmatchable for its own listing.
func listJobFilter(tenant, sub string, lf listFilter) (jobstore.Filter, error) {
	if authz.ValidTenant(tenant) != nil {
		return jobstore.Filter{}, fmt.Errorf("tenant: %w", jobstore.ErrQueryValue)
	}
	f := jobstore.Filter{Tenant: tenant, Runs: jobstore.RunsLatest, Status: lf.status}
	if !lf.all {
		if authz.ValidSubject(sub) != nil {
			return jobstore.Filter{}, fmt.Errorf("sub: %w", jobstore.ErrQueryValue)
		}
		f.Owner = sub
	}
	if lf.kind != "" {
		f.Kinds = []string{lf.kind}
	}
	if err := f.Validate(); err != nil {
		return jobstore.Filter{}, err
	}
	return f, nil
}

// openListCursor checks a list_jobs cursor against this request: signature first, then the
// binding (tenant, sub, tool, filters), and only then expiry, so another caller's expired
// cursor is cursor_invalid, not cursor_expired. It returns Temporal's page token.
func (f *Core) openListCursor(p authz.Principal, tool, raw, fingerprint string) ([]byte, error) {
	c, err := f.opts.Keys.OpenCursor(raw, f.opts.Now())
	if errors.Is(err, handle.ErrMalformed) || (err != nil && !errors.Is(err, handle.ErrExpired)) {
		return nil, toolErr(CodeCursorInvalid, "cursor: malformed or not issued by this service; pass next_cursor exactly as returned, or omit cursor to start from the first page")
	}
	if c.Tenant != p.Tenant || c.Subject != p.Subject || c.Tool != tool || c.Filter != fingerprint {
		return nil, toolErr(CodeCursorInvalid, "cursor: issued for another listing (other caller, tool or filters); repeat the exact filters and page_size of the call that returned it, or omit cursor to start from the first page")
	}
	if errors.Is(err, handle.ErrExpired) {
		return nil, toolErr(CodeCursorExpired, "cursor: expired; restart the listing from the first page by calling list_jobs again without cursor (same filters)")
	}
	return c.PageToken, nil
}

func (f *Core) sealListCursor(p authz.Principal, tool, fingerprint string, token []byte) (string, error) {
	c := handle.Cursor{Tenant: p.Tenant, Subject: p.Subject, Tool: tool, Filter: fingerprint, PageToken: token,
		Expiry: f.opts.Now().Add(f.opts.CursorTTL)}
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("seal list cursor: %w", err)
	}
	s := f.opts.Keys.SealCursor(c)
	if s == "" {
		return "", errors.New("seal list cursor: keyring refused it")
	}
	return s, nil
}

// listJobs serves list_jobs: one ListWorkflowExecutions call per page, no per-row calls.
func (f *Core) listJobs(ctx context.Context, p authz.Principal, in ListJobsIn) (*ListJobsOut, error) {
	if authz.Decide(p, authz.ActionList, authz.Job{}) != authz.Allow {
		return nil, toolErr(CodeForbidden, "listing jobs needs jobs:read or jobs:admin")
	}
	all := authz.ListAll(p)
	lf, err := parseListFilter(in, all)
	if err != nil {
		return nil, err
	}
	fp := lf.fingerprint()
	var token []byte
	if in.Cursor != "" {
		if token, err = f.openListCursor(p, listToolName, in.Cursor, fp); err != nil {
			return nil, err
		}
	}
	jf, err := listJobFilter(p.Tenant, p.Subject, lf)
	if errors.Is(err, jobstore.ErrOwnerUnmatchable) {
		return nil, toolErr(CodeForbidden, "list_jobs cannot select your own jobs: your subject (a backslash or double quote, or a single quote "+
			"at either end) cannot be matched by this server's job store; use get_* with your handles, or ask a jobs:admin holder to list")
	}
	if err != nil {
		return nil, fmt.Errorf("list_jobs filter: %w", err)
	}
	return f.listPage(ctx, p, listToolName, jf, lf.pageSize, token, fp, func(j *jobstore.Job) bool {
		return (all || j.Owner == p.Subject) && (lf.kind == "" || j.Kind == lf.kind)
	})
}

// listPage reads one store page of jf and renders the rows that keep accepts (the filter
// already selects them; keep is defense in depth). One store call, no per-row calls.
func (f *Core) listPage(ctx context.Context, p authz.Principal, tool string, jf jobstore.Filter, pageSize int, token []byte, fp string,
	keep func(*jobstore.Job) bool) (*ListJobsOut, error) {
	tctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
	defer cancel()
	jobs, next, err := f.store.List(tctx, jf, pageSize, token)
	if err != nil {
		if errors.Is(err, jobstore.ErrPageToken) {
			// Our filter is constant in shape, so a rejection with a cursor is the page token
			// (e.g. the visibility store changed under it).
			return nil, toolErr(CodeCursorInvalid, "cursor: no longer usable; restart the listing from the first page by calling %s again without cursor", tool)
		}
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	out := &ListJobsOut{Jobs: make([]JobSummary, 0, len(jobs))}
	for _, j := range jobs {
		_, known := workflows.LookupKind(j.Kind)
		if j.Tenant != p.Tenant || !strings.HasPrefix(j.ID, p.Tenant+"/") || !known || !keep(j) {
			f.logger(ctx).Warn(tool+": visibility returned a row outside the query; skipped",
				zap.String("tenant", p.Tenant), zap.String("sub", p.Subject), zap.String("job_id", j.ID))
			continue
		}
		out.Jobs = append(out.Jobs, f.summary(p, j))
	}
	if len(next) > 0 {
		if out.NextCursor, err = f.sealListCursor(p, tool, fp, next); err != nil {
			return nil, err
		}
	}
	return out, nil
}
