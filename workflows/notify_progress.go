package workflows

import (
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// job.progress: a job whose tenant wants it starts, when it first runs, one abandoned child per
// job (NotifyProgressWorkflowName, ID "<job id>/progress/<first run id>"). The child loops on
// its own timer: one NotifyProgress activity per window reads the job as get_* does (search
// attributes and memo, from Temporal) and sends what is new. So the job's own history gains
// no command per progress tick: one child start when it runs, and at its end one signal
// (SignalJobEnded) instead of the job.finished child start. The child then stops its windows,
// lets a delivery in flight finish and sends job.finished itself, so nothing of job.progress
// ever follows job.finished.
const (
	// NotifyProgressWorkflowName is part of history.
	NotifyProgressWorkflowName = "jobgate.NotifyProgress"
	// SignalJobEnded tells the notifier the job ended (JobEnded); part of history.
	SignalJobEnded = "jobgate.job_ended"
	// notifyProgressChange is the workflow.GetVersion change ID of a job starting its notifier.
	notifyProgressChange = "notify-job-progress"
	// progressFirstIn is the wait after a first window that failed (its worker died, Temporal
	// was unreachable); a later failed window waits as long as the one before it asked.
	progressFirstIn = authz.ProgressEveryMin
)

// JobEnded is SignalJobEnded's payload: the job.finished event to send, nil when the tenant
// does not want job.finished.
type JobEnded struct {
	Finished *contract.NotifyEvent `json:"finished,omitempty"`
}

// progressWindowOptions are one window's: a single attempt (a window that fails is skipped:
// the next carries newer progress), a dead worker caught by the heartbeat, and a cancel that
// waits for the activity to return, so the job's end is sent only after it.
func progressWindowOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Hour, // a window ends with its longest progress_every; this only bounds a stuck one
		HeartbeatTimeout:    notifyHeartbeatTimeout,
		WaitForCancellation: true,
		Summary:             "job.progress window",
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
}

// NotifyProgress is the job.progress notifier (NotifyProgressWorkflowName): windows until the
// job ends, then the job's job.finished when it wants one.
func NotifyProgress(ctx workflow.Context, in contract.NotifyProgressInput) error {
	ended := workflow.GetSignalChannel(ctx, SignalJobEnded)
	var end *JobEnded
	receive := func(c workflow.ReceiveChannel, _ bool) {
		var e JobEnded
		c.Receive(ctx, &e)
		end = &e
	}
	next := progressFirstIn
	for end == nil && ctx.Err() == nil {
		actx, stopWindow := workflow.WithCancel(ctx)
		f := workflow.ExecuteActivity(progressWindowOptions(actx), contract.NotifyProgressActivityName, in)
		var res contract.NotifyProgressResult
		var err error
		got := false
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(f, func(f workflow.Future) { err, got = f.Get(ctx, &res), true })
		sel.AddReceive(ended, func(c workflow.ReceiveChannel, more bool) {
			receive(c, more)
			stopWindow() // no retry past the end; a request in flight still finishes first
		})
		for !got {
			sel.Select(ctx)
		}
		stopWindow()
		if err != nil {
			workflow.GetLogger(ctx).Warn("job.progress window failed", "job_id", in.JobID, "error", err)
		} else {
			in.Sent = res.Sent
			if res.Done {
				break
			}
			if d := res.NextIn.D(); d > 0 { // never a busy loop, whatever a window answers
				next = d
			}
		}
		if end != nil {
			break
		}
		tctx, stopTimer := workflow.WithCancel(ctx)
		timer := workflow.NewTimerWithOptions(tctx, next, workflow.TimerOptions{Summary: "next job.progress window"})
		wait := workflow.NewSelector(ctx)
		wait.AddFuture(timer, func(workflow.Future) {})
		wait.AddReceive(ended, receive)
		wait.Select(ctx)
		stopTimer()
		if end == nil && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// History stays short across a long job; a signal already here is taken, not lost.
			var e JobEnded
			if ended.ReceiveAsync(&e) {
				end = &e
				break
			}
			return workflow.NewContinueAsNewError(ctx, NotifyProgressWorkflowName, in)
		}
	}
	// A job that ended while the last window read it as ended signals right after: a signal
	// that reaches the closing task is taken here (Temporal retries the task with it).
	if end == nil {
		var e JobEnded
		if ended.ReceiveAsync(&e) {
			end = &e
		}
	}
	if end == nil || end.Finished == nil {
		return nil
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	return workflow.ExecuteActivity(notifyOptions(dctx, "notify: "+end.Finished.Type, notifyFinishedFor),
		contract.NotifyActivityName, contract.NotifyInput{Event: *end.Finished}).Get(dctx, nil)
}

// progressNotifierID is the job's notifier's workflow ID.
func progressNotifierID(ctx workflow.Context) string {
	return workflow.GetInfo(ctx).WorkflowExecution.ID + "/progress/" + FirstRunID(ctx)
}

// startProgressNotify starts the job's job.progress notifier once per job, when it first runs
// and its tenant wants job.progress. A job cancel does not stop it: it must still send the end.
func (r *jobRun) startProgressNotify(ctx workflow.Context) {
	if r.progressAsked {
		return
	}
	r.progressAsked = true
	if workflow.GetVersion(ctx, notifyProgressChange, workflow.DefaultVersion, 1) < 1 {
		return
	}
	if !r.wants(ctx, authz.EventJobProgress) {
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	info := workflow.GetInfo(ctx)
	child := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(dctx, workflow.ChildWorkflowOptions{
		WorkflowID:            progressNotifierID(ctx),
		ParentClosePolicy:     enums.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:         "sends job.progress of " + info.WorkflowExecution.ID,
	}), NotifyProgressWorkflowName, contract.NotifyProgressInput{Tenant: r.tenant, JobID: info.WorkflowExecution.ID,
		FirstRunID: FirstRunID(ctx), Kind: kindOf(ctx), Owner: r.owner})
	if err := child.GetChildWorkflowExecution().Get(dctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("job.progress notifier not started", "error", err)
		return
	}
	r.progressNotify = true
}

// endProgressNotify tells the job's notifier the job ended, with the job.finished event to send
// after its last window (nil: none), and waits until the signal is recorded, so the notifier
// has it before the job closes. false when the notifier is gone (it stopped on its own): the
// caller then sends job.finished the usual way.
func (r *jobRun) endProgressNotify(ctx workflow.Context, finished *contract.NotifyEvent) bool {
	err := workflow.SignalExternalWorkflow(ctx, progressNotifierID(ctx), "", SignalJobEnded, JobEnded{Finished: finished}).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("job.progress notifier not told of the end", "error", err)
		return false
	}
	return true
}
