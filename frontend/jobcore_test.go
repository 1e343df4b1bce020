package frontend

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/workflows"
)

// Unit tests of the job core over the in-memory store (jobstore/memstore): idempotent start,
// key reuse, the quota's retried start, every resume error mapping and the view.

var (
	coreNow   = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	coreAna   = authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	coreBo    = authz.Principal{Tenant: "acme", Subject: "bo", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	coreAppr  = authz.Principal{Tenant: "acme", Subject: "cy", Scopes: []authz.Scope{authz.ScopeApprove}}
	coreAdmin = authz.Principal{Tenant: "acme", Subject: "ops", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}}
	// coreKind is a kind as the core sees it (its result is never read by these tests).
	coreKind = jobcore.JobKind[struct{}]{Name: workflows.KindEval, Noun: "eval run",
		Result: func(context.Context, *jobcore.Core, authz.Principal, *jobstore.Job, func(any) error) (*struct{}, error) {
			return &struct{}{}, nil
		}}
)

func newCoreFrontend(t *testing.T, ms *memstore.Store) *Frontend {
	t.Helper()
	return newStoreFrontend(t, ms, jobcore.Options{UIBaseURL: "http://ui.test", Now: func() time.Time { return coreNow }})
}

func coreSpec(key, hash string) jobcore.StartSpec {
	return jobcore.StartSpec{Key: key, Hash: hash, Input: map[string]any{"args": hash}, Total: 10, Summary: "s", Details: "d"}
}

func TestStart_Idempotent(t *testing.T) {
	ms := memstore.New()
	f := newCoreFrontend(t, ms)
	ctx := context.Background()
	v1, err := coreKind.Start(ctx, f.Core, coreAna, coreSpec("k1", "h1"))
	if err != nil || v1.Created == nil || !*v1.Created || v1.Status != workflows.StatusQueued {
		t.Fatalf("first start: %+v, %v", v1, err)
	}
	st := ms.Starts[0]
	if st.ID != "acme/eval/ana/k1" || st.Tenant != "acme" || st.Owner != "ana" || st.Kind != workflows.KindEval ||
		st.Workflow != workflows.EvalWorkflowName || st.Memo[workflows.MemoInputHash] != "h1" || st.AwaitFirst {
		t.Fatalf("start request: %+v", st)
	}
	// The same key and arguments: the same job, created=false, nothing new started.
	v2, err := coreKind.Start(ctx, f.Core, coreAna, coreSpec("k1", "h1"))
	if err != nil || v2.Created == nil || *v2.Created || v2.JobID != v1.JobID {
		t.Fatalf("retried start: %+v, %v", v2, err)
	}
	if len(ms.Jobs) != 1 || ms.RunCount != 1 {
		t.Fatalf("%d jobs, %d runs after a retried start; want 1, 1", len(ms.Jobs), ms.RunCount)
	}
}

func TestStart_KeyReused(t *testing.T) {
	ms := memstore.New()
	f := newCoreFrontend(t, ms)
	ctx := context.Background()
	if _, err := coreKind.Start(ctx, f.Core, coreAna, coreSpec("k1", "h1")); err != nil {
		t.Fatal(err)
	}
	before := *ms.Jobs["acme/eval/ana/k1"]
	// Other arguments under the same key: idempotency_key_reused, nothing started or changed.
	_, err := coreKind.Start(ctx, f.Core, coreAna, coreSpec("k1", "h2"))
	wantCode(t, "other arguments", err, jobcore.CodeIdempotencyKeyReused)
	if len(ms.Jobs) != 1 || ms.RunCount != 1 || !reflect.DeepEqual(*ms.Jobs["acme/eval/ana/k1"], before) {
		t.Fatalf("a reused key changed the store: %d jobs, %d runs", len(ms.Jobs), ms.RunCount)
	}
	// Another owner's start with the same key is their own job.
	v, err := coreKind.Start(ctx, f.Core, coreBo, coreSpec("k1", "h2"))
	if err != nil || v.JobID != "acme/eval/bo/k1" || v.Owner != "bo" || !*v.Created {
		t.Fatalf("bo's start: %+v, %v", v, err)
	}
	// A key taken by a job of another kind (the same ID, a hand-made clash) is a reuse too.
	ms.Jobs["acme/eval/ana/k9"] = &jobstore.Job{ID: "acme/eval/ana/k9", RunID: "r", Tenant: "acme", Owner: "ana", Kind: workflows.KindExport,
		Exec: jobstore.RunRunning, InputHash: "h1"}
	_, err = coreKind.Start(ctx, f.Core, coreAna, coreSpec("k9", "h1"))
	wantCode(t, "other kind", err, jobcore.CodeIdempotencyKeyReused)
	// A job that vanished between the refused start and its read: retry.
	ms.StartErr = jobstore.ErrAlreadyStarted
	_, err = coreKind.Start(ctx, f.Core, coreAna, coreSpec("gone", "h1"))
	if te := wantCode(t, "vanished", err, jobcore.CodeUnavailable); te != nil && !strings.Contains(te.Message, "retry") {
		t.Errorf("vanished: %v", te)
	}
}

// A start the quota refuses still answers an idempotent retry with its job, and a reuse as a reuse.
func TestStart_QuotaRefusedRetry(t *testing.T) {
	ms := memstore.New()
	f := newStoreFrontend(t, ms, jobcore.Options{UIBaseURL: "http://ui.test", Now: func() time.Time { return coreNow },
		Tenants: authz.Tenants{Defaults: authz.TenantPolicy{Limits: authz.Limits{RunningJobsPerOwner: 1}}}})
	ctx := context.Background()
	if _, err := coreKind.Start(ctx, f.Core, coreAna, coreSpec("k1", "h1")); err != nil {
		t.Fatal(err)
	}
	// Now the owner is over the limit: 5 more of ana's jobs are running.
	for i := range 5 {
		id := fmt.Sprintf("acme/eval/ana/r%d", i)
		ms.Jobs[id] = &jobstore.Job{ID: id, RunID: "run-" + id, Tenant: "acme", Owner: "ana", Kind: "eval", Exec: jobstore.RunRunning, SAStatus: workflows.StatusRunning}
	}
	v, err := coreKind.Start(ctx, f.Core, coreAna, coreSpec("k1", "h1"))
	if err != nil || *v.Created || v.JobID != "acme/eval/ana/k1" {
		t.Fatalf("retried start over quota: %+v, %v", v, err)
	}
	_, err = coreKind.Start(ctx, f.Core, coreAna, coreSpec("k1", "h2"))
	wantCode(t, "reuse over quota", err, jobcore.CodeIdempotencyKeyReused)
	_, err = coreKind.Start(ctx, f.Core, coreAna, coreSpec("k2", "h1"))
	wantCode(t, "new job over quota", err, jobcore.CodeQuotaExceeded)
	if ms.RunCount != 1 {
		t.Fatalf("%d runs started, want 1", ms.RunCount)
	}
}

// mrtrCtx is the context of a tools/call from a 2026 client that takes form elicitations.
func mrtrCtx() context.Context {
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "start_eval", Arguments: []byte(`{"idempotency_key":"k1"}`),
		Meta: mcp.Meta{mcp.MetaKeyClientCapabilities: map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}}}}
	return context.WithValue(context.Background(), jobcore.CallRecordKey{}, &jobcore.CallRecord{Req: req})
}

// openOwnerInput is the workflow's first state for a job that at once asks its owner.
func openOwnerInput(j *jobstore.Job) {
	j.SAStatus = workflows.StatusAwaitingInput
	j.NeedsInput = &workflows.NeedsInput{InputID: "approve-1", Prompt: "Approve?", ScopeDigest: "sha256:d",
		Approver: authz.ApproverOwner, RequestedBy: j.Owner, ExpiresAt: coreNow.Add(time.Hour)}
}

// A start whose job at once asks its owner returns that request in the start's one store call
// (Update-With-Start), for a client that can take it; the retry finds the same job.
func TestStart_FirstState(t *testing.T) {
	ms := memstore.New()
	ms.OnFirstState = openOwnerInput
	f := newCoreFrontend(t, ms)
	spec := coreSpec("k1", "h1")
	spec.OwnerInput = true
	_, err := coreKind.Start(mrtrCtx(), f.Core, coreAna, spec)
	var ir *jobcore.InputRequired
	if !errors.As(err, &ir) || ir.Res.InputRequests[jobcore.InputKeyApproval] == nil || ir.Res.RequestState == "" {
		t.Fatalf("start of a job that asks its owner: want input_required, got %v", err)
	}
	if len(ms.Starts) != 1 || !ms.Starts[0].AwaitFirst {
		t.Fatalf("starts %+v: want one that awaits the first state", ms.Starts)
	}
	// A client that takes no elicitation: a plain start, the queued view.
	v, err := coreKind.Start(context.Background(), f.Core, coreAna, func() jobcore.StartSpec { s := coreSpec("k2", "h1"); s.OwnerInput = true; return s }())
	if err != nil || v.Status != workflows.StatusQueued || ms.Starts[1].AwaitFirst {
		t.Fatalf("2025 client: %+v, %v, %+v", v, err, ms.Starts[1])
	}
	// No worker: the first state does not come; the start still answers, with the job queued.
	ms.OnFirstState = nil
	v, err = coreKind.Start(mrtrCtx(), f.Core, coreAna, func() jobcore.StartSpec { s := coreSpec("k3", "h1"); s.OwnerInput = true; return s }())
	if err != nil || !*v.Created || v.Status != workflows.StatusQueued {
		t.Fatalf("no worker: %+v, %v", v, err)
	}
	// Its retry, once a worker ran it, finds the job and asks.
	ms.OnFirstState = openOwnerInput
	_, err = coreKind.Start(mrtrCtx(), f.Core, coreAna, func() jobcore.StartSpec { s := coreSpec("k3", "h1"); s.OwnerInput = true; return s }())
	if !errors.As(err, &ir) {
		t.Fatalf("retry: want input_required, got %v", err)
	}
	if ms.RunCount != 3 {
		t.Fatalf("%d runs, want 3", ms.RunCount)
	}
}

// awaitingJob stores a job of ana waiting for input from approver and returns it as Describe has it.
func awaitingJob(t *testing.T, f *Frontend, ms *memstore.Store, id string, approver authz.Approver) *jobstore.Job {
	t.Helper()
	ms.Jobs[id] = &jobstore.Job{ID: id, RunID: "run-" + id, Tenant: "acme", Owner: "ana", Kind: workflows.KindEval, Exec: jobstore.RunRunning,
		SAStatus: workflows.StatusAwaitingInput, NeedsInput: &workflows.NeedsInput{InputID: "approve-1", Prompt: "Approve?",
			ScopeDigest: "sha256:d", Approver: approver, RequestedBy: "ana", ExpiresAt: coreNow.Add(time.Hour)}}
	j, err := f.Describe(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// Every way a resume can fail maps to the contract's error, named for what the caller can do.
func TestResume_ErrorMapping(t *testing.T) {
	ms := memstore.New()
	f := newCoreFrontend(t, ms)
	ctx := context.Background()
	in := jobcore.ResumeIn{InputID: "approve-1", ScopeDigest: "sha256:d", Decision: workflows.DecisionApprove}
	reject := func(kind, msg string) func(*jobstore.Job, workflows.ResumeRequest) error {
		return func(*jobstore.Job, workflows.ResumeRequest) error {
			return &jobstore.ResumeRejected{Kind: kind, Msg: msg}
		}
	}
	for _, c := range []struct {
		name   string
		resume func(*jobstore.Job, workflows.ResumeRequest) error
		code   string
		msg    string // in the error's message
	}{
		{"stale input_id", reject(workflows.RejectInputNotExpected, "input_id does not name the open input request"), jobcore.CodeInputNotExpected, "input_id"},
		{"digest mismatch", reject(workflows.RejectInputNotExpected, "scope_digest does not match the scope awaiting approval"), jobcore.CodeInputNotExpected, "scope_digest"},
		{"answered meanwhile", reject(workflows.RejectInputNotExpected, "the job is not waiting for input"), jobcore.CodeInputNotExpected, "not waiting"},
		{"workflow forbids", reject(workflows.RejectForbidden, "four eyes: no"), jobcore.CodeForbidden, "four eyes"},
		{"workflow not found", reject(workflows.RejectNotFound, "job not found"), jobcore.CodeNotFound, "no such job"},
		{"bad decision", reject(workflows.RejectInvalidArgument, "decision must be approve or reject"), jobcore.CodeInvalidArgument, "decision"},
		{"seal refused", reject(workflows.RejectUnsealed, "seal expired"), jobcore.CodeUnavailable, "deployment problem"},
		{"job finished", func(*jobstore.Job, workflows.ResumeRequest) error { return jobstore.ErrJobNotFound }, jobcore.CodeInputNotExpected, "no longer waiting"},
		{"update timeout", func(*jobstore.Job, workflows.ResumeRequest) error {
			return fmt.Errorf("resume: %w", jobstore.ErrUpdateTimeout)
		}, jobcore.CodeUnavailable, "no worker processed"},
		{"store unavailable", func(*jobstore.Job, workflows.ResumeRequest) error {
			return fmt.Errorf("resume: %w", jobstore.ErrStoreUnavailable)
		}, jobcore.CodeUnavailable, "no worker processed"},
		{"deadline", func(*jobstore.Job, workflows.ResumeRequest) error { return context.DeadlineExceeded }, jobcore.CodeUnavailable, "no worker processed"},
	} {
		ms.OnResume = c.resume
		j := awaitingJob(t, f, ms, "acme/eval/ana/r", authz.ApproverOwner)
		_, err := f.ResumeJob(ctx, coreAna, j, in, jobcore.TokenAnswerer(ctx, workflows.SurfaceTool), "")
		if te := wantCode(t, c.name, err, c.code); te != nil && !strings.Contains(te.Message, c.msg) {
			t.Errorf("%s: message %q does not say %q", c.name, te.Message, c.msg)
		}
	}
	// Anything else is an internal error, not a tool error.
	ms.OnResume = func(*jobstore.Job, workflows.ResumeRequest) error { return errors.New("boom") }
	if _, err := f.ResumeJob(ctx, coreAna, awaitingJob(t, f, ms, "acme/eval/ana/r", authz.ApproverOwner), in, jobcore.TokenAnswerer(ctx, workflows.SurfaceTool), ""); err == nil {
		t.Error("unknown store error: no error")
	} else if _, ok := jobcore.AsToolError(err); ok {
		t.Errorf("unknown store error became a tool error: %v", err)
	}

	// Refused by the core: no update reaches the store.
	ms.OnResume = nil
	n := len(ms.Resumes)
	opsW := authz.Principal{Tenant: "acme", Subject: "ops", Scopes: []authz.Scope{authz.ScopeWrite, authz.ScopeAdmin}}
	_, err := f.ResumeJob(ctx, opsW, awaitingJob(t, f, ms, "acme/eval/ana/o", authz.ApproverOwner), in, jobcore.TokenAnswerer(ctx, workflows.SurfaceTool), "")
	if te := wantCode(t, "an admin on an owner request", err, jobcore.CodeForbidden); te != nil && !strings.Contains(te.Message, "owner") {
		t.Errorf("wrong answerer: %q", te.Message)
	}
	anaAppr := authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeWrite, authz.ScopeApprove}}
	_, err = f.ResumeJob(ctx, anaAppr, awaitingJob(t, f, ms, "acme/eval/ana/a", authz.ApproverApprover), in, jobcore.TokenAnswerer(ctx, workflows.SurfaceTool), "")
	if te := wantCode(t, "four eyes", err, jobcore.CodeForbidden); te != nil && !strings.Contains(te.Message, "four eyes") {
		t.Errorf("four eyes: %q", te.Message)
	}
	running := awaitingJob(t, f, ms, "acme/eval/ana/x", authz.ApproverOwner)
	running.NeedsInput, running.SAStatus = nil, workflows.StatusRunning
	_, err = f.ResumeJob(ctx, coreAna, running, in, jobcore.TokenAnswerer(ctx, workflows.SurfaceTool), "")
	wantCode(t, "not awaiting input", err, jobcore.CodeInputNotExpected)
	if len(ms.Resumes) != n {
		t.Fatalf("%d refused resumes reached the store", len(ms.Resumes)-n)
	}

	// Accepted: the update carries the run, a sealed request and a deduplicating ID.
	j := awaitingJob(t, f, ms, "acme/eval/ana/ok", authz.ApproverApprover)
	got, err := f.ResumeJob(ctx, coreAppr, j, in, jobcore.TokenAnswerer(ctx, workflows.SurfaceTool), "")
	if err != nil || got.Status() != workflows.StatusRunning {
		t.Fatalf("approver's resume: %+v, %v", got, err)
	}
	r := ms.Resumes[len(ms.Resumes)-1]
	if r.ID != j.ID || r.RunID != j.RunID || r.Req.Seal == "" || r.Req.Principal.Subject != "cy" || !strings.HasPrefix(r.UpdateID, "resume-") {
		t.Fatalf("resume request: %+v", r)
	}
	ms.Jobs[j.ID] = j // again, the same answer: the same update ID (Temporal deduplicates)
	if _, err := f.ResumeJob(ctx, coreAppr, j, in, jobcore.TokenAnswerer(ctx, workflows.SurfaceTool), ""); err != nil || ms.Resumes[len(ms.Resumes)-1].UpdateID != r.UpdateID {
		t.Fatalf("repeated resume: %v, update IDs %s / %s", err, r.UpdateID, ms.Resumes[len(ms.Resumes)-1].UpdateID)
	}
}

// The view: the contract status from the run state and the JobStatus attribute, progress,
// needs_input while awaiting input, errors of ended jobs, poll_after_ms and the ui_url rule.
func TestSummary(t *testing.T) {
	f := newCoreFrontend(t, memstore.New())
	base := func(exec jobstore.RunState, sa workflows.Status) *jobstore.Job {
		return &jobstore.Job{ID: "acme/eval/ana/k", RunID: "r1", Tenant: "acme", Owner: "ana", Kind: workflows.KindEval, Exec: exec, SAStatus: sa,
			CreatedAt: coreNow.Add(-time.Hour), ClosedAt: time.Time{},
			Progress: workflows.Progress{Done: 2, Total: 10, Unit: "episodes", AsOf: coreNow.Add(-time.Minute)}}
	}
	ni := &workflows.NeedsInput{InputID: "approve-1", Prompt: "Approve?", ScopeDigest: "sha256:d", Approver: authz.ApproverOwner}
	for _, c := range []struct {
		name   string
		j      *jobstore.Job
		status workflows.Status
		poll   int
		code   string // error code, "" for none
	}{
		{"queued", base(jobstore.RunRunning, workflows.StatusQueued), workflows.StatusQueued, 1000, ""},
		{"no attribute yet", base(jobstore.RunRunning, ""), workflows.StatusQueued, 1000, ""},
		{"running", base(jobstore.RunRunning, workflows.StatusRunning), workflows.StatusRunning, 2000, ""},
		{"awaiting", func() *jobstore.Job {
			j := base(jobstore.RunRunning, workflows.StatusAwaitingInput)
			j.NeedsInput = ni
			return j
		}(), workflows.StatusAwaitingInput, 5000, ""},
		{"cancel requested", func() *jobstore.Job {
			j := base(jobstore.RunRunning, workflows.StatusRunning)
			j.CancelRequested = true
			return j
		}(), workflows.StatusCancelling, 1000, ""},
		// Once closed, the run state is the truth, whatever the attribute says.
		{"completed", base(jobstore.RunCompleted, workflows.StatusRunning), workflows.StatusSucceeded, 0, ""},
		{"failed", base(jobstore.RunFailed, workflows.StatusRunning), workflows.StatusFailed, 0, "failed"},
		{"terminated", base(jobstore.RunTerminated, workflows.StatusRunning), workflows.StatusFailed, 0, "terminated"},
		{"timed out", base(jobstore.RunTimedOut, workflows.StatusRunning), workflows.StatusFailed, 0, "timedout"},
		{"canceled", base(jobstore.RunCanceled, workflows.StatusRunning), workflows.StatusCancelled, 0, workflows.ErrCodeCancelled},
		{"failed with its error", func() *jobstore.Job {
			j := base(jobstore.RunFailed, workflows.StatusFailed)
			j.JobErr = &workflows.JobError{Code: "all_episodes_failed", Message: "m"}
			return j
		}(), workflows.StatusFailed, 0, "all_episodes_failed"},
	} {
		s := f.Summary(coreAna, c.j)
		if s.Status != c.status || s.PollAfterMS != c.poll || s.Progress != c.j.Progress || s.JobID != c.j.ID || s.Owner != "ana" || s.Kind != "eval" {
			t.Errorf("%s: %+v", c.name, s)
		}
		if (s.Error == nil) != (c.code == "") || (s.Error != nil && s.Error.Code != c.code) {
			t.Errorf("%s: error %+v, want code %q", c.name, s.Error, c.code)
		}
		if (s.NeedsInput != nil) != (c.status == workflows.StatusAwaitingInput) {
			t.Errorf("%s: needs_input %+v", c.name, s.NeedsInput)
		}
		if !s.UpdatedAt.Equal(coreNow.Add(-time.Minute)) || !s.CreatedAt.Equal(coreNow.Add(-time.Hour)) {
			t.Errorf("%s: created %s updated %s", c.name, s.CreatedAt, s.UpdatedAt)
		}
	}
	// A job without created_at (started before the memo had it) shows its start time.
	j := base(jobstore.RunRunning, workflows.StatusRunning)
	j.CreatedAt, j.StartedAt = time.Time{}, coreNow.Add(-2*time.Hour)
	if s := f.Summary(coreAna, j); !s.CreatedAt.Equal(j.StartedAt) {
		t.Errorf("created_at fallback: %s", s.CreatedAt)
	}
	// ui_url: operators only (UIURLForAdmin, the default), with the run's history.
	if s := f.Summary(coreAna, j); s.UIURL != "" {
		t.Errorf("owner got ui_url %q", s.UIURL)
	}
	if s := f.Summary(coreAdmin, j); s.UIURL != "http://ui.test/namespaces/default/workflows/acme%2Feval%2Fana%2Fk/r1/history" {
		t.Errorf("admin ui_url %q", s.UIURL)
	}
	// The handle names the job and its kind.
	s := f.Summary(coreAna, j)
	if h, err := f.Opts.Keys.OpenHandle(s.Handle, coreNow); err != nil || h.WorkflowID != j.ID || h.Kind != "eval" || h.Tenant != "acme" {
		t.Errorf("handle: %+v, %v", h, err)
	}
}
