package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
)

// firstState sends UpdateFirstState as the run starts (as Update-With-Start does) and records
// its outcome.
type firstStateOutcome struct {
	accepted, completed bool
	status              Status
	err                 error
}

func (h *harness) firstState() *firstStateOutcome {
	out := &firstStateOutcome{}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(UpdateFirstState, "first-state-1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { out.err = err },
			OnAccept: func() { out.accepted = true },
			OnComplete: func(v any, err error) {
				out.completed, out.err = true, err
				if err == nil {
					out.status = v.(Status)
				}
			},
		})
	}, 0)
	return out
}

// The first-state update answers with the run's first status past queued: the owner's open
// input request for an eval over the approval threshold, running for one under it.
func TestFirstState(t *testing.T) {
	for _, c := range []struct {
		name     string
		episodes int
		want     Status
	}{
		{"awaiting its owner", 10, StatusAwaitingInput},
		{"under the threshold", 2, StatusRunning},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			out := h.firstState()
			if c.want == StatusAwaitingInput {
				h.resumeAt(time.Minute, "r1", h.answer(owner, DecisionReject))
			}
			h.execute(evalInput(c.episodes, 1))
			require.True(t, h.env.IsWorkflowCompleted())
			require.True(t, out.accepted && out.completed, "update accepted %v completed %v (%v)", out.accepted, out.completed, out.err)
			require.NoError(t, out.err)
			require.Equal(t, c.want, out.status)
		})
	}
}
