package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/authz"
)

// Defaults for EvalInput fields left zero.
const (
	EpisodesPerRunDefault = 1000
	ProgressEveryDefault  = 2 * time.Second
)

// EvalArgs are the caller's normalized start arguments. Their digest is both the idempotency
// fingerprint and the scope an approval binds to.
type EvalArgs struct {
	Suite       string         `json:"suite"`
	Episodes    int            `json:"episodes"`
	Concurrency int            `json:"concurrency"`
	Params      map[string]any `json:"params"`
}

// ApprovalPolicy is resolved from the suite when the job starts, so a later config change
// cannot alter what a running job asks for.
type ApprovalPolicy struct {
	Threshold int            `json:"threshold"` // more episodes than this need approval; 0 never
	Approver  authz.Approver `json:"approver"`
	Timeout   time.Duration  `json:"timeout"`
}

// EpisodePolicy bounds each episode activity.
type EpisodePolicy struct {
	Timeout          time.Duration `json:"timeout"`
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout"`
	MaxAttempts      int           `json:"max_attempts"`
}

// EvalInput starts (or continues) an eval job.
type EvalInput struct {
	Tenant   string         `json:"tenant"`
	Owner    string         `json:"owner"`
	Args     EvalArgs       `json:"args"`
	Approval ApprovalPolicy `json:"approval"`
	Episode  EpisodePolicy  `json:"episode"`
	// EpisodesPerRun bounds history: the workflow continues as new after this many episodes.
	// Defaults to 1000.
	EpisodesPerRun int `json:"episodes_per_run,omitempty"`
	// ProgressEvery throttles progress memo upserts (each is a history event). Defaults to 2s.
	ProgressEvery time.Duration `json:"progress_every,omitempty"`
	// State carries progress across continue-as-new; nil on the first run.
	State *EvalState `json:"state,omitempty"`
}

// EvalState is the running tally carried across runs.
type EvalState struct {
	Next       int     `json:"next"`
	Scored     int     `json:"scored"`
	Passed     int     `json:"passed"`
	Failed     int     `json:"failed"`
	Sum        float64 `json:"sum"`
	SumSq      float64 `json:"sum_sq"`
	Approved   bool    `json:"approved"`
	ApprovedBy string  `json:"approved_by,omitempty"`
	Runs       int     `json:"runs"`
}

// EvalResult is a finished eval's summary. Small by design: it lives in history.
type EvalResult struct {
	Episodes   int     `json:"episodes"`
	Scored     int     `json:"scored"`
	Passed     int     `json:"passed"`
	Failed     int     `json:"failed"`
	MeanScore  float64 `json:"mean_score"`
	StdErr     float64 `json:"std_err"`
	ApprovedBy string  `json:"approved_by,omitempty"`
}

var a *activities.Activities

// evalRun is one run's in-memory state; everything durable is in EvalInput.State or history.
type evalRun struct {
	in           EvalInput
	st           *EvalState
	needs        *NeedsInput
	decision     string
	decidedBy    string
	comment      string
	lastProgress time.Time
	terminal     bool
}

// Eval runs in.Args.Episodes episodes with at most in.Args.Concurrency in flight, after an
// approval when the suite asks for one.
func Eval(ctx workflow.Context, in EvalInput) (EvalResult, error) {
	if in.EpisodesPerRun <= 0 {
		in.EpisodesPerRun = EpisodesPerRunDefault
	}
	if in.ProgressEvery <= 0 {
		in.ProgressEvery = ProgressEveryDefault
	}
	first := in.State == nil
	if first {
		in.State = &EvalState{}
	}
	in.State.Runs++
	r := &evalRun{in: in, st: in.State}

	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateResume, r.resume,
		workflow.UpdateHandlerOptions{Validator: r.validateResume}); err != nil {
		return EvalResult{}, err
	}
	// Report "cancelling" as soon as a cancel request lands, while episodes wind down.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, func(g workflow.Context) {
		ctx.Done().Receive(g, nil)
		if !r.terminal {
			r.setStatus(g, StatusCancelling)
		}
	})

	if first {
		if r.needsApproval() {
			if err := r.awaitApproval(ctx); err != nil {
				return EvalResult{}, err
			}
		}
		r.setStatus(ctx, StatusRunning)
	}
	return r.runEpisodes(ctx)
}

func (r *evalRun) needsApproval() bool {
	p := r.in.Approval
	return !r.st.Approved && p.Threshold > 0 && r.in.Args.Episodes > p.Threshold
}

func (r *evalRun) setStatus(ctx workflow.Context, s Status) {
	// Upserting search attributes only fails on a misregistered namespace; the job itself must
	// go on, and get_* falls back to the execution status.
	if err := workflow.UpsertTypedSearchAttributes(ctx, SAJobStatus.ValueSet(string(s))); err != nil {
		workflow.GetLogger(ctx).Warn("upsert JobStatus failed", "error", err)
	}
}

func (r *evalRun) upsertMemo(ctx workflow.Context, m map[string]any) {
	if err := workflow.UpsertMemo(ctx, m); err != nil {
		workflow.GetLogger(ctx).Warn("upsert memo failed", "error", err)
	}
}

func (r *evalRun) progress(ctx workflow.Context, msg string) Progress {
	p := Progress{Done: r.st.Scored, Failed: r.st.Failed, Total: r.in.Args.Episodes, Message: msg, AsOf: workflow.Now(ctx)}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s**\n\n%d of %d episodes scored, %d failed, %d passed.",
		msg, p.Done, p.Total, p.Failed, r.st.Passed))
	return p
}

// finish records a terminal status and error in visibility and memo before the run closes.
func (r *evalRun) finish(ctx workflow.Context, s Status, jerr *JobError, msg string) {
	r.terminal = true
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	r.setStatus(dctx, s)
	m := map[string]any{MemoProgress: r.progress(dctx, msg), MemoNeedsInput: nil}
	if jerr != nil {
		m[MemoError] = jerr
	}
	r.upsertMemo(dctx, m)
}

func (r *evalRun) awaitApproval(ctx workflow.Context) error {
	info := workflow.GetInfo(ctx)
	sum := sha256.Sum256([]byte(info.WorkflowExecution.ID + "|" + info.OriginalRunID))
	a := r.in.Args
	r.needs = &NeedsInput{
		InputID: "approve-" + hex.EncodeToString(sum[:6]),
		Prompt: fmt.Sprintf("Approve an eval of %d episodes of suite %q at concurrency %d? Nothing runs until this is answered.",
			a.Episodes, a.Suite, a.Concurrency),
		AnswerSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"decision": map[string]any{"type": "string", "enum": []string{DecisionApprove, DecisionReject}},
				"comment":  map[string]any{"type": "string", "maxLength": 1000},
			},
			"required": []string{"decision"},
		},
		ScopeDigest: Digest(a),
		Approver:    r.in.Approval.Approver,
		ExpiresAt:   workflow.Now(ctx).Add(r.in.Approval.Timeout),
	}
	r.setStatus(ctx, StatusAwaitingInput)
	r.upsertMemo(ctx, map[string]any{MemoNeedsInput: r.needs, MemoProgress: r.progress(ctx, "waiting for approval")})

	// A named timer, so the UI's timeline says what the job is waiting for.
	answered, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: r.in.Approval.Timeout,
		TimerOptions: workflow.TimerOptions{Summary: "waiting for approval (" + string(r.in.Approval.Approver) + ")"}},
		func() bool { return r.decision != "" })
	if err != nil { // cancelled while waiting
		r.finish(ctx, StatusCancelled, &JobError{ErrCodeCancelled, "cancelled while waiting for approval"}, "cancelled")
		return err
	}
	if !answered {
		r.needs = nil
		msg := "approval was not answered in time"
		r.finish(ctx, StatusFailed, &JobError{ErrCodeInputExpired, msg}, msg)
		return temporal.NewNonRetryableApplicationError(msg, ErrCodeInputExpired, nil)
	}
	if r.decision == DecisionReject {
		msg := "rejected by " + r.decidedBy
		if r.comment != "" {
			msg += ": " + r.comment
		}
		r.finish(ctx, StatusCancelled, &JobError{ErrCodeRejected, msg}, "rejected")
		return temporal.NewCanceledError(msg)
	}
	r.st.Approved, r.st.ApprovedBy = true, r.decidedBy
	r.upsertMemo(ctx, map[string]any{MemoNeedsInput: nil})
	return nil
}

func reject(kind, msg string) error { return temporal.NewApplicationError(msg, kind) }

// validateResume runs before an update is admitted to history: nothing it rejects leaves a trace.
func (r *evalRun) validateResume(ctx workflow.Context, req ResumeRequest) error {
	job := authz.Job{Tenant: r.in.Tenant, Owner: r.in.Owner}
	if r.needs != nil {
		job.OpenInput = r.needs.Approver
	}
	switch authz.Decide(req.Principal, authz.ActionResume, job) {
	case authz.NotFound:
		return reject(RejectNotFound, "job not found")
	case authz.Forbidden:
		if job.OpenInput == authz.ApproverApprover {
			return reject(RejectForbidden, "this input request needs an approver (jobs:approve)")
		}
		return reject(RejectForbidden, "only the job's owner (with jobs:write) may answer this input request")
	}
	if r.needs == nil {
		return reject(RejectInputNotExpected, "the job is not waiting for input")
	}
	if req.InputID != r.needs.InputID {
		return reject(RejectInputNotExpected, "input_id does not name the open input request")
	}
	if req.ScopeDigest != r.needs.ScopeDigest {
		return reject(RejectInputNotExpected, "scope_digest does not match the scope awaiting approval")
	}
	if req.Decision != DecisionApprove && req.Decision != DecisionReject {
		return reject(RejectInvalidArgument, "decision must be approve or reject")
	}
	return nil
}

func (r *evalRun) resume(ctx workflow.Context, req ResumeRequest) (ResumeResult, error) {
	r.decision, r.decidedBy, r.comment = req.Decision, req.Principal.Subject, req.Comment
	r.needs = nil // a second resume, even a concurrent one, is now input_not_expected
	return ResumeResult{Decision: req.Decision, By: req.Principal.Subject}, nil
}

func (r *evalRun) runEpisodes(ctx workflow.Context) (EvalResult, error) {
	in, st := r.in, r.st
	total := in.Args.Episodes
	runEnd := min(total, st.Next+in.EpisodesPerRun)
	conc := max(1, in.Args.Concurrency)
	jobID := workflow.GetInfo(ctx).WorkflowExecution.ID
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: in.Episode.Timeout,
		HeartbeatTimeout:    in.Episode.HeartbeatTimeout,
		WaitForCancellation: true, // "cancelled" means the episodes really stopped
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			MaximumAttempts:        int32(max(1, in.Episode.MaxAttempts)),
			NonRetryableErrorTypes: []string{activities.ErrTypeEpisodeFailed, activities.ErrTypeSuiteMissing},
		},
	}
	r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "running")})
	r.lastProgress = workflow.Now(ctx)

	sel := workflow.NewSelector(ctx)
	inflight := 0
	for {
		for inflight < conc && st.Next < runEnd && ctx.Err() == nil && !workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			i := st.Next
			st.Next++
			o := opts
			o.Summary = fmt.Sprintf("episode %d of %d", i+1, total)
			f := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), a.RunEpisode, activities.EpisodeInput{
				JobID: jobID, Suite: in.Args.Suite, Index: i,
				OperationID: fmt.Sprintf("%s#%d", jobID, i), Params: in.Args.Params,
			})
			inflight++
			sel.AddFuture(f, func(f workflow.Future) {
				inflight--
				var res activities.EpisodeResult
				err := f.Get(ctx, &res)
				var canceled *temporal.CanceledError
				switch {
				case errors.As(err, &canceled):
					// stopped by a job cancel: neither scored nor failed
				case err != nil:
					st.Failed++
				default:
					st.Scored++
					st.Sum += res.Score
					st.SumSq += res.Score * res.Score
					if res.Passed {
						st.Passed++
					}
				}
			})
		}
		if inflight == 0 {
			break
		}
		sel.Select(ctx)
		if now := workflow.Now(ctx); now.Sub(r.lastProgress) >= in.ProgressEvery {
			r.lastProgress = now
			r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "running")})
		}
	}

	if ctx.Err() != nil {
		r.finish(ctx, StatusCancelled, &JobError{ErrCodeCancelled, "cancelled on request"}, "cancelled")
		return EvalResult{}, temporal.NewCanceledError("cancelled on request")
	}
	if st.Next < total {
		_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
		r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "running")})
		next := in
		next.State = st
		return EvalResult{}, workflow.NewContinueAsNewError(ctx, EvalWorkflowName, next)
	}
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	if st.Scored == 0 && st.Failed > 0 {
		msg := fmt.Sprintf("all %d episodes failed", st.Failed)
		r.finish(ctx, StatusFailed, &JobError{ErrCodeAllEpisodesFailed, msg}, msg)
		return EvalResult{}, temporal.NewNonRetryableApplicationError(msg, ErrCodeAllEpisodesFailed, nil)
	}
	res := EvalResult{Episodes: total, Scored: st.Scored, Passed: st.Passed, Failed: st.Failed, ApprovedBy: st.ApprovedBy}
	if n := float64(st.Scored); n > 0 {
		res.MeanScore = st.Sum / n
		if n > 1 {
			variance := (st.SumSq - st.Sum*st.Sum/n) / (n - 1)
			res.StdErr = math.Sqrt(math.Max(variance, 0) / n)
		}
	}
	r.finish(ctx, StatusSucceeded, nil, "finished")
	return res, nil
}
