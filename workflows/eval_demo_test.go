package workflows

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// runToCompletion executes the job, following continue-as-new, and returns every run's input.
func runToCompletion(t *testing.T, in EvalInput, setup func(h *harness)) (runs []EvalInput, hs []*harness) {
	t.Helper()
	for range 10 {
		h := newHarness(t)
		setup(h)
		runs = append(runs, in)
		hs = append(hs, h)
		h.execute(in)
		require.True(t, h.env.IsWorkflowCompleted())
		err := h.env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if !errors.As(err, &can) {
			return runs, hs
		}
		require.Equal(t, EvalWorkflowName, can.WorkflowType.Name)
		var next EvalInput
		require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
		in = next
	}
	t.Fatal("no end after 10 runs")
	return nil, nil
}

func TestEval_ContinueAsNew(t *testing.T) {
	t.Run("CarriesTallies", func(t *testing.T) {
		scores := map[int]float64{0: 0.1, 1: 0.9, 2: 0.5, 3: 0.3, 4: 0.7, 5: 0.2, 6: 0.8}
		in := evalInput(7, 2)
		in.Approval.Threshold = 0
		in.EpisodesPerRun = 3
		runs, hs := runToCompletion(t, in, func(h *harness) {
			h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(
				func(_ context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
					if in.Index == 3 {
						return contract.EpisodeResult{}, episodeFailed(3)
					}
					s := scores[in.Index]
					return contract.EpisodeResult{Score: s, Passed: s >= 0.5}, nil
				})
		})
		require.Len(t, runs, 3)
		assert.Nil(t, runs[0].State)
		require.NotNil(t, runs[1].State)
		assert.Equal(t, EvalState{Next: 3, Scored: 3, Passed: 2, Sum: 1.5, SumSq: 0.01 + 0.81 + 0.25, Runs: 1}, *runs[1].State)
		require.NotNil(t, runs[2].State)
		assert.Equal(t, 6, runs[2].State.Next)
		assert.Equal(t, 5, runs[2].State.Scored)
		assert.Equal(t, 1, runs[2].State.Failed)
		assert.Equal(t, 2, runs[2].State.Runs)
		for _, r := range runs[1:] {
			assert.Equal(t, 3, r.EpisodesPerRun)
			assert.Equal(t, in.Args, r.Args)
		}

		var all []int
		for _, h := range hs {
			all = append(all, h.startedIndexes()...)
		}
		sort.Ints(all)
		assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6}, all, "every episode runs once across runs")
		assert.Equal(t, []int{0, 1, 2}, hs[0].startedIndexes())
		assert.Equal(t, []int{6}, hs[2].startedIndexes())

		res := hs[2].result()
		assert.Equal(t, 7, res.Episodes)
		assert.Equal(t, 6, res.Scored)
		assert.Equal(t, 1, res.Failed)
		assert.Equal(t, 4, res.Passed)
		assert.InDelta(t, (0.1+0.9+0.5+0.7+0.2+0.8)/6, res.MeanScore, 1e-12)
		assert.Equal(t, []Status{StatusRunning}, hs[0].statusSeq())
		assert.Empty(t, hs[1].statusSeq(), "a continued run keeps the running status")
		assert.Equal(t, []Status{StatusSucceeded}, hs[2].statusSeq())
		assert.Equal(t, 7, hs[2].lastProgress().Done+hs[2].lastProgress().Failed)
	})

	t.Run("ApprovalSurvives", func(t *testing.T) {
		in := evalInput(7, 3) // above threshold 5
		in.EpisodesPerRun = 3
		var approvals []*resumeOutcome
		runs, hs := runToCompletion(t, in, func(h *harness) {
			h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
				Return(contract.EpisodeResult{Score: 0.6, Passed: true}, nil)
			if len(approvals) == 0 {
				approvals = append(approvals, h.resumeAt(time.Minute, "u1", h.answer(owner, DecisionApprove)))
			}
		})
		require.Len(t, runs, 3)
		require.True(t, approvals[0].accepted)
		for i, r := range runs[1:] {
			assert.True(t, r.State.Approved, "run %d", i+2)
			assert.Equal(t, "ann", r.State.ApprovedBy)
		}
		for _, h := range hs[1:] {
			assert.Empty(t, h.askedInputs(), "a continued run never asks again")
			assert.NotContains(t, h.statusSeq(), StatusAwaitingInput)
		}
		res := hs[2].result()
		assert.Equal(t, 7, res.Scored)
		assert.Equal(t, "ann", res.ApprovedBy)
	})
}

func demoParams(failRate float64) map[string]any {
	return map[string]any{"episode_ms": float64(0), "fail_rate": failRate}
}

func runDemoEpisode(t *testing.T, in contract.EpisodeInput) (contract.EpisodeResult, error) {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(testActs)
	v, err := env.ExecuteActivity(testActs.RunEpisode, in)
	if err != nil {
		return contract.EpisodeResult{}, err
	}
	var res contract.EpisodeResult
	require.NoError(t, v.Get(&res))
	return res, nil
}

func TestDemoActivity_DeterministicPerOperationID(t *testing.T) {
	in := func(i int) contract.EpisodeInput {
		return contract.EpisodeInput{JobID: testJobID, Suite: "demo", Index: i,
			OperationID: fmt.Sprintf("%s#%d", testJobID, i), Params: demoParams(0.3)}
	}
	t.Run("SameOperationIDSameOutcome", func(t *testing.T) {
		for i := range 10 {
			r1, err1 := runDemoEpisode(t, in(i))
			r2, err2 := runDemoEpisode(t, in(i))
			assert.Equal(t, r1, r2, "episode %d", i)
			assert.Equal(t, err1 == nil, err2 == nil, "episode %d", i)
			if err1 != nil {
				requireAppErrType(t, err1, contract.ErrTypeEpisodeFailed)
				requireAppErrType(t, err2, contract.ErrTypeEpisodeFailed)
			}
		}
	})
	t.Run("DifferentOperationIDsVary", func(t *testing.T) {
		scores := map[float64]bool{}
		failed, passed := 0, 0
		for i := range 60 {
			r, err := runDemoEpisode(t, in(i))
			if err != nil {
				failed++
				continue
			}
			scores[r.Score] = true
			if r.Passed {
				passed++
			}
			assert.Equal(t, r.Score >= contract.PassThresholdDefault, r.Passed)
		}
		assert.Greater(t, len(scores), 10, "scores vary with the operation ID")
		assert.Greater(t, failed, 0)
		assert.Less(t, failed, 60)
		assert.Greater(t, passed, 0)
	})
	t.Run("ZeroFailRateNeverFails", func(t *testing.T) {
		for i := range 30 {
			x := in(i)
			x.Params = demoParams(0)
			_, err := runDemoEpisode(t, x)
			require.NoError(t, err, "episode %d", i)
		}
	})
}

func TestEval_RealDemoActivity(t *testing.T) {
	const n = 24
	in := evalInput(n, 4)
	in.Args.Params = demoParams(0.3)
	in.Approval.Threshold = 0

	// Expected tallies, computed episode by episode from the activity alone.
	var want EvalResult
	var sum float64
	for i := range n {
		// The test environment's run ID is the job's first run ID.
		r, err := runDemoEpisode(t, contract.EpisodeInput{JobID: testJobID, Suite: "demo", Index: i,
			OperationID: OperationID(testJobID, testRunID, i), Params: in.Args.Params})
		if err != nil {
			want.Failed++
			continue
		}
		want.Scored++
		sum += r.Score
		if r.Passed {
			want.Passed++
		}
	}
	require.Greater(t, want.Failed, 0, "fail_rate 0.3 should fail some of %d episodes", n)

	h := newHarness(t)
	h.execute(in)
	res := h.result()
	assert.Equal(t, n, res.Episodes)
	assert.Equal(t, want.Scored, res.Scored)
	assert.Equal(t, want.Failed, res.Failed)
	assert.Equal(t, want.Passed, res.Passed)
	assert.InDelta(t, sum/float64(want.Scored), res.MeanScore, 1e-12)
	assert.Equal(t, n, h.startedCount(), "simulated failures are final, never retried")
}
