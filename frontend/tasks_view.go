// tasks_view.go holds the mapping of a job view onto a task (status, message, input requests,
// result, TTL).

package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"

	"github.com/jobgate/jobgate/authz"
)

// ---------------------------------------------------------------- job view → task

// taskFromView maps a job view onto a task. detailed (tasks/get) adds inputRequests; a
// job waiting for input is input_required only for a caller who may answer it, otherwise
// working with a message saying for whom it waits. v is the view the job's get_* or start_*
// rendered for p (so of p's tenant): its open request carries everything the policy and the
// elicitation need, and the task says what that one read of the job saw (no second Describe).
func (f *Frontend) taskFromView(ctx context.Context, p authz.Principal, taskID string, expiry time.Time, v *jobcore.JobView, detailed bool) (*task, *rpcError) {
	t := &task{TaskID: taskID, CreatedAt: isoTime(v.CreatedAt), LastUpdatedAt: isoTime(v.UpdatedAt), PollIntervalMs: v.PollAfterMS}
	var ni *workflows.NeedsInput
	if v.Status == workflows.StatusAwaitingInput && v.NeedsInput != nil {
		open := needsInputOf(v.NeedsInput)
		if authz.Decide(p, authz.ActionResume, workflows.PolicyJob(p.Tenant, v.Owner, open)) == authz.Allow {
			ni = open
		}
	}
	t.Status, t.StatusMessage = taskStatus(v, ni != nil)
	if ni != nil && detailed {
		t.InputRequests = f.TaskInputOf(v.Kind).Requests(ni)
	}
	end := expiry
	if v.Status.Terminal() {
		t.PollIntervalMs = 0
		if ret, ok := f.retention(ctx); ok && v.UpdatedAt.Add(ret).Before(end) {
			end = v.UpdatedAt.Add(ret) // a closed job is purged after the namespace's retention
		}
	}
	t.TTLMs = max(end.Sub(v.CreatedAt).Milliseconds(), 0)
	return t, nil
}

// needsInputOf is the open request a NeedsInputView shows (needsInputViewOf reversed: the view
// carries every field of the request).
func needsInputOf(v *jobcore.NeedsInputView) *workflows.NeedsInput {
	return &workflows.NeedsInput{InputID: v.InputID, Prompt: v.Prompt, AnswerSchema: v.AnswerSchema,
		ScopeDigest: v.ScopeDigest, Scope: v.Scope, Approver: v.Approver, AllowSelf: v.SelfApproval,
		RequestedBy: v.RequestedBy, ExpiresAt: v.ExpiresAt}
}

// taskStatus maps a job's status onto a task's: queued, running and cancelling are working;
// awaiting_input is input_required for whoever may answer (mayAnswer), else working; a
// succeeded or failed job is completed (its tool result says which); cancelled is cancelled.
// failed is only a job that failed on a fault while executing (error code internal, which no
// eval or export sets): every outcome of a job's work is a tool result, and a fault while
// reading one is a JSON-RPC error of that tasks/get (retryable), not a terminal state.
func taskStatus(v *jobcore.JobView, mayAnswer bool) (status, message string) {
	switch v.Status {
	case workflows.StatusQueued, workflows.StatusRunning:
		return taskWorking, progressMessage(v)
	case workflows.StatusCancelling:
		return taskWorking, "cancellation requested; " + progressMessage(v)
	case workflows.StatusAwaitingInput:
		if mayAnswer && v.NeedsInput != nil {
			return taskInputRequired, v.NeedsInput.Prompt
		}
		if v.NeedsInput != nil && v.NeedsInput.Approver == authz.ApproverApprover {
			return taskWorking, "waiting for an approver (jobs:approve, not the job's owner) to answer the job's input request"
		}
		return taskWorking, "waiting for the job's owner to answer the job's input request"
	case workflows.StatusSucceeded:
		return taskCompleted, "succeeded"
	case workflows.StatusFailed:
		if v.Error != nil && v.Error.Code == workflows.ErrCodeInternal {
			return taskFailed, "the job failed while executing: " + v.Error.Message
		}
		if v.Error != nil {
			return taskCompleted, "the job failed (" + v.Error.Code + "): " + v.Error.Message
		}
		return taskCompleted, "the job failed"
	case workflows.StatusCancelled:
		if v.Error != nil {
			return taskCancelled, v.Error.Message
		}
		return taskCancelled, "cancelled"
	}
	return taskWorking, string(v.Status)
}

func progressMessage(v *jobcore.JobView) string {
	pr := v.Progress
	msg := string(v.Status)
	if pr.Message != "" {
		msg = pr.Message
	}
	if pr.Total > 0 {
		msg += fmt.Sprintf(" (%d/%d %s done", pr.Done, pr.Total, pr.Unit)
		if pr.Failed > 0 {
			msg += fmt.Sprintf(", %d failed", pr.Failed)
		}
		msg += ")"
	}
	return msg
}

// failedJobResult is a failed job as the tool result of the call that started it: isError,
// the job's error as the contract's tool error JSON (text only: it does not validate against
// the tool's output schema, so no structuredContent).
func failedJobResult(v *jobcore.JobView) json.RawMessage {
	je := v.Error
	if je == nil {
		je = &workflows.JobError{Code: "failed", Message: "the job failed"}
	}
	b, err := json.Marshal(jobcore.ErrorResult(&jobcore.ToolError{Code: je.Code, Message: je.Message}))
	if err != nil {
		return nil
	}
	return withCompleteResultType(b)
}

// withCompleteResultType sets resultType "complete" on a tool result object, as a 2026-07-28
// tools/call answers it.
func withCompleteResultType(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return raw
	}
	m["resultType"] = json.RawMessage(`"complete"`)
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

// retention is the namespace's retention of closed workflows, when Temporal says.
func (f *Frontend) retention(ctx context.Context) (time.Duration, bool) {
	ctx, cancel := context.WithTimeout(ctx, f.Opts.TemporalTimeout)
	defer cancel()
	return f.Store.Retention(ctx)
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
