package workflows

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/activities/contract"
)

// TestEval_RecordedBudgetHistory reads the recorded budget run (genhistory -only budget): the
// version marker, two accepted answers (the raise carrying extend_by, then the reject), no
// episode scheduled while a request was open, and the costs the episodes reported never past
// the budget in force; the result is succeeded, stopped by the budget, with the raised budget.
func TestEval_RecordedBudgetHistory(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	var (
		markers, accepted, scheduled int
		open                         bool
		cost                         float64
		res                          EvalResult
		answers                      []ResumeRequest
	)
	budget := 0.25
	for _, ev := range loadHistory(t, "eval_budget.json").GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			markers++
		case enumspb.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
			var n *NeedsInput
			if p := ev.GetWorkflowPropertiesModifiedEventAttributes().GetUpsertedMemo().GetFields()[MemoNeedsInput]; p != nil {
				require.NoError(t, dc.FromPayload(p, &n))
				open = n != nil
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			accepted++
			var req ResumeRequest
			require.NoError(t, dc.FromPayloads(ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetArgs(), &req))
			answers = append(answers, req)
			if req.ExtendBy != nil {
				budget += req.ExtendBy.MaxCost
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := ev.GetActivityTaskScheduledEventAttributes()
			if a.GetActivityType().GetName() == "RunEpisode" {
				scheduled++
				assert.False(t, open, "episode scheduled while the budget request was open (event %d)", ev.GetEventId())
				assert.LessOrEqual(t, cost+0.1, budget+1e-9, "scheduled past the budget's room (event %d)", ev.GetEventId())
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			var r contract.EpisodeResult
			if dc.FromPayloads(ev.GetActivityTaskCompletedEventAttributes().GetResult(), &r) == nil && r.Cost != nil {
				cost += *r.Cost
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
			require.NoError(t, dc.FromPayloads(ev.GetWorkflowExecutionCompletedEventAttributes().GetResult(), &res))
		}
	}
	assert.GreaterOrEqual(t, markers, 1, "the eval-budget version marker")
	require.Len(t, answers, 2)
	assert.Equal(t, DecisionApprove, answers[0].Decision)
	require.NotNil(t, answers[0].ExtendBy)
	assert.Equal(t, DecisionReject, answers[1].Decision)
	assert.Equal(t, StoppedBudget, res.Stopped)
	assert.Equal(t, "ann", res.StoppedBy)
	require.NotNil(t, res.Budget)
	assert.InDelta(t, 0.45, res.Budget.MaxCost, 1e-9)
	require.NotNil(t, res.CostSoFar)
	assert.InDelta(t, cost, *res.CostSoFar, 1e-9)
	assert.LessOrEqual(t, cost, 0.45+1e-9)
	assert.Equal(t, res.Scored, scheduled)
	assert.Equal(t, 8-scheduled, res.Skipped)
}

// TestEval_RecordedPrecisionHistory: stop_when across continue-as-new, as recorded: the first
// run ran its 20 episodes (min_episodes 25 not yet reached) and continued as new; the second
// stopped once 25 scored, with only the episodes in flight past that, succeeded with stopped:
// precision.
func TestEval_RecordedPrecisionHistory(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	count := func(file string) (scheduled int, res *EvalResult) {
		for _, ev := range loadHistory(t, file).GetEvents() {
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "RunEpisode" {
					scheduled++
				}
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
				res = &EvalResult{}
				require.NoError(t, dc.FromPayloads(ev.GetWorkflowExecutionCompletedEventAttributes().GetResult(), res))
			}
		}
		return scheduled, res
	}
	n1, res1 := count("eval_precision_run1.json")
	assert.Equal(t, 20, n1)
	assert.Nil(t, res1, "the first run continued as new")
	n2, res := count("eval_precision_run2.json")
	require.NotNil(t, res)
	assert.Equal(t, StoppedPrecision, res.Stopped)
	assert.Less(t, res.StdErr, 0.12)
	assert.GreaterOrEqual(t, res.Scored, 25)
	assert.LessOrEqual(t, n2, 25-20+1, "past 25 only the one other episode in flight (concurrency 2)")
	assert.Equal(t, 40-20-n2, res.Skipped)
}
