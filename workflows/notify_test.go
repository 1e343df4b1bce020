package workflows

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// wantsOf is a tenant's configured notification events.
type wantsOf map[string][]string

func (w wantsOf) Wants(tenant, event string) bool {
	for _, e := range w[tenant] {
		if e == event {
			return true
		}
	}
	return false
}

// notifyHarness runs an eval whose tenant has endpoints for events, recording every delivery
// the workflows ask for (the Notify activity, from the job or from its job.finished child).
func notifyHarness(t *testing.T, events ...string) (*harness, func() []contract.NotifyEvent) {
	h, got, _ := notifyHarnessTimeouts(t, events...)
	return h, got
}

// notifyHarnessTimeouts is notifyHarness that also gives each delivery's schedule-to-close
// timeout (how long it is retried).
func notifyHarnessTimeouts(t *testing.T, events ...string) (*harness, func() []contract.NotifyEvent, func() []time.Duration) {
	var mu sync.Mutex
	var got []contract.NotifyEvent
	var bounds []time.Duration
	w := &Workflows{Resume: testWorkflows.Resume, Notify: wantsOf{"acme": events}}
	h := &harness{jobHarness: newJobHarness(t, KindEval, testJobID, w, testActs, func(env *testsuite.TestWorkflowEnvironment) {
		RegisterNotify(env, &activities.Notifier{})
		env.OnActivity(contract.NotifyActivityName, mock.Anything, mock.Anything).Return(
			func(ctx context.Context, in contract.NotifyInput) (contract.NotifyResult, error) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, in.Event)
				bounds = append(bounds, activity.GetInfo(ctx).ScheduleToCloseTimeout)
				return contract.NotifyResult{}, nil
			})
	})}
	return h, func() []contract.NotifyEvent {
			mu.Lock()
			defer mu.Unlock()
			return append([]contract.NotifyEvent(nil), got...)
		}, func() []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return append([]time.Duration(nil), bounds...)
		}
}

// TestNotify_ApprovalRequestedAndFinished: the owner's request is announced once, under the
// event ID derived from job, run and input ID, with the prompt as meaning; the job goes on
// without waiting, and its end goes out (opted in) from the child.
func TestNotify_ApprovalRequestedAndFinished(t *testing.T) {
	h, events := notifyHarness(t, authz.EventApprovalRequested, authz.EventJobFinished)
	h.resumeAt(10*time.Minute, "approve", h.answer(owner, DecisionApprove))
	h.execute(evalInput(6, 2))
	res := h.result()
	assert.Equal(t, 6, res.Scored)
	got := events()
	require.Len(t, got, 2, "%+v", got)
	asked := h.askedInputs()
	require.Len(t, asked, 1)
	ev := got[0]
	assert.Equal(t, authz.EventApprovalRequested, ev.Type)
	assert.Equal(t, NotifyEventID(testJobID, testRunID, authz.EventApprovalRequested, asked[0].InputID), ev.ID)
	assert.Equal(t, asked[0].Prompt, ev.Meaning)
	assert.Equal(t, "eval", ev.Kind)
	assert.Equal(t, "owner", ev.Approver)
	assert.Equal(t, asked[0].ExpiresAt, ev.ExpiresAt)
	fin := got[1]
	assert.Equal(t, authz.EventJobFinished, fin.Type)
	assert.Equal(t, string(StatusSucceeded), fin.Status)
	assert.Empty(t, fin.ErrorCode, "a succeeded job has no error code")
	assert.Equal(t, NotifyEventID(testJobID, testRunID, authz.EventJobFinished, ""), fin.ID)
	assert.NotEqual(t, ev.ID, fin.ID)
}

// TestNotify_OnlyWhatTheTenantWants: without job.finished in the tenant's events no child is
// started; a tenant without endpoints schedules nothing at all.
func TestNotify_OnlyWhatTheTenantWants(t *testing.T) {
	h, events := notifyHarness(t, authz.EventApprovalRequested)
	h.resumeAt(10*time.Minute, "approve", h.answer(owner, DecisionApprove))
	h.execute(evalInput(6, 2))
	h.result()
	if got := events(); len(got) != 1 || got[0].Type != authz.EventApprovalRequested {
		t.Fatalf("events %+v, want only approval.requested", got)
	}

	h2, events2 := notifyHarness(t)
	h2.resumeAt(10*time.Minute, "approve", h2.answer(owner, DecisionApprove))
	h2.execute(evalInput(6, 2))
	h2.result()
	assert.Empty(t, events2())
	assert.Zero(t, h2.count(contract.NotifyActivityName))
}

// TestNotify_ZeroTimeoutNotAnnounced: a request with a zero approval timeout is not a request
// that never expires: its timer fires at once and the job fails as expired, and the delivery,
// scheduled and cancelled in the same workflow task, is dropped before it is sent (nothing
// "expires now" goes out, nothing is retried for a minute). A request with a timeout carries
// its expiry and is retried until then. Review finding 8 (guard: the finding does not occur).
func TestNotify_ZeroTimeoutNotAnnounced(t *testing.T) {
	h, events, _ := notifyHarnessTimeouts(t, authz.EventApprovalRequested)
	in := evalInput(6, 2)
	in.Approval.Timeout = 0
	h.execute(in)
	require.True(t, h.env.IsWorkflowCompleted())
	require.ErrorContains(t, h.env.GetWorkflowError(), "not answered in time")
	assert.Empty(t, events())
	assert.Zero(t, h.count(contract.NotifyActivityName))

	h2, events2, bounds2 := notifyHarnessTimeouts(t, authz.EventApprovalRequested)
	h2.resumeAt(10*time.Minute, "approve", h2.answer(owner, DecisionApprove))
	h2.execute(evalInput(6, 2))
	h2.result()
	require.Len(t, events2(), 1)
	assert.Equal(t, h2.askedInputs()[0].ExpiresAt, events2()[0].ExpiresAt)
	assert.Equal(t, []time.Duration{time.Hour}, bounds2())
}

// TestNotify_FinishedCarriesErrorCode: a job that ends without succeeding tells receivers its
// error code as a field (the job view's error.code), not only inside the words of Meaning (a
// succeeded job's event has none: TestNotify_ApprovalRequestedAndFinished).
func TestNotify_FinishedCarriesErrorCode(t *testing.T) {
	h, events, _ := notifyHarnessTimeouts(t, authz.EventJobFinished)
	in := evalInput(6, 2)
	in.Approval.Timeout = 0 // expires at once: the job fails with input_expired
	h.execute(in)
	require.True(t, h.env.IsWorkflowCompleted())
	got := events()
	require.Len(t, got, 1, "%+v", got)
	assert.Equal(t, authz.EventJobFinished, got[0].Type)
	assert.Equal(t, string(StatusFailed), got[0].Status)
	assert.Equal(t, ErrCodeInputExpired, got[0].ErrorCode)
	assert.Contains(t, got[0].Meaning, "("+ErrCodeInputExpired+")")
}
