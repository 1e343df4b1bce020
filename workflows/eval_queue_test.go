package workflows

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
)

// TestEval_EpisodesOnInputTaskQueue: episodes go to the task queue recorded in the input (the
// suite's task_queue); empty, as in every history from before the field, is the workflow's own.
func TestEval_EpisodesOnInputTaskQueue(t *testing.T) {
	for _, c := range []struct{ queue, want string }{
		{"", "default-test-taskqueue"},
		{"jobgate-episodes", "jobgate-episodes"},
	} {
		h := newHarness(t)
		var (
			mu     sync.Mutex
			queues []string
		)
		h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
			if info.ActivityType.Name != "RunEpisode" {
				return // the episode log is written on the workflow's own queue
			}
			mu.Lock()
			defer mu.Unlock()
			queues = append(queues, info.TaskQueue)
		})
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			Return(scoresMock(map[int]float64{0: 1, 1: 1, 2: 1}))
		in := evalInput(3, 3)
		in.Episode.TaskQueue = c.queue
		h.execute(in)
		require.NoError(t, h.env.GetWorkflowError())
		mu.Lock()
		require.Equal(t, []string{c.want, c.want, c.want}, slices.Clone(queues), "input task queue %q", c.queue)
		mu.Unlock()
	}
}
