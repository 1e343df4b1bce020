package workflows

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

const testJobID = "acme/eval/k1"

// testActs is the activity struct the tests register; mocks replace its RunEpisode.
var testActs = &activities.Activities{Suites: contract.DefaultCatalog()}

func evalInput(episodes, concurrency int) EvalInput {
	return EvalInput{
		Tenant: "acme",
		Owner:  "ann",
		Args: EvalArgs{
			Suite:       "demo",
			Episodes:    episodes,
			Concurrency: concurrency,
			Params:      map[string]any{"episode_ms": float64(0), "fail_rate": float64(0)},
		},
		Approval: ApprovalPolicy{Threshold: 5, Approver: authz.ApproverOwner, Timeout: Duration(time.Hour)},
		Episode:  EpisodePolicy{Timeout: Duration(time.Minute), MaxAttempts: 3},
	}
}

// harness runs the Eval workflow (jobHarness) and also records every started episode's input.
type harness struct {
	*jobHarness
	episodes []contract.EpisodeInput // guarded by mu
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, testWorkflows)
}

// newHarnessWith runs w's Eval (e.g. a worker without resume keys).
func newHarnessWith(t *testing.T, w *Workflows) *harness {
	t.Helper()
	h := &harness{jobHarness: newJobHarness(t, KindEval, testJobID, w, testActs, nil)}
	h.onStarted = func(activityType string, args converter.EncodedValues) {
		if activityType != "RunEpisode" {
			return // the episode log's writes
		}
		var in contract.EpisodeInput
		require.NoError(t, args.Get(&in))
		h.episodes = append(h.episodes, in)
	}
	return h
}

func (h *harness) result() EvalResult {
	h.t.Helper()
	var res EvalResult
	h.resultInto(&res)
	return res
}

// startedCount counts started episode attempts (not the episode log's writes).
func (h *harness) startedCount() int { return h.count("RunEpisode") }

func (h *harness) startedIndexes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]int, 0, len(h.episodes))
	for _, in := range h.episodes {
		out = append(out, in.Index)
	}
	sort.Ints(out)
	return out
}

func scoresMock(scores map[int]float64) func(context.Context, contract.EpisodeInput) (contract.EpisodeResult, error) {
	return func(_ context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
		s, ok := scores[in.Index]
		if !ok {
			return contract.EpisodeResult{}, fmt.Errorf("no score for episode %d", in.Index)
		}
		return contract.EpisodeResult{Score: s, Passed: s >= contract.PassThresholdDefault}, nil
	}
}

func episodeFailed(index int) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("episode %d failed", index), contract.ErrTypeEpisodeFailed, nil)
}

func TestEval_SmallRunWithoutApproval(t *testing.T) {
	t.Run("ResultStatistics", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			Return(scoresMock(map[int]float64{0: 0.2, 1: 0.4, 2: 0.6, 3: 0.8}))
		h.execute(evalInput(4, 2))

		res := h.result()
		assert.Equal(t, 4, res.Episodes)
		assert.Equal(t, 4, res.Scored)
		assert.Equal(t, 0, res.Failed)
		assert.Equal(t, 2, res.Passed, "0.6 and 0.8 pass at threshold 0.5")
		assert.InDelta(t, 0.5, res.MeanScore, 1e-12)
		// sample variance: (0.09+0.01+0.01+0.09)/3; std err = sqrt(var/n)
		assert.InDelta(t, math.Sqrt((0.2/3)/4), res.StdErr, 1e-12)
		assert.Empty(t, res.ApprovedBy)

		assert.Equal(t, []int{0, 1, 2, 3}, h.startedIndexes(), "each episode runs exactly once")
		assert.Equal(t, []Status{StatusRunning, StatusSucceeded}, h.statusSeq())
		p := h.lastProgress()
		assert.Equal(t, 4, p.Done)
		assert.Equal(t, 0, p.Failed)
		assert.Equal(t, 4, p.Total)
		assert.Equal(t, "finished", p.Message)
		assert.Nil(t, h.lastJobError())
		assert.Empty(t, h.askedInputs(), "no input request below the threshold")
	})

	t.Run("SingleEpisodeHasNoStdErr", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(scoresMock(map[int]float64{0: 0.3}))
		h.execute(evalInput(1, 1))
		res := h.result()
		assert.Equal(t, 1, res.Scored)
		assert.Equal(t, 0, res.Passed)
		assert.InDelta(t, 0.3, res.MeanScore, 1e-12)
		assert.Zero(t, res.StdErr)
	})

	t.Run("EpisodeInputs", func(t *testing.T) {
		h := newHarness(t)
		var runIDs sync.Map // episode index → the run ID the activity saw
		score := scoresMock(map[int]float64{0: 1, 1: 1})
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(
			func(ctx context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
				runIDs.Store(in.Index, activity.GetInfo(ctx).WorkflowExecution.RunID)
				return score(ctx, in)
			})
		in := evalInput(2, 2)
		h.execute(in)
		require.NoError(t, h.env.GetWorkflowError())
		h.mu.Lock()
		defer h.mu.Unlock()
		require.Len(t, h.episodes, 2)
		for _, ep := range h.episodes {
			assert.Equal(t, testJobID, ep.JobID)
			assert.Equal(t, "demo", ep.Suite)
			// The operation ID names the job instance (its first run), not only the workflow ID.
			run, _ := runIDs.Load(ep.Index)
			require.NotEmpty(t, run)
			assert.Equal(t, run, ep.FirstRunID)
			assert.Equal(t, fmt.Sprintf("%s#%s#%d", testJobID, run, ep.Index), ep.OperationID)
			assert.Equal(t, in.Args.Params, ep.Params)
		}
	})

	for _, tc := range []struct {
		name        string
		concurrency int
		want        int
	}{
		{"ConcurrencyBound", 3, 3},
		{"ZeroConcurrencyRunsOneAtATime", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var inflight, peak atomic.Int32
			h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(
				func(_ context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
					n := inflight.Add(1)
					defer inflight.Add(-1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					time.Sleep(15 * time.Millisecond) // real time, so overlapping episodes really overlap
					return contract.EpisodeResult{Score: 1, Passed: true}, nil
				})
			in := evalInput(12, tc.concurrency)
			in.Approval.Threshold = 0
			h.execute(in)
			res := h.result()
			assert.Equal(t, 12, res.Scored)
			assert.Equal(t, tc.want, int(peak.Load()), "peak number of episodes in flight")
		})
	}
}

func TestEval_EpisodeFailures(t *testing.T) {
	t.Run("SomeFailJobSucceeds", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
				if in.Index%2 == 1 {
					return contract.EpisodeResult{}, episodeFailed(in.Index)
				}
				return contract.EpisodeResult{Score: 0.25 * float64(in.Index), Passed: in.Index >= 2}, nil
			})
		h.execute(evalInput(5, 2)) // 0,2,4 score 0,0.5,1; 1,3 fail

		require.NoError(t, h.env.GetWorkflowError())
		res := h.result()
		assert.Equal(t, 5, res.Episodes)
		assert.Equal(t, 3, res.Scored)
		assert.Equal(t, 2, res.Failed)
		assert.Equal(t, 2, res.Passed)
		assert.InDelta(t, 0.5, res.MeanScore, 1e-12)
		assert.InDelta(t, math.Sqrt(0.25/3), res.StdErr, 1e-12) // var = (0.25+0+0.25)/2
		assert.Equal(t, 5, h.startedCount(), "EpisodeFailed is final: no retries")
		assert.Equal(t, []Status{StatusRunning, StatusSucceeded}, h.statusSeq())
		assert.Equal(t, 2, h.lastProgress().Failed)
	})

	t.Run("EpisodeFailedTypeIsNeverRetried", func(t *testing.T) {
		// Even an activity that forgets to mark EpisodeFailed non-retryable is not retried:
		// the workflow's retry policy lists the type.
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(
			contract.EpisodeResult{}, temporal.NewApplicationError("flaky judge", contract.ErrTypeEpisodeFailed))
		h.execute(evalInput(2, 1))
		requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeAllEpisodesFailed)
		assert.Equal(t, 2, h.startedCount())
	})

	t.Run("TransientErrorIsRetried", func(t *testing.T) {
		h := newHarness(t)
		var attempts sync.Map // index -> *atomic.Int32
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
				v, _ := attempts.LoadOrStore(in.Index, new(atomic.Int32))
				n := v.(*atomic.Int32).Add(1)
				switch {
				case in.Index == 0 && n == 1: // fails once, then scores
					return contract.EpisodeResult{}, errors.New("worker hiccup")
				case in.Index == 1: // fails every attempt
					return contract.EpisodeResult{}, errors.New("always broken")
				}
				return contract.EpisodeResult{Score: 0.9, Passed: true}, nil
			})
		h.execute(evalInput(3, 3))
		res := h.result()
		assert.Equal(t, 2, res.Scored)
		assert.Equal(t, 1, res.Failed)
		assert.Equal(t, 2, res.Passed)
		// 0: 2 attempts, 1: MaxAttempts (3), 2: 1
		assert.Equal(t, []int{0, 0, 1, 1, 1, 2}, h.startedIndexes())
	})

	t.Run("AllFail", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
				return contract.EpisodeResult{}, episodeFailed(in.Index)
			})
		h.execute(evalInput(3, 2))

		require.True(t, h.env.IsWorkflowCompleted())
		appErr := requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeAllEpisodesFailed)
		assert.True(t, appErr.NonRetryable())
		assert.Equal(t, []Status{StatusRunning, StatusFailed}, h.statusSeq())
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, ErrCodeAllEpisodesFailed, je.Code)
		}
		p := h.lastProgress()
		assert.Equal(t, 0, p.Done)
		assert.Equal(t, 3, p.Failed)
	})
}

func TestEval_Approval(t *testing.T) {
	t.Run("OwnerApproves", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil)
		in := evalInput(6, 2) // threshold 5
		var midStatuses []Status
		h.env.RegisterDelayedCallback(func() { midStatuses = h.statusSeq() }, 30*time.Minute)
		got := h.resumeAt(30*time.Minute, "u1", h.answer(owner, DecisionApprove))
		h.execute(in)

		require.True(t, got.accepted, "owner approval rejected: %v", got.rejectErr)
		require.True(t, got.completed)
		assert.Equal(t, ResumeResult{Decision: DecisionApprove, By: "ann"}, got.result)
		assert.Zero(t, got.startedAtDecision, "no episode may start before approval")
		assert.Equal(t, []Status{StatusAwaitingInput}, midStatuses)

		res := h.result()
		assert.Equal(t, 6, res.Scored)
		assert.Equal(t, "ann", res.ApprovedBy)
		assert.Equal(t, 6, h.startedCount())
		assert.Equal(t, []Status{StatusAwaitingInput, StatusRunning, StatusSucceeded}, h.statusSeq())

		n := h.openInput()
		assert.Regexp(t, `^approve-[0-9a-f]{12}$`, n.InputID)
		assert.Equal(t, Digest(in.Args), n.ScopeDigest, "the approval binds to the digest of the start arguments")
		assert.Equal(t, authz.ApproverOwner, n.Approver)
		assert.Contains(t, n.Prompt, "6 episodes")
		v, ok := h.lastMemo(MemoNeedsInput)
		require.True(t, ok)
		assert.Nil(t, v, "needs_input is cleared once answered")
	})

	t.Run("AtThresholdNeedsNoApproval", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil)
		h.execute(evalInput(5, 2))
		require.NoError(t, h.env.GetWorkflowError())
		assert.Equal(t, []Status{StatusRunning, StatusSucceeded}, h.statusSeq())
	})

	t.Run("InputIDIsDeterministicPerJob", func(t *testing.T) {
		ids := map[string]string{}
		for _, wid := range []string{testJobID, testJobID, "acme/eval/k2"} {
			h := newHarness(t)
			h.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: wid})
			in := evalInput(6, 1)
			in.Approval.Timeout = Duration(time.Minute)
			h.execute(in)
			requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeInputExpired)
			id := h.openInput().InputID
			if prev, ok := ids[wid]; ok {
				assert.Equal(t, prev, id, "same execution, same input_id")
			}
			ids[wid] = id
		}
		assert.NotEqual(t, ids[testJobID], ids["acme/eval/k2"])
	})
}

func TestEval_RejectDecision(t *testing.T) {
	h := newHarness(t)
	h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
		Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil).Maybe()
	got := h.resumeAt(5*time.Minute, "u1", func() ResumeRequest {
		r := h.answer(owner, DecisionReject)()
		r.Comment = "too expensive"
		return r
	})
	h.execute(evalInput(6, 2))

	h.requireRejected(got, "ann", "too expensive")
	assert.Zero(t, h.startedCount(), "a rejected job runs no episode")
}

func TestEval_ApprovalTimeout(t *testing.T) {
	h := newHarness(t)
	h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
		Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil).Maybe()
	start := h.env.Now()
	in := evalInput(6, 2)
	in.Approval.Timeout = Duration(3 * time.Hour)
	var late *resumeOutcome
	late = h.resumeAt(3*time.Hour+time.Minute, "late", h.answer(owner, DecisionApprove))
	h.execute(in)

	requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeInputExpired)
	assert.Zero(t, h.startedCount())
	assert.True(t, start.Add(3*time.Hour).Equal(h.openInput().ExpiresAt), "expires_at %v, started %v", h.openInput().ExpiresAt, start)
	assert.Equal(t, []Status{StatusAwaitingInput, StatusFailed}, h.statusSeq())
	if je := h.lastJobError(); assert.NotNil(t, je) {
		assert.Equal(t, ErrCodeInputExpired, je.Code)
	}
	assert.False(t, late.accepted, "an answer after expiry is never accepted")
}

func TestEval_Cancel(t *testing.T) {
	t.Run("WhileEpisodesRun", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			After(10*time.Second).Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil)
		var startedAtCancel int
		h.env.RegisterDelayedCallback(func() {
			startedAtCancel = h.startedCount()
			h.env.CancelWorkflow()
		}, 15*time.Second)
		in := evalInput(10, 2)
		in.Approval.Threshold = 0
		h.execute(in)

		canceled := requireCanceled(t, h.env.GetWorkflowError())
		assert.Contains(t, canceled.Error(), "canceled")
		// 0,1 finished at 10s; 2,3 were running at 15s and were cancelled.
		assert.Equal(t, 4, startedAtCancel)
		assert.Equal(t, []int{0, 1, 2, 3}, h.startedIndexes(), "no episode starts after the cancel")
		assert.Equal(t, []Status{StatusRunning, StatusCancelling, StatusCancelled}, h.statusSeq())
		p := h.lastProgress()
		assert.Equal(t, 2, p.Done)
		assert.Equal(t, 0, p.Failed, "cancelled episodes are not failures")
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, ErrCodeCancelled, je.Code)
		}
	})

	t.Run("WhileAwaitingApproval", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil).Maybe()
		h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 10*time.Minute)
		late := h.resumeAt(11*time.Minute, "late", h.answer(owner, DecisionApprove))
		h.execute(evalInput(6, 2))

		requireCanceled(t, h.env.GetWorkflowError())
		assert.Zero(t, h.startedCount())
		seq := h.statusSeq()
		require.NotEmpty(t, seq)
		assert.Equal(t, StatusAwaitingInput, seq[0])
		assert.Equal(t, StatusCancelled, seq[len(seq)-1], "status sequence %v", seq)
		assert.NotContains(t, seq, StatusRunning)
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, ErrCodeCancelled, je.Code)
		}
		v, ok := h.lastMemo(MemoNeedsInput)
		require.True(t, ok)
		assert.Nil(t, v)
		assert.False(t, late.accepted)
	})
}
