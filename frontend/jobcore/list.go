package jobcore

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

	ListToolName = "list_jobs"
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

func (f *Core) ListJobsTool() ToolDef {
	td := NewTool(f, authz.ActionList, &mcp.Tool{
		Name:  ListToolName,
		Title: "List jobs",
		Description: "List your jobs (all of your tenant's with jobs:admin), one page at a time: running jobs first, newest " +
			"start first, then finished jobs, most recently finished first. Each row carries the job's handle for get_*. " +
			"Filter by kind and status; pass next_cursor back as cursor with the SAME filters for the next page. " +
			"A cursor expires after a few minutes (cursor_expired): then start again without cursor. A job that finishes " +
			"while you page can appear again further on with its new status; dedupe by job_id.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, f.ListJobs)
	// Tell models the enums and bounds; validation stays in listJobs so errors name the field.
	statuses := make([]string, len(jobstore.Statuses))
	for i, st := range jobstore.Statuses {
		statuses[i] = string(st)
	}
	td = td.enum("kind", workflows.DefaultKindNames()...).enum("status", statuses...).bounds("page_size", 1, ListPageSizeMax)
	td.Tool.InputSchema.(*jsonschema.Schema).Properties["page_size"].Default = []byte(strconv.Itoa(ListPageSizeDefault))
	return td
}

// listFilter is list_jobs' validated, normalized filter set. Every field is either zero or one
// of our own constants: nothing the caller typed reaches a query.
type ListFilter struct {
	Kind     string           // "" (any) or a registered kind's name (workflows)
	Status   workflows.Status // "" (any) or one of listStatuses
	PageSize int              // 1..ListPageSizeMax
	All      bool             // tenant-wide (jobs:admin) rather than the caller's own jobs
}

// parseListFilter validates in (except the cursor) into a listFilter.
func ParseListFilter(in ListJobsIn, all bool) (ListFilter, error) {
	lf := ListFilter{PageSize: in.PageSize, All: all}
	if in.Kind != "" {
		k, ok := workflows.LookupKind(in.Kind)
		if !ok {
			return lf, invalidArg("kind", "must be one of %s (or omitted for all kinds)", strings.Join(workflows.DefaultKindNames(), ", "))
		}
		lf.Kind = k.Name // our constant, not the caller's string
	}
	if in.Status != "" {
		for _, s := range jobstore.Statuses {
			if in.Status == string(s) {
				lf.Status = s
			}
		}
		if lf.Status == "" {
			return lf, invalidArg("status", "must be one of queued, running, awaiting_input, succeeded, failed, cancelling, cancelled (or omitted for all)")
		}
	}
	switch {
	case lf.PageSize == 0:
		lf.PageSize = ListPageSizeDefault
	case lf.PageSize < 1 || lf.PageSize > ListPageSizeMax:
		return lf, invalidArg("page_size", "must be between 1 and %d", ListPageSizeMax)
	}
	return lf, nil
}

// fingerprint binds a cursor to this exact traversal. Absent filters are left out (an absent
// filter is not the same as an empty one); the page size is always present, normalized.
func (lf ListFilter) Fingerprint() string {
	pairs := map[string]string{
		"q":         "list_jobs/v1", // bump when the query shape changes meaning
		"page_size": strconv.Itoa(lf.PageSize),
		"scope":     "own",
	}
	if lf.All {
		pairs["scope"] = "tenant"
	}
	if lf.Kind != "" {
		pairs["kind"] = lf.Kind
	}
	if lf.Status != "" {
		pairs["status"] = string(lf.Status)
	}
	return handle.FilterFingerprint(pairs)
}

// listJobFilter is the store filter of a listing by tenant/sub. tenant and sub come from the
// verified principal and are still validated; kind and status are our own constants. Runs
// closed by continue-as-new are left out so each job appears once (its current run). A
// subject no store can match (ownerMatchable) is errOwnerUnmatchable for its own listing.
func ListJobFilter(tenant, sub string, lf ListFilter) (jobstore.Filter, error) {
	if authz.ValidTenant(tenant) != nil {
		return jobstore.Filter{}, fmt.Errorf("tenant: %w", jobstore.ErrQueryValue)
	}
	f := jobstore.Filter{Tenant: tenant, Runs: jobstore.RunsLatest, Status: lf.Status}
	if !lf.All {
		if authz.ValidSubject(sub) != nil {
			return jobstore.Filter{}, fmt.Errorf("sub: %w", jobstore.ErrQueryValue)
		}
		f.Owner = sub
	}
	if lf.Kind != "" {
		f.Kinds = []string{lf.Kind}
	}
	if err := f.Validate(); err != nil {
		return jobstore.Filter{}, err
	}
	return f, nil
}

// openListCursor checks a list_jobs cursor against this request: signature first, then the
// binding (tenant, sub, tool, filters), and only then expiry, so another caller's expired
// cursor is cursor_invalid, not cursor_expired. It returns Temporal's page token.
func (f *Core) OpenListCursor(p authz.Principal, tool, raw, fingerprint string) ([]byte, error) {
	c, err := f.Opts.Keys.OpenCursor(raw, f.Opts.Now())
	if errors.Is(err, handle.ErrMalformed) || (err != nil && !errors.Is(err, handle.ErrExpired)) {
		return nil, ToolErr(CodeCursorInvalid, "cursor: malformed or not issued by this service; pass next_cursor exactly as returned, or omit cursor to start from the first page")
	}
	if c.Tenant != p.Tenant || c.Subject != p.Subject || c.Tool != tool || c.Filter != fingerprint {
		return nil, ToolErr(CodeCursorInvalid, "cursor: issued for another listing (other caller, tool or filters); repeat the exact filters and page_size of the call that returned it, or omit cursor to start from the first page")
	}
	if errors.Is(err, handle.ErrExpired) {
		return nil, ToolErr(CodeCursorExpired, "cursor: expired; restart the listing from the first page by calling list_jobs again without cursor (same filters)")
	}
	return c.PageToken, nil
}

func (f *Core) sealListCursor(p authz.Principal, tool, fingerprint string, token []byte) (string, error) {
	c := handle.Cursor{Tenant: p.Tenant, Subject: p.Subject, Tool: tool, Filter: fingerprint, PageToken: token,
		Expiry: f.Opts.Now().Add(f.Opts.CursorTTL)}
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("seal list cursor: %w", err)
	}
	s := f.Opts.Keys.SealCursor(c)
	if s == "" {
		return "", errors.New("seal list cursor: keyring refused it")
	}
	return s, nil
}

// listJobs serves list_jobs: one ListWorkflowExecutions call per page, no per-row calls.
func (f *Core) ListJobs(ctx context.Context, p authz.Principal, in ListJobsIn) (*ListJobsOut, error) {
	if authz.Decide(p, authz.ActionList, authz.Job{}) != authz.Allow {
		return nil, ToolErr(CodeForbidden, "listing jobs needs jobs:read or jobs:admin")
	}
	all := authz.ListAll(p)
	lf, err := ParseListFilter(in, all)
	if err != nil {
		return nil, err
	}
	fp := lf.Fingerprint()
	var token []byte
	if in.Cursor != "" {
		if token, err = f.OpenListCursor(p, ListToolName, in.Cursor, fp); err != nil {
			return nil, err
		}
	}
	jf, err := ListJobFilter(p.Tenant, p.Subject, lf)
	if errors.Is(err, jobstore.ErrOwnerUnmatchable) {
		return nil, ToolErr(CodeForbidden, "list_jobs cannot select your own jobs: your subject (a backslash or double quote, or a single quote "+
			"at either end) cannot be matched by this server's job store; use get_* with your handles, or ask a jobs:admin holder to list")
	}
	if err != nil {
		return nil, fmt.Errorf("list_jobs filter: %w", err)
	}
	return f.listPage(ctx, p, ListToolName, jf, lf.PageSize, token, fp, func(j *jobstore.Job) bool {
		return (all || j.Owner == p.Subject) && (lf.Kind == "" || j.Kind == lf.Kind)
	})
}

// listPage reads one store page of jf and renders the rows that keep accepts (the filter
// already selects them; keep is defense in depth). One store call, no per-row calls.
func (f *Core) listPage(ctx context.Context, p authz.Principal, tool string, jf jobstore.Filter, pageSize int, token []byte, fp string,
	keep func(*jobstore.Job) bool) (*ListJobsOut, error) {
	tctx, cancel := context.WithTimeout(ctx, f.Opts.TemporalTimeout)
	defer cancel()
	jobs, next, err := f.Store.List(tctx, jf, pageSize, token)
	if err != nil {
		if errors.Is(err, jobstore.ErrPageToken) {
			// Our filter is constant in shape, so a rejection with a cursor is the page token
			// (e.g. the visibility store changed under it).
			return nil, ToolErr(CodeCursorInvalid, "cursor: no longer usable; restart the listing from the first page by calling %s again without cursor", tool)
		}
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	out := &ListJobsOut{Jobs: make([]JobSummary, 0, len(jobs))}
	for _, j := range jobs {
		_, known := workflows.LookupKind(j.Kind)
		if j.Tenant != p.Tenant || !strings.HasPrefix(j.ID, p.Tenant+"/") || !known || !keep(j) {
			f.Logger(ctx).Warn(tool+": visibility returned a row outside the query; skipped",
				zap.String("tenant", p.Tenant), zap.String("sub", p.Subject), zap.String("job_id", j.ID))
			continue
		}
		out.Jobs = append(out.Jobs, f.Summary(p, j))
	}
	if len(next) > 0 {
		if out.NextCursor, err = f.sealListCursor(p, tool, fp, next); err != nil {
			return nil, err
		}
	}
	return out, nil
}
