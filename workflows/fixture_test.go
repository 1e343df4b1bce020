package workflows

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/activities"
)

const fixtureJobID = "acme/fixture/ann/fx-1"

func newFixtureHarness(t *testing.T) *jobHarness {
	t.Helper()
	return newJobHarness(t, KindFixture, fixtureJobID, testWorkflows, &activities.Activities{}, nil)
}

func fixtureInput(tool string) FixtureInput {
	return FixtureInput{Tenant: "acme", Owner: "ann", Tool: tool, InputTimeout: Duration(time.Hour)}
}

// formAnswer answers the open request's questions in answers (key → content) as the frontend's
// tasks/update does: an approve carrying them as its comment.
func formAnswer(h *jobHarness, answers map[string]any) func() ResumeRequest {
	return func() ResumeRequest {
		r := h.answer(owner, DecisionApprove)()
		b, err := json.Marshal(map[string]any{"answers": answers})
		require.NoError(h.t, err)
		r.Comment = string(b)
		return r
	}
}

func TestFixture_GreetAndSlowCompute(t *testing.T) {
	h := newFixtureHarness(t)
	in := fixtureInput(FixtureGreet)
	in.Name = "World"
	h.execute(in)
	var res FixtureResult
	h.resultInto(&res)
	assert.Equal(t, "Hello, World!", res.Text)
	assert.Equal(t, []Status{StatusRunning, StatusSucceeded}, h.statusSeq())
	assert.Zero(t, h.count(""), "greet's call waits for its job: no activity")

	h = newFixtureHarness(t)
	in = fixtureInput(FixtureSlowCompute)
	in.Seconds, in.Label = 5, "x"
	h.execute(in)
	h.resultInto(&res)
	assert.Equal(t, "Computed x after 5 seconds", res.Text)
	assert.Equal(t, 1, h.count("FixtureText"))
}

// TestFixture_SlowComputeCancelled: a cancel while it waits ends the job cancelled, at once.
func TestFixture_SlowComputeCancelled(t *testing.T) {
	h := newFixtureHarness(t)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 10*time.Second)
	in := fixtureInput(FixtureSlowCompute)
	in.Seconds = 60
	h.execute(in)
	requireCanceled(t, h.env.GetWorkflowError())
	assert.Equal(t, ErrCodeCancelled, h.lastJobError().Code)
	assert.Equal(t, []Status{StatusRunning, StatusCancelling, StatusCancelled}, h.statusSeq())
	assert.Zero(t, h.count("FixtureText"))
}

// TestFixture_Failures: failing_job fails with a tool error's code, protocol_error_job with
// internal (the one a Tasks client sees as a failed task).
func TestFixture_Failures(t *testing.T) {
	for tool, code := range map[string]string{FixtureFailingJob: ErrCodeFixtureFailed, FixtureProtocolError: ErrCodeInternal} {
		t.Run(tool, func(t *testing.T) {
			h := newFixtureHarness(t)
			h.execute(fixtureInput(tool))
			requireAppErrType(t, h.env.GetWorkflowError(), code)
			assert.Equal(t, code, h.lastJobError().Code)
			assert.Equal(t, []Status{StatusRunning, StatusFailed}, h.statusSeq())
			assert.Zero(t, h.count(""))
		})
	}
}

// TestFixture_MultiInputPartial: both questions are asked at once; answering one re-asks the
// other alone (a new input ID and digest), and the job completes once both are answered.
func TestFixture_MultiInputPartial(t *testing.T) {
	h := newFixtureHarness(t)
	first := h.resumeAt(time.Minute, "r1", formAnswer(h, map[string]any{"first": map[string]any{"name": "one"}}))
	second := h.resumeAt(2*time.Minute, "r2", formAnswer(h, map[string]any{"second": map[string]any{"name": "two"}}))
	h.execute(fixtureInput(FixtureMultiInput))
	var res FixtureResult
	h.resultInto(&res)
	require.True(t, first.completed && second.completed, "both answers accepted")
	asked := h.askedInputs()
	require.Len(t, asked, 2)
	assert.Equal(t, []any{"first", "second"}, toAny(asked[0].Scope["pending"]))
	assert.Equal(t, []any{"second"}, toAny(asked[1].Scope["pending"]))
	assert.NotEqual(t, asked[0].InputID, asked[1].InputID)
	assert.NotEqual(t, asked[0].ScopeDigest, asked[1].ScopeDigest)
	assert.Contains(t, res.Text, "first=map[name:one]")
	assert.Contains(t, res.Text, "second=map[name:two]")
	assert.Equal(t, []Status{StatusAwaitingInput, StatusAwaitingInput, StatusRunning, StatusSucceeded}, h.statusSeq())
}

// TestFixture_ConfirmDelete: one question; an answer for it completes the job; a plain approve
// (resume_fixture) would too; a reject cancels it like any job.
func TestFixture_ConfirmDelete(t *testing.T) {
	h := newFixtureHarness(t)
	h.resumeAt(time.Minute, "r1", formAnswer(h, map[string]any{"confirm": map[string]any{"confirm": true}}))
	in := fixtureInput(FixtureConfirmDelete)
	in.Filename = "a.txt"
	h.execute(in)
	var res FixtureResult
	h.resultInto(&res)
	assert.Equal(t, "Deleted a.txt (answers: confirm=map[confirm:true])", res.Text)

	h = newFixtureHarness(t)
	h.resumeAt(time.Minute, "r1", h.answer(owner, DecisionApprove))
	h.execute(in)
	h.resultInto(&res)
	assert.Equal(t, "Deleted a.txt (answers: confirm=<nil>)", res.Text)

	h = newFixtureHarness(t)
	got := h.resumeAt(time.Minute, "r1", h.answer(owner, DecisionReject))
	h.execute(in)
	require.True(t, got.completed)
	requireCanceled(t, h.env.GetWorkflowError())
	assert.Equal(t, ErrCodeRejected, h.lastJobError().Code)
}

// TestFixture_InputExpires: an unanswered question fails the job input_expired.
func TestFixture_InputExpires(t *testing.T) {
	h := newFixtureHarness(t)
	in := fixtureInput(FixtureConfirmDelete)
	in.InputTimeout = Duration(time.Minute)
	h.execute(in)
	requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeInputExpired)
	assert.Equal(t, []Status{StatusAwaitingInput, StatusFailed}, h.statusSeq())
}

// toAny is a []string scope value as the memo's JSON gives it back.
func toAny(v any) []any {
	var out []any
	if s, ok := v.([]string); ok {
		for _, x := range s {
			out = append(out, x)
		}
		return out
	}
	out, _ = v.([]any)
	return out
}

// TestFixture_Replay replays the fixture histories recorded by a real server (genfixture).
func TestFixture_Replay(t *testing.T) {
	for file, id := range map[string]string{
		"fixture_multi_input.json":    "acme/fixture/ann/replay-multi",
		"fixture_cancelled.json":      "acme/fixture/ann/replay-cancel",
		"fixture_protocol_error.json": "acme/fixture/ann/replay-protocol-error",
	} {
		t.Run(file, func(t *testing.T) {
			replay(t, file, id, FixtureWorkflowName, (&Workflows{}).Fixture)
		})
	}
}

// TestFixture_RecordedPartialAnswer: on a real server, the question left open by a partial
// answer is asked again in the very workflow task that completes the answer's update, so a
// tasks/get after the tasks/update ack sees it (the conformance suite's partial fulfilment).
func TestFixture_RecordedPartialAnswer(t *testing.T) {
	evs := loadHistory(t, "fixture_multi_input.json").GetEvents()
	for i, ev := range evs {
		if ev.GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED {
			continue
		}
		// The update completed in a workflow task; its other commands follow it until the next
		// task is scheduled.
		reasked := false
		for _, next := range evs[i+1:] {
			if next.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED {
				break
			}
			if next.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED {
				reasked = true
			}
		}
		assert.True(t, reasked, "event %d: the update completed without the memo upsert in its workflow task", ev.GetEventId())
		return // the first (partial) answer is the one that matters
	}
	t.Fatal("no completed update in the recording")
}
