package workflows

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// Defaults for EvalInput fields left zero.
const (
	EpisodesPerRunDefault = 1000
	ProgressEveryDefault  = 2 * time.Second
)

const (
	// KindEval is the eval kind's name: the middle of its job IDs and its JobKind.
	KindEval = "eval"
	// EvalWorkflowName is part of history; never rename it.
	EvalWorkflowName = "jobgate.Eval"
	// evalUnit is what an eval's progress counts.
	evalUnit = "episodes"
)

// evalKind declares the eval kind: its workflow, progress unit and the one activity it runs.
func evalKind() Kind {
	return Kind{Name: KindEval, WorkflowName: EvalWorkflowName, Workflow: func(w *Workflows) any { return w.Eval },
		// Pinned: an eval runs for hours and waits up to a day for approval; it finishes on the
		// build it started on, so a release never replays its history on other code. Its
		// continue-as-new segments (EpisodesPerRun episodes each) stay on that build too: the
		// SDK's default continue-as-new behaviour inherits a pinned run's version, and the new
		// run's input (EvalInput with State) is only guaranteed readable by the code that wrote it.
		Versioning: workflow.VersioningBehaviorPinned,
		Unit:       evalUnit, Activities: []string{contract.RunEpisodeActivityName, contract.WriteEpisodesActivityName, contract.DeleteEpisodesActivityName},
		// The episode log's retention child (eval_retention.go): AutoUpgrade for the export
		// retention child's reasons (it sleeps for the suite's retention, then runs one activity).
		Auxiliary:           map[string]any{EpisodeRetentionWorkflowName: EpisodeRetention},
		AuxiliaryVersioning: map[string]workflow.VersioningBehavior{EpisodeRetentionWorkflowName: workflow.VersioningBehaviorAutoUpgrade},
		Story:               evalStory()}
}

// EvalArgs are the caller's normalized start arguments. Their digest is both the idempotency
// fingerprint and the scope an approval binds to.
type EvalArgs struct {
	Suite       string         `json:"suite"`
	Episodes    int            `json:"episodes"`
	Concurrency int            `json:"concurrency"`
	Params      map[string]any `json:"params"`
	// Budget and StopWhen are the caller's (absent when not given, so the digest of every
	// start from before them is unchanged).
	Budget   *Budget   `json:"budget,omitempty"`
	StopWhen *StopWhen `json:"stop_when,omitempty"`
}

// ApprovalPolicy is resolved from the suite when the job starts, so a later config change
// cannot alter what a running job asks for.
type ApprovalPolicy struct {
	Threshold int            `json:"threshold"` // more episodes than this need approval; 0 never
	Approver  authz.Approver `json:"approver"`
	Timeout   Duration       `json:"timeout"`
}

// EpisodePolicy bounds each episode activity.
type EpisodePolicy struct {
	Timeout          Duration `json:"timeout"`
	HeartbeatTimeout Duration `json:"heartbeat_timeout"`
	MaxAttempts      int      `json:"max_attempts"`
	// TaskQueue is the task queue the episodes are dispatched to: the suite's task_queue,
	// recorded when the job starts so the workflow reads it from its input, never from config.
	// Empty (every history from before it) is the workflow's own task queue.
	TaskQueue string `json:"task_queue,omitempty"`
	// Retention is how long the finished job's episode log is kept (the suite's
	// episode_retention, recorded at start); zero is EpisodeRetentionDefault.
	Retention Duration `json:"retention,omitempty"`
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
	ProgressEvery Duration `json:"progress_every,omitempty"`
	// State carries progress across continue-as-new; nil on the first run.
	State *EvalState `json:"state,omitempty"`
	// Fairness keys the job's episodes by tenant; zero (histories from before it) dispatches
	// without a key.
	Fairness Fairness `json:"fairness,omitzero"`
	// Cost is the suite's cost declaration and the budget in force at start, resolved by the
	// frontend (eval_budget.go); zero in histories from before costs.
	Cost CostPolicy `json:"cost,omitzero"`
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
	// Decision is the approval's record, carried across continue-as-new to the result; nil
	// when no approval was needed and in runs from before changeEvalDecision.
	Decision *DecisionRecord `json:"decision,omitempty"`
	// ProgressNotify: the job's job.progress notifier was started (by the first run), so the
	// run that ends the job tells it so (SignalJobEnded).
	ProgressNotify bool `json:"progress_notify,omitempty"`
	// Episodes are the episode log's segments written so far (eval_episodes.go): references,
	// counts and digests, never the outcomes. Empty in runs from before changeEvalEpisodes.
	Episodes []contract.EpisodeSegment `json:"episodes,omitempty"`
	// Spend is the run's cost and time tally and its budget (eval_budget.go).
	Spend Spend `json:"spend,omitzero"`
}

// EvalResult is a finished eval's summary. Small by design: it lives in history. Its JSON is
// the summary's fields (embedded, so flattened) followed by the ones below.
type EvalResult struct {
	EvalSummary
	// Decision is the record of the approval the run went on under (with its seal): the frontend
	// shows it as get_eval's result.decision. Nil when none was needed, and for runs approved
	// before changeEvalDecision.
	Decision *DecisionRecord `json:"decision,omitempty" jsonschema:"the record of the approval the run went on under"`
	// EpisodeLog is the whole episode log's reference (count and SHA-256 of its bytes): what
	// get_eval's episodes_url is bound to. Nil for runs from before changeEvalEpisodes and when
	// the worker had no artifact store.
	EpisodeLog *contract.EpisodeSegment `json:"episode_log,omitempty" jsonschema:"the episode log's count and digest"`
	// EpisodesKeptUntil is when the retention child deletes the episode log (eval_retention.go);
	// nil for runs from before changeEvalEpisodeRetention and without a log.
	EpisodesKeptUntil *time.Time `json:"episodes_kept_until,omitempty" jsonschema:"when the episode log is deleted"`
}

// estimate is the mean score of the scored episodes and its standard error (0 with fewer
// than two), from the carried sums.
func (st *EvalState) estimate() (mean, stdErr float64) {
	n := float64(st.Scored)
	if n == 0 {
		return 0, 0
	}
	mean = st.Sum / n
	if n > 1 {
		variance := (st.SumSq - st.Sum*st.Sum/n) / (n - 1)
		stdErr = math.Sqrt(math.Max(variance, 0) / n)
	}
	return mean, stdErr
}

// changeEvalDecision is the workflow.GetVersion change ID of an approved eval keeping its
// decision record for the result. Runs approved before it replay without the record (their
// continue-as-new inputs and results stay as recorded).
const changeEvalDecision = "eval-decision-record"

// evalRun is one run's in-memory state; everything durable is in EvalInput.State or history.
type evalRun struct {
	*jobRun
	in           EvalInput
	st           *EvalState
	lastProgress time.Time
	// seg are the current segment's finished episodes, in the order they finished; log is the
	// whole log's reference once the final segment is written.
	seg []contract.EpisodeOutcome
	log *contract.EpisodeSegment
}

// Eval runs in.Args.Episodes episodes with at most in.Args.Concurrency in flight, after an
// approval when the suite asks for one.
func (w *Workflows) Eval(ctx workflow.Context, in EvalInput) (EvalResult, error) {
	if in.EpisodesPerRun <= 0 {
		in.EpisodesPerRun = EpisodesPerRunDefault
	}
	if in.ProgressEvery <= 0 {
		in.ProgressEvery = Duration(ProgressEveryDefault)
	}
	first := in.State == nil
	if first {
		in.State = &EvalState{}
	}
	in.State.Runs++
	jr, err := newJobRun(ctx, w, in.Tenant, in.Owner)
	if err != nil {
		return EvalResult{}, err
	}
	r := &evalRun{jobRun: jr, in: in, st: in.State}
	jr.usage = r.usage
	// A later run never starts a notifier; it ends the first run's, if there is one.
	jr.progressAsked, jr.progressNotify = !first, in.State.ProgressNotify
	if err := r.registerEpisodesQuery(ctx); err != nil {
		return EvalResult{}, err
	}

	if first {
		if r.needsApproval() {
			a := r.in.Args
			err := r.askInput(ctx, InputRequest{
				Name: "approve",
				Prompt: fmt.Sprintf("Approve an eval of %d episodes of suite %q at concurrency %d? Nothing runs until this is answered.",
					a.Episodes, a.Suite, a.Concurrency),
				Scope:       map[string]any{"suite": a.Suite, "episodes": a.Episodes, "concurrency": a.Concurrency},
				ScopeDigest: Digest(a),
				Approver:    r.in.Approval.Approver,
				Timeout:     r.in.Approval.Timeout.D(),
			}, r.progress)
			if err != nil {
				return EvalResult{}, err
			}
			r.st.Approved, r.st.ApprovedBy = true, r.approvedBy()
			if workflow.GetVersion(ctx, changeEvalDecision, workflow.DefaultVersion, 1) >= 1 {
				r.st.Decision = r.decision
			}
		}
		r.setStatus(ctx, StatusRunning)
	}
	return r.runEpisodes(ctx)
}

// FirstRunID is the job's first run ID: the same in every run (continue-as-new), on every
// attempt and worker, and different for a new job under a reused workflow ID (after Temporal
// purged the old one). Everything a job leaves outside Temporal is scoped by it. The test
// environment sets no first run ID; its run ID stands in.
func FirstRunID(ctx workflow.Context) string {
	info := workflow.GetInfo(ctx)
	if info.FirstRunID != "" {
		return info.FirstRunID
	}
	return info.WorkflowExecution.RunID
}

// OperationID is episode i's operation ID, "<job id>#<first run id>#<i>": stable across
// retries, worker deaths and continue-as-new, and unique per job instance, so a receiver never
// answers a new job with the stored score of an earlier job of the same ID.
func OperationID(jobID, firstRunID string, i int) string {
	return fmt.Sprintf("%s#%s#%d", jobID, firstRunID, i)
}

func (r *evalRun) needsApproval() bool {
	p := r.in.Approval
	return !r.st.Approved && p.Threshold > 0 && r.in.Args.Episodes > p.Threshold
}

func (r *evalRun) progress(ctx workflow.Context, msg string) Progress {
	p := Progress{Done: r.st.Scored, Failed: r.st.Failed, Total: r.in.Args.Episodes, Unit: evalUnit, Message: msg, AsOf: workflow.Now(ctx)}
	r.progressCost(&p)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s**\n\n%d of %d episodes scored, %d failed, %d passed.",
		msg, p.Done, p.Total, p.Failed, r.st.Passed))
	return p
}

func (r *evalRun) runEpisodes(ctx workflow.Context) (EvalResult, error) {
	in, st := r.in, r.st
	total := in.Args.Episodes
	runEnd := min(total, st.Next+in.EpisodesPerRun)
	conc := max(1, in.Args.Concurrency)
	jobID, firstRun := workflow.GetInfo(ctx).WorkflowExecution.ID, FirstRunID(ctx)
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: in.Episode.Timeout.D(),
		HeartbeatTimeout:    in.Episode.HeartbeatTimeout.D(),
		WaitForCancellation: true, // "cancelled" means the episodes really stopped
		Priority:            in.Fairness.Priority(),
		// Empty: the SDK schedules on the workflow's task queue, as before the field existed.
		TaskQueue:   in.Episode.TaskQueue,
		RetryPolicy: retryPolicy(int32(max(1, in.Episode.MaxAttempts)), episodeFinalErrTypes()...),
	}
	r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "running")})
	r.lastProgress = workflow.Now(ctx)

	gate := r.newGate(ctx)
	more := func() bool {
		gate.blocked = ""
		return st.Next < runEnd && ctx.Err() == nil && !workflow.GetInfo(ctx).GetContinueAsNewSuggested() && gate.mayStart()
	}
	start := func() (workflow.Future, func(workflow.Future)) {
		i := st.Next
		st.Next++
		gate.inflight++
		scheduled := workflow.Now(ctx)
		opID := OperationID(jobID, firstRun, i)
		o := opts
		o.Summary = fmt.Sprintf("episode %d of %d", i+1, total)
		f := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), contract.RunEpisodeActivityName, contract.EpisodeInput{
			JobID: jobID, FirstRunID: firstRun, Suite: in.Args.Suite, Index: i,
			OperationID: opID, Params: in.Args.Params,
		})
		return f, func(f workflow.Future) {
			gate.inflight--
			var res contract.EpisodeResult
			err := f.Get(ctx, &res)
			var canceled *temporal.CanceledError
			switch {
			case errors.As(err, &canceled):
				// stopped by a job cancel: neither scored nor failed
			case err != nil:
				st.Failed++
				r.spent(ctx, scheduled, nil)
				r.recordEpisode(ctx, i, opID, scheduled, nil, err)
			default:
				r.spent(ctx, scheduled, res.Cost)
				st.Scored++
				st.Sum += res.Score
				st.SumSq += res.Score * res.Score
				if res.Passed {
					st.Passed++
				}
				r.recordEpisode(ctx, i, opID, scheduled, &res, nil)
			}
		}
	}
	for {
		fanOut(ctx, conc, more, start, func() {
			if now := workflow.Now(ctx); now.Sub(r.lastProgress) >= in.ProgressEvery.D() {
				r.lastProgress = now
				r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "running")})
			}
		})
		if ctx.Err() != nil || st.Next >= total {
			break
		}
		if gate.precise() {
			st.Spend.Stopped = StoppedPrecision
			break
		}
		if gate.blocked == "" {
			break // the run's segment is done: continue as new below
		}
		goOn, err := r.askBudget(ctx, gate.blocked)
		if err != nil {
			return EvalResult{}, err // cancelled while asking: the job's end is recorded
		}
		if !goOn {
			break
		}
	}

	if ctx.Err() != nil {
		r.writeEpisodes(ctx, true)
		r.keepEpisodesUntil(ctx)
		r.finish(ctx, StatusCancelled, &JobError{Code: ErrCodeCancelled, Message: "cancelled on request"}, r.progress(ctx, "cancelled"))
		return EvalResult{}, temporal.NewCanceledError("cancelled on request")
	}
	if st.Next < total && st.Spend.Stopped == "" {
		r.writeEpisodes(ctx, false)
		_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
		r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "running")})
		next := in
		st.ProgressNotify = r.progressNotify
		next.State = st
		return EvalResult{}, workflow.NewContinueAsNewError(ctx, EvalWorkflowName, next)
	}
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	r.writeEpisodes(ctx, true)
	kept := r.keepEpisodesUntil(ctx)
	if st.Scored == 0 && st.Failed > 0 {
		msg := fmt.Sprintf("all %d episodes failed", st.Failed)
		r.finish(ctx, StatusFailed, &JobError{Code: ErrCodeAllEpisodesFailed, Message: msg}, r.progress(ctx, msg))
		return EvalResult{}, temporal.NewNonRetryableApplicationError(msg, ErrCodeAllEpisodesFailed, nil)
	}
	res := EvalResult{EvalSummary: EvalSummary{Episodes: total, Scored: st.Scored, Passed: st.Passed, Failed: st.Failed,
		ApprovedBy: st.ApprovedBy}, Decision: st.Decision, EpisodeLog: r.log, EpisodesKeptUntil: kept}
	res.MeanScore, res.StdErr = st.estimate()
	r.summarizeSpend(&res.EvalSummary)
	msg := "finished"
	if st.Spend.Stopped != "" {
		msg = "stopped early (" + st.Spend.Stopped + ")"
	}
	r.finish(ctx, StatusSucceeded, nil, r.progress(ctx, msg))
	return res, nil
}
