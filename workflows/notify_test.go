package workflows

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/jobgate/jobgate/activities"
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
func notifyHarness(t *testing.T, events ...string) (*harness, func() []activities.NotifyEvent) {
	var mu sync.Mutex
	var got []activities.NotifyEvent
	w := &Workflows{Resume: testWorkflows.Resume, Notify: wantsOf{"acme": events}}
	h := &harness{jobHarness: newJobHarness(t, KindEval, testJobID, w, testActs, func(env *testsuite.TestWorkflowEnvironment) {
		RegisterNotify(env, &activities.Notifier{})
		env.OnActivity(activities.NotifyActivityName, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in activities.NotifyInput) (activities.NotifyResult, error) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, in.Event)
				return activities.NotifyResult{}, nil
			})
	})}
	return h, func() []activities.NotifyEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]activities.NotifyEvent(nil), got...)
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
	assert.Zero(t, h2.count(activities.NotifyActivityName))
}
