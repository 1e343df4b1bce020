package workflows

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// priorityLog records the priority every activity (by type) and child workflow was scheduled
// with, as the workflow's outbound interceptor sees its options. (The SDK test environment does
// not pass an activity's priority on to its activity.Info, so the options are read here.)
type priorityLog struct {
	interceptor.WorkerInterceptorBase
	mu       sync.Mutex
	byType   map[string][]temporal.Priority
	children []temporal.Priority
}

func (l *priorityLog) install(env *testsuite.TestWorkflowEnvironment) {
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{l}})
}

func (l *priorityLog) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &priorityInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, log: l}
}

type priorityInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	log *priorityLog
}

func (i *priorityInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&priorityOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, log: i.log})
}

type priorityOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	log *priorityLog
}

func (o *priorityOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.log.mu.Lock()
	if o.log.byType == nil {
		o.log.byType = map[string][]temporal.Priority{}
	}
	o.log.byType[activityType] = append(o.log.byType[activityType], workflow.GetActivityOptions(ctx).Priority)
	o.log.mu.Unlock()
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *priorityOutbound) ExecuteChildWorkflow(ctx workflow.Context, childWorkflowType string, args ...any) workflow.ChildWorkflowFuture {
	o.log.mu.Lock()
	o.log.children = append(o.log.children, workflow.GetChildWorkflowOptions(ctx).Priority)
	o.log.mu.Unlock()
	return o.Next.ExecuteChildWorkflow(ctx, childWorkflowType, args...)
}

func (l *priorityLog) get(activityType string) []temporal.Priority {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]temporal.Priority(nil), l.byType[activityType]...)
}

func TestFairness_Priority(t *testing.T) {
	assert.Equal(t, temporal.Priority{}, Fairness{}.Priority(), "no fairness: the server's defaults")
	assert.Equal(t, temporal.Priority{FairnessKey: "acme", FairnessWeight: 2}, Fairness{Key: "acme", Weight: 2}.Priority())

	// Inputs recorded before the field existed decode to zero fairness, and zero is not written.
	var in EvalInput
	require.NoError(t, json.Unmarshal([]byte(`{"tenant":"acme","owner":"ann","args":{"suite":"demo","episodes":1}}`), &in))
	assert.Zero(t, in.Fairness)
	raw, err := json.Marshal(EvalInput{Tenant: "acme"})
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "fairness")
	raw, err = json.Marshal(ExportInput{Tenant: "acme", Fairness: Fairness{Key: "acme", Weight: 1.5}})
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"fairness":{"key":"acme","weight":1.5}`)
}

// Every episode activity is scheduled with the job's fairness key and weight; a job without
// fairness (recorded before it existed) schedules them with no priority at all.
func TestEval_EpisodesCarryFairness(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fairness Fairness
		want     temporal.Priority
	}{
		{"KeyAndWeight", Fairness{Key: "acme", Weight: 2}, temporal.Priority{FairnessKey: "acme", FairnessWeight: 2}},
		{"Zero", Fairness{}, temporal.Priority{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var log priorityLog
			log.install(h.env)
			h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
				Return(scoresMock(map[int]float64{0: 1, 1: 1, 2: 1, 3: 1}))
			in := evalInput(4, 2)
			in.Fairness = tc.fairness
			h.execute(in)
			require.NoError(t, h.env.GetWorkflowError())
			got := log.get("RunEpisode")
			require.Len(t, got, 4)
			for _, p := range got {
				assert.Equal(t, tc.want, p)
			}
		})
	}
}

// The fairness survives continue-as-new: the next run's input carries it, so its episodes do too.
func TestEval_FairnessAcrossContinueAsNew(t *testing.T) {
	in := evalInput(5, 2)
	in.Approval.Threshold = 0
	in.EpisodesPerRun = 2
	in.Fairness = Fairness{Key: "acme", Weight: 3}
	var log priorityLog
	runs, _ := runToCompletion(t, in, func(h *harness) {
		log.install(h.env)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			Return(scoresMock(map[int]float64{0: 1, 1: 1, 2: 1, 3: 1, 4: 1}))
	})
	require.Greater(t, len(runs), 1, "the eval continued as new")
	for _, r := range runs {
		assert.Equal(t, in.Fairness, r.Fairness)
	}
	got := log.get("RunEpisode")
	require.Len(t, got, 5)
	for _, p := range got {
		assert.Equal(t, temporal.Priority{FairnessKey: "acme", FairnessWeight: 3}, p)
	}
}

// Every activity of an export (plan, parts, finalize, and the cleanup of a failed one) is the
// tenant's and carries its fairness; an export without fairness schedules them without priority.
func TestExport_ActivitiesCarryFairness(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fairness Fairness
		want     temporal.Priority
	}{
		{"KeyAndWeight", Fairness{Key: "acme", Weight: 0.5}, temporal.Priority{FairnessKey: "acme", FairnessWeight: 0.5}},
		{"Zero", Fairness{}, temporal.Priority{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newExportHarness(t)
			var log priorityLog
			log.install(h.env)
			in := exportInput(false)
			in.Fairness = tc.fairness
			h.execute(in)
			h.result()
			for typ, n := range map[string]int{"PlanExport": 1, "ExportPart": 3, "FinalizeExport": 1} {
				got := log.get(typ)
				require.Len(t, got, n, typ)
				for _, p := range got {
					assert.Equal(t, tc.want, p, typ)
				}
			}
			log.mu.Lock()
			assert.Equal(t, []temporal.Priority{tc.want}, log.children, "the retention child is the tenant's too")
			log.mu.Unlock()
		})
	}

	t.Run("Cleanup", func(t *testing.T) {
		h := newExportHarness(t)
		var log priorityLog
		log.install(h.env)
		h.part = func(contract.ExportPartInput) (contract.PartResult, error) {
			return contract.PartResult{}, temporal.NewNonRetryableApplicationError("boom", "boom", nil)
		}
		in := exportInput(false)
		in.Fairness = Fairness{Key: "acme", Weight: 4}
		h.execute(in)
		require.Error(t, h.env.GetWorkflowError())
		got := log.get("DeleteExport")
		require.NotEmpty(t, got, "the failed export deleted its partial output")
		for _, p := range got {
			assert.Equal(t, temporal.Priority{FairnessKey: "acme", FairnessWeight: 4}, p)
		}
	})
}
