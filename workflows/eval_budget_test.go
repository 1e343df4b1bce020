package workflows

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// costMock scores every episode 0.7 and reports cost(i).
func costMock(cost func(i int) float64) func(context.Context, contract.EpisodeInput) (contract.EpisodeResult, error) {
	return func(_ context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
		c := cost(in.Index)
		return contract.EpisodeResult{Score: 0.7, Passed: true, Attempt: 1, Cost: &c}, nil
	}
}

func budgetInput(episodes, conc int, b Budget, worst float64) EvalInput {
	in := evalInput(episodes, conc)
	in.Approval.Threshold = 0
	in.Args.Budget = &b
	in.Cost = CostPolicy{Unit: "usd", WorstEpisode: worst, Budget: &b, BudgetFrom: "start_eval"}
	return in
}

// extendAnswer approves the open budget request raising it by ext (nil: by its default).
func (h *jobHarness) extendAnswer(ext *Budget) func() ResumeRequest {
	return func() ResumeRequest {
		r := h.answer(owner, DecisionApprove)()
		r.ExtendBy = ext
		return r
	}
}

// TestEval_BudgetAsksExtendsAndStops: with a declared worst case the run never passes its
// budget; at it, it asks its owner (awaiting_input, the prompt saying what was spent, on how
// many episodes, and the estimate), goes on by extend_by once approved, and on reject ends
// succeeded with a partial result marked stopped: "budget".
func TestEval_BudgetAsksExtendsAndStops(t *testing.T) {
	h := newHarness(t)
	h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(costMock(func(int) float64 { return 0.1 }))
	in := budgetInput(10, 3, Budget{MaxCost: 0.35}, 0.1)
	var atFirstAsk, atSecondAsk int
	h.env.RegisterDelayedCallback(func() { atFirstAsk = h.startedCount() }, 5*time.Minute)
	first := h.resumeAt(10*time.Minute, "u1", h.extendAnswer(&Budget{MaxCost: 0.4}))
	h.env.RegisterDelayedCallback(func() { atSecondAsk = h.startedCount() }, 15*time.Minute)
	second := h.resumeAt(20*time.Minute, "u2", h.answer(owner, DecisionReject))
	h.execute(in)

	require.True(t, first.accepted, "extend rejected: %v", first.rejectErr)
	require.True(t, second.accepted, "reject rejected: %v", second.rejectErr)
	assert.Equal(t, 3, atFirstAsk, "3 episodes of 0.1 fit 0.35; a 4th would pass it")
	assert.Equal(t, 7, atSecondAsk, "raised by 0.4 to 0.75: 4 more fit")
	res := h.result()
	assert.Equal(t, 7, res.Scored)
	assert.Equal(t, StoppedBudget, res.Stopped)
	assert.Equal(t, 3, res.Skipped)
	assert.Equal(t, "ann", res.StoppedBy)
	require.NotNil(t, res.CostSoFar)
	assert.InDelta(t, 0.7, *res.CostSoFar, 1e-9)
	assert.LessOrEqual(t, *res.CostSoFar, 0.75+1e-9, "never past the budget with a declared worst case")
	assert.Equal(t, "usd", res.CostUnit)
	require.NotNil(t, res.CostPerEpisode)
	assert.InDelta(t, 0.1, *res.CostPerEpisode, 1e-9)
	require.NotNil(t, res.Budget)
	assert.InDelta(t, 0.75, res.Budget.MaxCost, 1e-9)
	require.NotNil(t, res.BudgetOvershoot)
	assert.Zero(t, *res.BudgetOvershoot)
	assert.Equal(t, []Status{StatusRunning, StatusAwaitingInput, StatusRunning, StatusAwaitingInput, StatusSucceeded}, h.statusSeq())

	asked := h.askedInputs()
	require.Len(t, asked, 2)
	assert.Equal(t, "Spent 0.30 usd on 3 of 10 episodes (mean 0.700 ± 0.000). Raise the budget?", asked[0].Prompt)
	assert.Equal(t, "Spent 0.70 usd on 7 of 10 episodes (mean 0.700 ± 0.000). Raise the budget?", asked[1].Prompt)
	assert.Regexp(t, `^budget-1-[0-9a-f]{12}$`, asked[0].InputID)
	assert.Regexp(t, `^budget-2-[0-9a-f]{12}$`, asked[1].InputID)
	assert.Equal(t, authz.ApproverOwner, asked[0].Approver)
	assert.Equal(t, Digest(asked[0].Scope), asked[0].ScopeDigest)
	assert.Contains(t, asked[0].AnswerSchema["properties"], "extend_by")
	u, ok := h.lastMemo(MemoUsage)
	require.True(t, ok, "usage recorded at the end")
	require.IsType(t, Usage{}, u)
	assert.Equal(t, 7, u.(Usage).Episodes)
	assert.InDelta(t, 0.7, u.(Usage).Cost["usd"], 1e-9)
	p := h.lastProgress()
	require.NotNil(t, p.CostSoFar)
	assert.InDelta(t, 0.7, *p.CostSoFar, 1e-9)
	assert.Equal(t, "usd", p.CostUnit)
}

// TestEval_BudgetApproveDefaultAndExpiry: approving without extend_by (a page, MRTR, Tasks)
// raises the budget by its first amount; an unanswered budget request ends the job succeeded,
// stopped by the budget, never failed.
func TestEval_BudgetApproveDefaultAndExpiry(t *testing.T) {
	h := newHarness(t)
	h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(costMock(func(int) float64 { return 1 }))
	in := budgetInput(10, 2, Budget{MaxCost: 2}, 1)
	in.Approval.Timeout = Duration(time.Hour)
	got := h.resumeAt(10*time.Minute, "u1", h.extendAnswer(nil))
	h.execute(in)
	require.True(t, got.accepted, "%v", got.rejectErr)
	res := h.result()
	assert.Equal(t, 4, res.Scored, "2, then 2 more after the default raise of 2")
	assert.Equal(t, StoppedBudget, res.Stopped)
	assert.Empty(t, res.StoppedBy, "nobody declined: the second request expired")
	assert.Equal(t, 6, res.Skipped)
	assert.Nil(t, h.lastJobError())
}

// TestEval_BudgetRunningMax: without a declared worst case the first episode runs alone (its
// cost unknown), then the largest cost seen stands in; an episode dearer than any before can
// pass the budget, by at most what the episodes in flight cost beyond that maximum, and the
// result reports it.
func TestEval_BudgetRunningMax(t *testing.T) {
	h := newHarness(t)
	cost := func(i int) float64 { return []float64{0.1, 0.1, 0.1, 0.5, 0.5, 0.5, 0.1, 0.1}[i] }
	h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(costMock(cost))
	in := budgetInput(8, 4, Budget{MaxCost: 1}, 0)
	h.resumeAt(10*time.Minute, "u1", h.answer(owner, DecisionReject))
	h.execute(in)
	res := h.result()
	require.NotNil(t, res.CostSoFar)
	require.NotNil(t, res.BudgetOvershoot)
	assert.Equal(t, StoppedBudget, res.Stopped)
	assert.InDelta(t, math.Max(0, *res.CostSoFar-1), *res.BudgetOvershoot, 1e-9)
	// In flight at most 4 episodes, each at most 0.5 - 0.1 above the maximum it was scheduled under.
	assert.LessOrEqual(t, *res.CostSoFar, 1+4*0.4+1e-9)
	sum := 0.0
	for i := range res.Scored + res.Failed {
		sum += cost(i)
	}
	assert.InDelta(t, sum, *res.CostSoFar, 1e-9, "the tally is the sum of the costs the episodes reported")
}

// TestEval_BudgetResumeRefused: extend_by only answers a budget request, only with approve,
// and only raises a bound the budget has; every refusal leaves no event.
func TestEval_BudgetResumeRefused(t *testing.T) {
	t.Run("NotABudgetRequest", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(contract.EpisodeResult{Score: 1, Passed: true}, nil)
		in := evalInput(6, 2) // threshold 5: an approval request
		in.Approval.Timeout = Duration(time.Hour)
		got := h.resumeAt(time.Minute, "u1", h.extendAnswer(&Budget{MaxCost: 1}))
		h.execute(in)
		requireAppErrType(t, got.rejectErr, RejectInvalidArgument)
		assert.Contains(t, got.rejectErr.Error(), "extend_by")
	})
	for name, ext := range map[string]Budget{
		"Negative":        {MaxCost: -1},
		"Zero":            {},
		"BoundNotInForce": {MaxEpisodeSeconds: 60},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(costMock(func(int) float64 { return 1 }))
			in := budgetInput(4, 1, Budget{MaxCost: 1}, 1)
			in.Approval.Timeout = Duration(time.Hour)
			e := ext
			got := h.resumeAt(time.Minute, "u1", h.extendAnswer(&e))
			h.execute(in)
			requireAppErrType(t, got.rejectErr, RejectInvalidArgument)
			assert.Contains(t, got.rejectErr.Error(), "extend_by")
			assert.Equal(t, 1, h.result().Scored)
		})
	}
	t.Run("WithReject", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(costMock(func(int) float64 { return 1 }))
		in := budgetInput(4, 1, Budget{MaxCost: 1}, 1)
		got := h.resumeAt(time.Minute, "u1", func() ResumeRequest {
			r := h.answer(owner, DecisionReject)()
			r.ExtendBy = &Budget{MaxCost: 1}
			return r
		})
		h.execute(in)
		requireAppErrType(t, got.rejectErr, RejectInvalidArgument)
	})
	t.Run("SealBindsExtendBy", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(costMock(func(int) float64 { return 1 }))
		in := budgetInput(4, 1, Budget{MaxCost: 1}, 1)
		got := h.resumeAt(time.Minute, "u1", func() ResumeRequest {
			r := sealed(h.jobID, h.extendAnswer(&Budget{MaxCost: 1})())
			r.ExtendBy = &Budget{MaxCost: 100} // raised after sealing
			return r
		})
		h.execute(in)
		requireAppErrType(t, got.rejectErr, RejectUnsealed)
		assert.Contains(t, got.rejectErr.Error(), "extend_by")
	})
}

// TestBudgetFits: an episode fits when its worst case fits beside what was spent and the
// worst case of every episode in flight; with the worst case unknown, one runs at a time.
func TestBudgetFits(t *testing.T) {
	for _, c := range []struct {
		spent    float64
		inflight int
		worst    float64
		limit    float64
		want     bool
	}{
		{0, 0, 0.1, 0.35, true},
		{0, 2, 0.1, 0.35, true},
		{0, 3, 0.1, 0.35, false},
		{0.1 + 0.1 + 0.1, 0, 0.05, 0.35, true}, // float sums: 0.30000000000000004 + 0.05 fits
		{0, 0, -1, 1, true},
		{0, 1, -1, 1, false},
		{1, 0, -1, 1, false},
		{0.5, 4, 0, 1, true}, // episodes that report no cost never fill a cost budget
		{1.2, 0, 0, 1, false},
	} {
		assert.Equal(t, c.want, fits(c.spent, c.inflight, c.worst, c.limit), "%+v", c)
	}
	assert.Equal(t, "1,234", thousands("1234"))
	assert.Equal(t, "20,000", thousands("20000"))
	assert.Equal(t, "1,234,567.50", thousands("1234567.50"))
	assert.Equal(t, "50.00", thousands("50.00"))
}

// TestEval_StopWhen: on the demo suite's deterministic scores (uniform on [0,1]), a run asked
// for 20,000 episodes stops scheduling once 50 scored and the standard error is below 0.02,
// finishes those in flight, and succeeds marked stopped: "precision" with the skipped count;
// the estimate is within a few standard errors of the full run's (20,000 episodes, in 4
// continue-as-new segments of 5,000).
func TestEval_StopWhen(t *testing.T) {
	const n, conc = 20000, 8
	in := evalInput(n, conc)
	in.Approval.Threshold = 0
	in.Args.Params = demoParams(0)
	in.EpisodesPerRun = 5000
	full := func(in EvalInput) EvalResult {
		runs, hs := runToCompletion(t, in, func(*harness) {})
		_ = runs
		return hs[len(hs)-1].result()
	}
	all := full(in)
	require.Equal(t, n, all.Scored)

	in.Args.StopWhen = &StopWhen{StdErrBelow: 0.02, MinEpisodes: 50}
	runs, hs := runToCompletion(t, in, func(*harness) {})
	require.Len(t, runs, 1, "stopped inside the first segment")
	res := hs[0].result()
	assert.Equal(t, StoppedPrecision, res.Stopped)
	assert.Less(t, res.StdErr, 0.02)
	ran := res.Scored + res.Failed
	assert.Equal(t, n-ran, res.Skipped)
	assert.Equal(t, ran, hs[0].startedCount(), "every started episode finished")
	// Uniform scores: sd ≈ 0.289, so 0.02 is met near 209 episodes; past it only those in flight ran.
	assert.Greater(t, ran, 150)
	assert.Less(t, ran, 260+conc)
	assert.InDelta(t, all.MeanScore, res.MeanScore, 4*res.StdErr, "estimate vs the full run's")
	t.Logf("stop_when: %d of %d episodes, mean %.4f ± %.4f; full run %.4f ± %.4f", ran, n, res.MeanScore, res.StdErr, all.MeanScore, all.StdErr)
}
