package jobcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
)

// UsageToolName is the tool that sums what a tenant's finished jobs used.
const UsageToolName = "get_usage"

// Bounds of get_usage: the window and how many jobs one call reads (visibility pages of
// usagePageSize, each row carrying its job's usage memo: no history is read); eachJob's bounds,
// so the cost quota's check reads as much at most.
const (
	UsageSinceDefault = 720 * time.Hour
	UsageSinceMax     = 366 * 24 * time.Hour
	usageMaxJobs      = 20000
	usagePageSize     = 1000
)

// UsageIn are get_usage's arguments.
type UsageIn struct {
	Since string `json:"since,omitempty" jsonschema:"how far back, as a Go duration (e.g. 720h, the default; at most 8784h): jobs that finished since then are summed"`
	By    string `json:"by,omitempty" jsonschema:"owner (default) or kind: what each row groups"`
}

// UsageOut is get_usage's result (wire.UsageOut).
type UsageOut = wire.UsageOut

func (f *Core) usageTool() ToolDef {
	return NewTool(f, authz.ActionUsage, &mcp.Tool{
		Name:  UsageToolName,
		Title: "What the tenant's jobs used",
		Description: "Sums what your tenant's finished jobs used (jobs:admin): episodes, episode-seconds and cost by unit " +
			"(evals), rows and bytes (exports), by owner or by kind, over the jobs that finished within since (default " +
			"720h). Read from the jobs' records in Temporal, each job's usage as it recorded it when it ended.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, f.Usage).enum("by", "owner", "kind")
}

// Usage serves get_usage: the caller's tenant only (identity from the token), admins only.
func (f *Core) Usage(ctx context.Context, p authz.Principal, in UsageIn) (*UsageOut, error) {
	if authz.Decide(p, authz.ActionUsage, authz.Job{}) != authz.Allow {
		return nil, ToolErr(CodeForbidden, "get_usage needs jobs:admin")
	}
	since := UsageSinceDefault
	if in.Since != "" {
		d, err := time.ParseDuration(in.Since)
		if err != nil || d <= 0 || d > UsageSinceMax {
			return nil, invalidArg("since", "must be a Go duration above 0 and at most %s, like 720h", UsageSinceMax)
		}
		since = d
	}
	by := cmp.Or(in.By, "owner")
	if by != "owner" && by != "kind" {
		return nil, invalidArg("by", "must be owner or kind")
	}
	now := f.Opts.Now().UTC()
	out := &UsageOut{Tenant: p.Tenant, Since: now.Add(-since), Until: now, By: by, Total: wire.UsageGroup{Key: "*"}}
	groups := map[string]*wire.UsageGroup{}
	filter := jobstore.Filter{Tenant: p.Tenant, ClosedSince: out.Since, Runs: jobstore.RunsLatest}
	truncated, err := f.eachJob(ctx, filter, func(j *jobstore.Job) {
		if j.Tenant != p.Tenant || j.Forgotten {
			return
		}
		if _, closed := jobstore.ClosedStatus(j.Exec); !closed {
			return
		}
		key := j.Owner
		if by == "kind" {
			key = j.Kind
		}
		g := groups[key]
		if g == nil {
			g = &wire.UsageGroup{Key: key}
			groups[key] = g
		}
		for _, s := range []*wire.UsageGroup{g, &out.Total} {
			s.Jobs++
			if j.Usage == nil {
				s.NoUsage++
				continue
			}
			s.Usage.Add(*j.Usage)
		}
	})
	if err != nil {
		if errors.Is(err, jobstore.ErrPageToken) {
			return nil, ToolErr(CodeUnavailable, "the job listing changed while it was read; retry")
		}
		return nil, fmt.Errorf("%s: %w", UsageToolName, err)
	}
	out.Truncated = truncated
	out.Groups = make([]wire.UsageGroup, 0, len(groups))
	for _, g := range groups {
		out.Groups = append(out.Groups, *g)
	}
	slices.SortFunc(out.Groups, func(a, b wire.UsageGroup) int {
		return cmp.Or(cmp.Compare(b.Jobs, a.Jobs), cmp.Compare(a.Key, b.Key))
	})
	return out, nil
}

// eachJob calls fn for every run filter selects, a page of usagePageSize at a time (each page
// one store call within TemporalTimeout), and stops after the page that reaches usageMaxJobs
// runs read: truncated then says that runs were left unread. get_usage and the cost quota sum
// over tenants' jobs with it.
func (f *Core) eachJob(ctx context.Context, filter jobstore.Filter, fn func(*jobstore.Job)) (truncated bool, err error) {
	var token []byte
	for read := 0; ; {
		tctx, cancel := context.WithTimeout(ctx, f.Opts.TemporalTimeout)
		jobs, next, err := f.Store.List(tctx, filter, usagePageSize, token)
		cancel()
		if err != nil {
			return false, err
		}
		for _, j := range jobs {
			fn(j)
		}
		read += len(jobs)
		if len(next) == 0 {
			return false, nil
		}
		if read >= usageMaxJobs {
			return true, nil
		}
		token = next
	}
}
