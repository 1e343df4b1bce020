package jobcore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

const describeToolName = "describe_job"

// storyTimeout bounds one describe_job's history reads: a long eval's chain of runs is many
// pages, more than one Temporal call's TemporalTimeout.
const storyTimeout = 60 * time.Second

// DescribeJobIn are describe_job's arguments.
type DescribeJobIn struct {
	Handle   string `json:"handle" jsonschema:"the job's handle from start_*, get_* or list_jobs, verbatim; or its job_id"`
	MaxLines int    `json:"max_lines,omitempty" jsonschema:"most timeline lines to return, 10-1000 (default 200); a longer timeline keeps its first and last lines and says what was left out"`
}

func (f *Core) describeJobTool() ToolDef {
	td := NewTool(f, authz.ActionGet, &mcp.Tool{
		Name:  describeToolName,
		Title: "Describe a job's history",
		Description: "A job's timeline from its Temporal history, in words: who started it and with what, which approval it " +
			"waited for and who answered on which surface, each part or episode batch, retries with their errors, cancel " +
			"requests, continue-as-new runs and the end, with times and the Web UI link. For the job's owner (jobs:read) " +
			"and jobs:admin holders of its tenant; owners see error types, admins the recorded messages.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, f.describeJob)
	td = td.bounds("max_lines", wire.StoryLinesMin, wire.StoryLinesMax)
	td.Tool.InputSchema.(*jsonschema.Schema).Properties["max_lines"].Default = []byte(strconv.Itoa(wire.StoryLinesDefault))
	return td
}

// describeJob serves describe_job. Who may: the job's owner and the tenant's admins. Anyone
// else — an approver who may get the job while it waits for them included — gets the same
// not_found as an unknown handle: the history holds more than an approver is shown.
func (f *Core) describeJob(ctx context.Context, p authz.Principal, in DescribeJobIn) (*DescribeJobOut, error) {
	switch {
	case in.MaxLines == 0:
		in.MaxLines = wire.StoryLinesDefault
	case in.MaxLines < wire.StoryLinesMin || in.MaxLines > wire.StoryLinesMax:
		return nil, invalidArg("max_lines", "must be between %d and %d", wire.StoryLinesMin, wire.StoryLinesMax)
	}
	if in.Handle == "" {
		return nil, invalidArg("handle", "is required")
	}
	// The handle (or job ID) names the kind; resolve checks its signature, tenant and the policy again.
	j, err := f.Resolve(ctx, p, in.Handle, f.RefKind(in.Handle), authz.ActionGet)
	if err != nil {
		return nil, err
	}
	admin := p.Has(authz.ScopeAdmin)
	if j.Owner != p.Subject && !admin || j.Owner == p.Subject && !admin && !p.Has(authz.ScopeRead) {
		return nil, ErrNotFound()
	}
	kind, ok := workflows.LookupKind(j.Kind)
	if !ok {
		return nil, ErrNotFound()
	}
	v := f.Summary(p, j)
	req := jobstore.StoryRequest{ID: j.ID, MaxLines: in.MaxLines, Full: admin}
	if v.Error != nil {
		req.JobErrCode, req.JobErrMsg = v.Error.Code, v.Error.Message
	}
	sctx, cancel := context.WithTimeout(ctx, storyTimeout)
	defer cancel()
	st, err := f.Store.Story(sctx, kind, req)
	if errors.Is(err, jobstore.ErrJobNotFound) {
		return nil, ErrNotFound()
	}
	if err != nil {
		return nil, err
	}
	out := &DescribeJobOut{JobID: j.ID, Kind: j.Kind, Status: v.Status, Owner: j.Owner, StartedAt: st.Started,
		Runs: st.Runs, Events: st.Events, Actions: st.Actions, Lines: st.Lines, Cut: st.Cut, Detail: "owner", UIURL: v.UIURL}
	if admin {
		out.Detail = "full"
	}
	if out.StartedAt.IsZero() {
		out.StartedAt = j.StartedAt
	}
	end := f.Opts.Now()
	if !st.Ended.IsZero() && v.Status.Terminal() {
		e := st.Ended
		out.EndedAt, end = &e, e
	}
	out.Duration = end.Sub(out.StartedAt).Truncate(time.Second).String()
	if out.Lines == nil {
		out.Lines = []StoryLine{}
	}
	return out, nil
}

// StoryLine and DescribeJobOut are describe_job's shapes (wire).
type (
	StoryLine      = wire.StoryLine
	DescribeJobOut = wire.DescribeJobOut
)
