package tests

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// acDescribe describes the job's current run.
func acDescribe(t *testing.T, b *testBundle, id string) *workflowservice.DescribeWorkflowExecutionResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := b.temporal.DescribeWorkflowExecution(ctx, id, "")
	must(t, err)
	return d
}

// acStartedEpisodes counts the job's pending activities that a worker has started.
func acStartedEpisodes(t *testing.T, b *testBundle, id string) int {
	t.Helper()
	n := 0
	for _, pa := range acDescribe(t, b, id).GetPendingActivities() {
		if pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
			n++
		}
	}
	return n
}

// acCheckCancelledHistory asserts the history of a job cancelled while `started` episodes ran:
// each of them ended ActivityTaskCanceled, none completed, and nothing was scheduled after the
// cancel request. It returns the cancel request event.
func acCheckCancelledHistory(t *testing.T, b *testBundle, id string, started int) *historypb.HistoryEvent {
	t.Helper()
	evs := acHistory(t, b, id)
	var req *historypb.HistoryEvent
	scheduled := map[int64]bool{}
	for _, e := range evs {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
			if req == nil {
				req = e
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if req != nil {
				t.Errorf("episode scheduled (event %d) after the cancel request (event %d)", e.GetEventId(), req.GetEventId())
			}
			scheduled[e.GetEventId()] = true
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
			if !scheduled[e.GetActivityTaskCanceledEventAttributes().GetScheduledEventId()] {
				t.Errorf("ActivityTaskCanceled %d names no scheduled episode", e.GetEventId())
			}
		}
	}
	if req == nil {
		t.Fatal("history has no WorkflowExecutionCancelRequested event")
	}
	if n := len(scheduled); n != started {
		t.Errorf("history has %d ActivityTaskScheduled events, want %d", n, started)
	}
	if n := acCount(evs, enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED); n != started {
		t.Errorf("history has %d ActivityTaskCanceled events, want %d", n, started)
	}
	if n := acCount(evs, enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED,
		enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT); n != 0 {
		t.Errorf("history has %d completed/failed/timed-out episodes, want 0", n)
	}
	if n := acCount(evs, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED); n != 1 {
		t.Errorf("history has %d WorkflowExecutionCanceled events, want 1", n)
	}
	return req
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ana0 := b.session(ana, 0, "")
	ana1 := b.session(ana, 1, "")

	v := mustView(t, call(t, ana0, "start_eval", acStartArgs(uniqueKey(t), "demo", 6, 3, map[string]any{"episode_ms": 60000, "fail_rate": 0})))
	eventually(t, 20*time.Second, "3 started episodes", func() bool { return acStartedEpisodes(t, b, v.JobID) == 3 })
	if s := mustView(t, call(t, ana1, "get_eval", map[string]any{"handle": v.Handle})).Status; s != workflows.StatusRunning {
		t.Fatalf("status with episodes running = %s", s)
	}

	c := mustView(t, call(t, ana1, "cancel_eval", map[string]any{"handle": v.Handle, "reason": "wrong model"}))
	if c.Status != workflows.StatusCancelling && c.Status != workflows.StatusCancelled {
		t.Fatalf("cancel_eval status = %s, want cancelling or cancelled", c.Status)
	}
	done := waitStatus(t, ana0, v.Handle, workflows.StatusCancelled, 20*time.Second)
	if done.Error == nil || done.Error.Code != workflows.ErrCodeCancelled {
		t.Fatalf("error = %+v, want code cancelled", done.Error)
	}
	if done.Result != nil || done.PollAfterMS != 0 || done.Progress.Done != 0 || done.Progress.Failed != 0 {
		t.Errorf("final view: result=%v poll_after_ms=%d progress=%+v", done.Result, done.PollAfterMS, done.Progress)
	}
	d := acDescribe(t, b, v.JobID)
	if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED {
		t.Errorf("execution status %s", st)
	}
	if n := len(d.GetPendingActivities()); n != 0 {
		t.Errorf("%d pending activities remain after cancel", n)
	}
	req := acCheckCancelledHistory(t, b, v.JobID, 3)
	if cause := req.GetWorkflowExecutionCancelRequestedEventAttributes().GetCause(); !strings.Contains(cause, "wrong model") ||
		!strings.Contains(cause, "ana") {
		t.Errorf("cancel request cause %q does not say who and why", cause)
	}

	t.Run("CancelAgainIsIdempotent", func(t *testing.T) {
		again := mustView(t, call(t, ana0, "cancel_eval", map[string]any{"handle": v.Handle}))
		if again.Status != workflows.StatusCancelled || again.Error == nil || again.Error.Code != workflows.ErrCodeCancelled {
			t.Fatalf("second cancel: status %s error %+v", again.Status, again.Error)
		}
		if n := acCount(acHistory(t, b, v.JobID), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED); n != 1 {
			t.Errorf("history has %d cancel requests, want 1", n)
		}
	})

	t.Run("CancelSucceededJobReportsIt", func(t *testing.T) {
		s := mustView(t, call(t, ana0, "start_eval", acStartArgs(uniqueKey(t), "demo", 2, 0, map[string]any{"episode_ms": 20, "fail_rate": 0})))
		fin := waitStatus(t, ana0, s.Handle, workflows.StatusSucceeded, 30*time.Second)
		c := mustView(t, call(t, ana1, "cancel_eval", map[string]any{"handle": s.Handle, "reason": "too late"}))
		if c.Status != workflows.StatusSucceeded || c.Error != nil {
			t.Fatalf("cancel of a succeeded job: status %s error %+v", c.Status, c.Error)
		}
		// The episodes link is sealed afresh on every read (its expiry truncated to the second):
		// everything else of the result is what the job wrote.
		want, _ := json.Marshal(fin.Result)
		got, _ := json.Marshal(c.Result)
		if freshSeals.ReplaceAllString(string(got), "SEAL") != freshSeals.ReplaceAllString(string(want), "SEAL") {
			t.Fatalf("result changed by cancel: %s, was %s", got, want)
		}
		if n := acCount(acHistory(t, b, s.JobID), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED); n != 0 {
			t.Errorf("history of a finished job has %d cancel requests", n)
		}
	})

	t.Run("OtherPrincipalCannotCancel", func(t *testing.T) {
		s := mustView(t, call(t, ana0, "start_eval", acStartArgs(uniqueKey(t), "demo", acOverThreshold, 0, acFast)))
		acAwaitInput(t, ana0, s.Handle, authz.ApproverOwner)
		mustErr(t, call(t, b.session(bo, 1, ""), "cancel_eval", map[string]any{"handle": s.Handle}), jobcore.CodeNotFound)
		if st := mustView(t, call(t, ana0, "get_eval", map[string]any{"handle": s.Handle})).Status; st != workflows.StatusAwaitingInput {
			t.Fatalf("status after a refused cancel = %s", st)
		}
		if n := acCount(acHistory(t, b, s.JobID), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED); n != 0 {
			t.Errorf("refused cancel reached history")
		}
		// ops (jobs:admin) may cancel any job of the tenant.
		mustView(t, call(t, b.session(ops, 0, ""), "cancel_eval", map[string]any{"handle": s.Handle, "reason": "cleanup"}))
		waitStatus(t, ana0, s.Handle, workflows.StatusCancelled, 20*time.Second)
	})
}

func TestCancelWhileAwaitingInput(t *testing.T) {
	t.Parallel()
	b, cs, v, w := acAwaitingOwner(t)

	c := mustView(t, call(t, b.session(ana, 1, ""), "cancel_eval", map[string]any{"handle": v.Handle, "reason": "not needed"}))
	if c.Status != workflows.StatusCancelling && c.Status != workflows.StatusCancelled {
		t.Fatalf("cancel_eval status = %s", c.Status)
	}
	done := waitStatus(t, cs, v.Handle, workflows.StatusCancelled, 20*time.Second)
	if done.Error == nil || done.Error.Code != workflows.ErrCodeCancelled {
		t.Fatalf("error = %+v, want code cancelled", done.Error)
	}
	if done.NeedsInput != nil {
		t.Errorf("needs_input still present: %+v", done.NeedsInput)
	}
	acWantCounts(t, acHistory(t, b, v.JobID), map[enumspb.EventType]int{
		enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:     0,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: 1,
	})
	// The closed request cannot be answered any more.
	mustErr(t, call(t, cs, "resume_eval", acResumeArgs(w, "approve", nil)), jobcore.CodeInputNotExpected)
}
