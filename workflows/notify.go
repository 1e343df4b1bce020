package workflows

import (
	"context"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// Notifications says whether a tenant has endpoints for an event type (authz.Event*). The worker
// injects it (from the tenants file); workflows ask it inside a SideEffect, so a changed
// tenants file never changes how a recorded history replays.
type Notifications interface {
	Wants(tenant, event string) bool
}

const (
	// NotifyWorkflowName delivers a job.finished event after its job has closed (an abandoned
	// child, so the delivery outlives the job and never delays its result). Part of history.
	NotifyWorkflowName = "jobgate.Notify"
	// Change IDs (workflow.GetVersion) of the notification commands, one per place: histories
	// recorded before them replay without any.
	notifyApprovalChange = "notify-approval-requested"
	notifyFinishedChange = "notify-job-finished"
	// notifyHeartbeatTimeout is how soon a delivery on a dead worker is retried elsewhere.
	notifyHeartbeatTimeout = 10 * time.Second
	// notifyFinishedFor bounds how long a job.finished event is retried (a receiver down that
	// long has missed it).
	notifyFinishedFor = 24 * time.Hour
	// NotifyVersioning is the delivery workflow's versioning behaviour (see RegisterNotify).
	NotifyVersioning = workflow.VersioningBehaviorAutoUpgrade
)

// NotifyEventID is the webhook-id of one logical event: the same on every retry, attempt and
// worker, distinct per job instance (first run ID), per input request (input ID) and per type.
func NotifyEventID(jobID, firstRunID, eventType, inputID string) string {
	return contract.EventID(jobID, firstRunID, eventType, inputID)
}

// notifyOptions are the delivery activity's: retried with backoff (1s doubling up to a minute)
// until delivered or until, when it gives up; heartbeats catch a dead worker.
func notifyOptions(ctx workflow.Context, summary string, until time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ScheduleToCloseTimeout: max(until, time.Minute),
		StartToCloseTimeout:    2 * time.Minute,
		HeartbeatTimeout:       notifyHeartbeatTimeout,
		Summary:                summary,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: time.Minute},
	})
}

// wants asks the injected Notifications in a SideEffect (recorded, so replay reads the answer).
func (r *jobRun) wants(ctx workflow.Context, event string) bool {
	var ok bool
	n, tenant := r.notifications, r.tenant
	if err := workflow.SideEffect(ctx, func(workflow.Context) any {
		return n != nil && n.Wants(tenant, event)
	}).Get(&ok); err != nil {
		return false
	}
	return ok
}

// kindOf is the kind whose workflow this run is ("" when none is).
func kindOf(ctx workflow.Context) string {
	name := workflow.GetInfo(ctx).WorkflowType.Name
	for _, k := range Kinds() {
		if k.WorkflowName == name {
			return k.Name
		}
	}
	return ""
}

// notifyApproval starts delivering approval.requested for the open request (when the tenant
// wants it) and returns what stops it. The job never waits for it; a job cancel cancels it.
func (r *jobRun) notifyApproval(ctx workflow.Context) workflow.CancelFunc {
	if workflow.GetVersion(ctx, notifyApprovalChange, workflow.DefaultVersion, 1) < 1 || r.needs == nil {
		return func() {}
	}
	if !r.wants(ctx, authz.EventApprovalRequested) {
		return func() {}
	}
	info := workflow.GetInfo(ctx)
	n := r.needs
	ev := contract.NotifyEvent{
		ID:     NotifyEventID(info.WorkflowExecution.ID, FirstRunID(ctx), authz.EventApprovalRequested, n.InputID),
		Type:   authz.EventApprovalRequested,
		Tenant: r.tenant, JobID: info.WorkflowExecution.ID, Kind: kindOf(ctx), Owner: r.owner,
		Meaning: n.Prompt, InputID: n.InputID, Approver: string(n.Approver),
		At: workflow.Now(ctx), ExpiresAt: n.ExpiresAt,
	}
	cctx, cancel := workflow.WithCancel(ctx)
	workflow.ExecuteActivity(notifyOptions(cctx, "notify: approval requested", n.ExpiresAt.Sub(workflow.Now(ctx))),
		contract.NotifyActivityName, contract.NotifyInput{Event: ev})
	return cancel
}

// notifyFinished starts an abandoned child delivering job.finished (when the tenant opted in),
// waiting only until the child has started, so the event outlives the job. A job with a
// job.progress notifier instead signals it the end (with the event, or none when not wanted):
// the notifier sends it after its last window, so no job.progress follows job.finished.
func (r *jobRun) notifyFinished(ctx workflow.Context, s Status, jerr *JobError) {
	if workflow.GetVersion(ctx, notifyFinishedChange, workflow.DefaultVersion, 1) < 1 {
		return
	}
	want := r.wants(ctx, authz.EventJobFinished)
	if !want && !r.progressNotify {
		return
	}
	info := workflow.GetInfo(ctx)
	jobID, firstRun := info.WorkflowExecution.ID, FirstRunID(ctx)
	ev := &contract.NotifyEvent{
		ID:     NotifyEventID(jobID, firstRun, authz.EventJobFinished, ""),
		Type:   authz.EventJobFinished,
		Tenant: r.tenant, JobID: jobID, Kind: kindOf(ctx), Owner: r.owner, Status: string(s),
		Meaning: "The " + kindOf(ctx) + " job of " + r.owner + " ended: " + string(s),
		At:      workflow.Now(ctx),
	}
	if jerr != nil {
		// Both: the code stays in the words people read, and is a field receivers branch on.
		ev.Meaning += " (" + jerr.Code + ")"
		ev.ErrorCode = jerr.Code
	}
	if !want {
		ev = nil
	}
	// With a job.progress notifier running, it sends the end after its last window.
	if r.progressNotify && r.endProgressNotify(ctx, ev) || ev == nil {
		return
	}
	child := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            jobID + "/notify/" + firstRun,
		ParentClosePolicy:     enums.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:         "sends job.finished of " + jobID,
	}), NotifyWorkflowName, contract.NotifyInput{Event: *ev})
	if err := child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("job.finished notification not started", "error", err)
	}
}

// Notify is the job.finished delivery workflow (NotifyWorkflowName): one activity, retried.
func Notify(ctx workflow.Context, in contract.NotifyInput) error {
	return workflow.ExecuteActivity(notifyOptions(ctx, "notify: "+in.Event.Type, notifyFinishedFor),
		contract.NotifyActivityName, in).Get(ctx, nil)
}

// NotifyActivities are the delivery activities RegisterNotify registers: *activities.Notifier,
// named by an interface so this package needs only activities/contract.
type NotifyActivities interface {
	Notify(ctx context.Context, in contract.NotifyInput) (contract.NotifyResult, error)
	NotifyProgress(ctx context.Context, in contract.NotifyProgressInput) (contract.NotifyProgressResult, error)
}

// RegisterNotify registers the delivery workflow and activity of n with r (a worker, once per
// task queue: every kind's jobs use them).
func RegisterNotify(r Registry, n NotifyActivities) {
	// AutoUpgrade: a delivery is one activity retried for up to notifyFinishedFor (a day);
	// pinned, it would keep an old release's workers alive until every receiver answered.
	r.RegisterWorkflowWithOptions(Notify, workflow.RegisterOptions{Name: NotifyWorkflowName,
		VersioningBehavior: NotifyVersioning})
	r.RegisterActivityWithOptions(n.Notify, activity.RegisterOptions{Name: contract.NotifyActivityName})
	// AutoUpgrade too: the job.progress notifier lives as long as its job, one window at a time.
	r.RegisterWorkflowWithOptions(NotifyProgress, workflow.RegisterOptions{Name: NotifyProgressWorkflowName,
		VersioningBehavior: NotifyVersioning})
	r.RegisterActivityWithOptions(n.NotifyProgress, activity.RegisterOptions{Name: contract.NotifyProgressActivityName})
}
