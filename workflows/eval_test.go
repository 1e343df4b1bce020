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
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/authz"
)

const testJobID = "acme/eval/k1"

// testActs is the activity struct the tests register; mocks replace its RunEpisode.
var testActs = &activities.Activities{Suites: activities.DefaultCatalog()}

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
	episodes []activities.EpisodeInput // guarded by mu
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, testWorkflows)
}

// newHarnessWith runs w's Eval (e.g. a worker without resume keys).
func newHarnessWith(t *testing.T, w *Workflows) *harness {
	t.Helper()
	h := &harness{jobHarness: newJobHarness(t, KindEval, testJobID, w, testActs, nil)}
	h.onStarted = func(args converter.EncodedValues) {
		var in activities.EpisodeInput
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

func (h *harness) startedCount() int { return h.count("") }

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

func scoresMock(scores map[int]float64) func(context.Context, activities.EpisodeInput) (activities.EpisodeResult, error) {
	return func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
		s, ok := scores[in.Index]
		if !ok {
			return activities.EpisodeResult{}, fmt.Errorf("no score for episode %d", in.Index)
		}
		return activities.EpisodeResult{Score: s, Passed: s >= activities.PassThresholdDefault}, nil
	}
}

func episodeFailed(index int) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("episode %d failed", index), activities.ErrTypeEpisodeFailed, nil)
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
			func(ctx context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
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
				func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
					n := inflight.Add(1)
					defer inflight.Add(-1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					time.Sleep(15 * time.Millisecond) // real time, so overlapping episodes really overlap
					return activities.EpisodeResult{Score: 1, Passed: true}, nil
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
			func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
				if in.Index%2 == 1 {
					return activities.EpisodeResult{}, episodeFailed(in.Index)
				}
				return activities.EpisodeResult{Score: 0.25 * float64(in.Index), Passed: in.Index >= 2}, nil
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
			activities.EpisodeResult{}, temporal.NewApplicationError("flaky judge", activities.ErrTypeEpisodeFailed))
		h.execute(evalInput(2, 1))
		requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeAllEpisodesFailed)
		assert.Equal(t, 2, h.startedCount())
	})

	t.Run("TransientErrorIsRetried", func(t *testing.T) {
		h := newHarness(t)
		var attempts sync.Map // index -> *atomic.Int32
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
				v, _ := attempts.LoadOrStore(in.Index, new(atomic.Int32))
				n := v.(*atomic.Int32).Add(1)
				switch {
				case in.Index == 0 && n == 1: // fails once, then scores
					return activities.EpisodeResult{}, errors.New("worker hiccup")
				case in.Index == 1: // fails every attempt
					return activities.EpisodeResult{}, errors.New("always broken")
				}
				return activities.EpisodeResult{Score: 0.9, Passed: true}, nil
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
			func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
				return activities.EpisodeResult{}, episodeFailed(in.Index)
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
			Return(activities.EpisodeResult{Score: 0.7, Passed: true}, nil)
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
			Return(activities.EpisodeResult{Score: 0.7, Passed: true}, nil)
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

func TestEval_ResumeValidation(t *testing.T) {
	type tc struct {
		name     string
		approver authz.Approver
		req      func(h *jobHarness) func() ResumeRequest
		wantType string // rejection type; "" means accepted
		wantBy   string
	}
	cases := []tc{
		{name: "WrongInputID", approver: authz.ApproverOwner,
			req: editedAnswer(owner, func(r *ResumeRequest) { r.InputID = "approve-000000000000" }), wantType: RejectInputNotExpected},
		{name: "EmptyInputID", approver: authz.ApproverOwner,
			req: editedAnswer(owner, func(r *ResumeRequest) { r.InputID = "" }), wantType: RejectInputNotExpected},
		{name: "WrongScopeDigest", approver: authz.ApproverOwner,
			req: editedAnswer(owner, func(r *ResumeRequest) {
				args := evalInput(600, 2).Args // an approval for a different scope
				r.ScopeDigest = Digest(args)
			}), wantType: RejectInputNotExpected},
		{name: "UnknownDecision", approver: authz.ApproverOwner,
			req: editedAnswer(owner, func(r *ResumeRequest) { r.Decision = "maybe" }), wantType: RejectInvalidArgument},
		{name: "OtherUserOfTenant", approver: authz.ApproverOwner, req: editedAnswer(bo, nil), wantType: RejectNotFound},
		{name: "OtherTenant", approver: authz.ApproverOwner, req: editedAnswer(stranger, nil), wantType: RejectNotFound},
		{name: "InvalidPrincipal", approver: authz.ApproverOwner,
			req: editedAnswer(authz.Principal{Subject: "ann", Scopes: owner.Scopes}, nil), wantType: RejectNotFound},
		{name: "OwnerWithoutWriteScope", approver: authz.ApproverOwner,
			req: editedAnswer(authz.Principal{Tenant: "acme", Subject: "ann", Scopes: []authz.Scope{authz.ScopeRead}}, nil), wantType: RejectForbidden},
		{name: "OwnerOnApproverOnlyRequest", approver: authz.ApproverApprover, req: editedAnswer(owner, nil), wantType: RejectForbidden},
		{name: "OtherUserOnApproverOnlyRequest", approver: authz.ApproverApprover, req: editedAnswer(bo, nil), wantType: RejectNotFound},
		{name: "StewardOnApproverOnlyRequest", approver: authz.ApproverApprover, req: editedAnswer(steward, nil), wantBy: "steward"},
		// jobs:approve reaches only approver requests: an owner request is not the steward's to see.
		{name: "StewardOnOwnerRequest", approver: authz.ApproverOwner, req: editedAnswer(steward, nil), wantType: RejectNotFound},
		{name: "StewardWithWriteOnOwnerRequest", approver: authz.ApproverOwner,
			req: editedAnswer(authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeWrite, authz.ScopeApprove}}, nil), wantType: RejectNotFound},
		{name: "AdminStewardOnOwnerRequest", approver: authz.ApproverOwner,
			req: editedAnswer(authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove, authz.ScopeAdmin}}, nil), wantType: RejectForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
				Return(activities.EpisodeResult{Score: 0.7, Passed: true}, nil)
			in := evalInput(6, 2)
			in.Approval.Approver = c.approver
			got := h.resumeAt(10*time.Minute, "bad", c.req(h.jobHarness))
			var fix *resumeOutcome
			if c.wantType != "" {
				// After the rejection the request is still open: a valid answer goes through.
				fixer := owner
				if c.approver == authz.ApproverApprover {
					fixer = steward
				}
				fix = h.resumeAt(20*time.Minute, "good", h.answer(fixer, DecisionApprove))
			}
			h.execute(in)

			if c.wantType == "" {
				require.True(t, got.accepted, "rejected: %v", got.rejectErr)
				assert.Zero(t, got.startedAtDecision)
				res := h.result()
				assert.Equal(t, c.wantBy, res.ApprovedBy)
				return
			}
			requireRefusedThenFixed(t, got, fix, c.wantType)
			res := h.result()
			assert.Equal(t, 6, res.Scored)
			assert.Equal(t, fix.result.By, res.ApprovedBy)
		})
	}

	t.Run("SecondResumeAfterApproval", func(t *testing.T) {
		h := newHarness(t)
		// Slow episodes keep the job running while the second resume arrives.
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			After(time.Minute).Return(activities.EpisodeResult{Score: 0.7, Passed: true}, nil)
		first := h.resumeAt(10*time.Minute, "u1", h.answer(owner, DecisionApprove))
		second := h.resumeAt(10*time.Minute+time.Second, "u2", h.answer(owner, DecisionReject))
		h.execute(evalInput(6, 2))

		require.True(t, first.accepted)
		assert.False(t, second.accepted)
		requireAppErrType(t, second.rejectErr, RejectInputNotExpected)
		require.NoError(t, h.env.GetWorkflowError())
	})

	t.Run("ResumeWhenNoInputIsOpen", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			After(time.Minute).Return(activities.EpisodeResult{Score: 0.7, Passed: true}, nil)
		got := h.resumeAt(time.Second, "u1", func() ResumeRequest {
			return ResumeRequest{Principal: owner, InputID: "approve-000000000000", ScopeDigest: Digest(evalInput(2, 2).Args), Decision: DecisionApprove}
		})
		h.execute(evalInput(2, 2))
		assert.False(t, got.accepted)
		requireAppErrType(t, got.rejectErr, RejectInputNotExpected)
		require.NoError(t, h.env.GetWorkflowError())
	})
}

func TestEval_RejectDecision(t *testing.T) {
	h := newHarness(t)
	h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
		Return(activities.EpisodeResult{Score: 0.7, Passed: true}, nil).Maybe()
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
		Return(activities.EpisodeResult{Score: 0.7, Passed: true}, nil).Maybe()
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
			After(10*time.Second).Return(activities.EpisodeResult{Score: 0.7, Passed: true}, nil)
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
			Return(activities.EpisodeResult{Score: 0.7, Passed: true}, nil).Maybe()
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
				func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
					if in.Index == 3 {
						return activities.EpisodeResult{}, episodeFailed(3)
					}
					s := scores[in.Index]
					return activities.EpisodeResult{Score: s, Passed: s >= 0.5}, nil
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
				Return(activities.EpisodeResult{Score: 0.6, Passed: true}, nil)
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

func runDemoEpisode(t *testing.T, in activities.EpisodeInput) (activities.EpisodeResult, error) {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(testActs)
	v, err := env.ExecuteActivity(testActs.RunEpisode, in)
	if err != nil {
		return activities.EpisodeResult{}, err
	}
	var res activities.EpisodeResult
	require.NoError(t, v.Get(&res))
	return res, nil
}

func TestDemoActivity_DeterministicPerOperationID(t *testing.T) {
	in := func(i int) activities.EpisodeInput {
		return activities.EpisodeInput{JobID: testJobID, Suite: "demo", Index: i,
			OperationID: fmt.Sprintf("%s#%d", testJobID, i), Params: demoParams(0.3)}
	}
	t.Run("SameOperationIDSameOutcome", func(t *testing.T) {
		for i := range 10 {
			r1, err1 := runDemoEpisode(t, in(i))
			r2, err2 := runDemoEpisode(t, in(i))
			assert.Equal(t, r1, r2, "episode %d", i)
			assert.Equal(t, err1 == nil, err2 == nil, "episode %d", i)
			if err1 != nil {
				requireAppErrType(t, err1, activities.ErrTypeEpisodeFailed)
				requireAppErrType(t, err2, activities.ErrTypeEpisodeFailed)
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
			assert.Equal(t, r.Score >= activities.PassThresholdDefault, r.Passed)
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
		r, err := runDemoEpisode(t, activities.EpisodeInput{JobID: testJobID, Suite: "demo", Index: i,
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

// The histories in testdata were recorded by a real (embedded) Temporal server running this
// workflow; see testdata/genhistory. Replaying them catches non-deterministic changes.
var replayHistories = map[string]string{
	"Small":          "eval_small.json",
	"Approved":       "eval_approved.json",
	"Rejected":       "eval_rejected.json",
	"Cancelled":      "eval_cancelled.json",
	"ContinueAsNew1": "eval_can_run1.json",
	"ContinueAsNew2": "eval_can_run2.json",
}

// replayIDs are the workflow IDs the histories were recorded under (genhistory); the replayer's
// default ID would fail the tenant check every job makes at start.
var replayIDs = map[string]string{
	"Small":          "acme/eval/replay-small",
	"Approved":       "acme/eval/replay-approved",
	"Rejected":       "acme/eval/replay-rejected",
	"Cancelled":      "acme/eval/replay-cancelled",
	"ContinueAsNew1": "acme/eval/replay-can",
	"ContinueAsNew2": "acme/eval/replay-can",
}

func TestEval_Replay(t *testing.T) {
	for name, file := range replayHistories {
		t.Run(name, func(t *testing.T) {
			// Validators do not run on replay: a worker without resume keys replays the
			// recorded (unsealed) approvals all the same.
			replay(t, file, replayIDs[name], EvalWorkflowName, (&Workflows{}).Eval)
		})
	}
}

// TestEval_RecordedApprovalHistory checks semantics 3 of CONTRACT.md on a real server's history:
// the recorder sent a resume with a wrong scope_digest before the owner's approval; the validator
// rejected it, so it left no event, and no episode was scheduled before the accepted approval.
func TestEval_RecordedApprovalHistory(t *testing.T) {
	hist := loadHistory(t, "eval_approved.json")
	accepted, scheduledBefore, scheduled := 0, 0, 0
	for _, ev := range hist.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			accepted++
			var req ResumeRequest
			payloads := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetArgs()
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(payloads, &req))
			assert.Equal(t, "ann", req.Principal.Subject)
			assert.NotEqual(t, "sha256:00", req.ScopeDigest, "the rejected resume must not be in history")
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_REJECTED:
			t.Errorf("a rejected resume reached history (event %d)", ev.GetEventId())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			scheduled++
			if accepted == 0 {
				scheduledBefore++
			}
		}
	}
	assert.Equal(t, 1, accepted)
	assert.Zero(t, scheduledBefore, "episodes scheduled before the approval")
	assert.Equal(t, 6, scheduled)
}
