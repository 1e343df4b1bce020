package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// TestMRTRStartUpdateWithStart: a start_eval that at once waits for its owner is answered with
// the owner's input request by one Update-With-Start, and keeps start_*'s idempotency exactly.
// The start operation's conflict policy is FAIL: a key that names a job starts nothing and sends
// the job no update, so the same arguments get the same job (asked again, one first-state
// update in its history) and other arguments get idempotency_key_reused with nothing started.
func TestMRTRStartUpdateWithStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.mrtrSession(ana, 0, neverCalled, true)
	key := uniqueKey(t)
	id := "acme/eval/ana/" + key
	start := func(episodes int) *mcp.CallToolResult {
		return rawCall(t, cs, &mcp.CallToolParams{Name: "start_eval", Arguments: startArgs(key, episodes, map[string]any{"episode_ms": 0})})
	}
	for i := range 2 {
		res := start(150)
		el, ok := res.InputRequests[jobcore.InputKeyApproval].(*mcp.ElicitParams)
		if !res.NeedsInput() || !ok || !strings.Contains(el.Message, "150 episodes") || res.RequestState == "" {
			t.Fatalf("start %d: want the owner's input request, got %+v", i, res)
		}
	}
	o := parseOutcome(t, "start_eval", start(151))
	mustErr(t, o, jobcore.CodeIdempotencyKeyReused)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	it := b.temporal.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	started, firstState, other := 0, 0, 0
	for it.HasNext() {
		ev, err := it.Next()
		must(t, err)
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			started++
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			if ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetName() == workflows.UpdateFirstState {
				firstState++
			} else {
				other++
			}
		}
	}
	if started != 1 || firstState != 1 || other != 0 {
		t.Fatalf("history: %d starts, %d first-state updates, %d other updates; want 1, 1, 0", started, firstState, other)
	}
	d, err := b.temporal.DescribeWorkflowExecution(ctx, id, "")
	must(t, err)
	if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("job status %s, want running (waiting for its owner)", st)
	}
}

// TestMRTRStartWithoutWorker: with no worker the first state never comes; start_eval still
// starts the job exactly once and answers with it queued after the first-state wait (3 s), the
// retry finds the same job, and once a worker runs the retry is asked.
//
// Full tier: it waits out the first-state wait twice (6 s idle). The frontend's side of it
// (no first state: queued, created once; the retry with a worker asks) runs fast over the
// in-memory store in frontend's TestStart_FirstState.
func TestMRTRStartWithoutWorker(t *testing.T) {
	testenv.Heavy(t, "waits out the 3 s first-state wait twice, with no worker")
	t.Parallel()
	b := setup(t, setupOpts{noWorker: true})
	cs := b.mrtrSession(ana, 0, neverCalled, true)
	args := startArgs(uniqueKey(t), 150, map[string]any{"episode_ms": 0})
	start := func() *mcp.CallToolResult {
		return rawCall(t, cs, &mcp.CallToolParams{Name: "start_eval", Arguments: args})
	}
	v := mustView(t, parseOutcome(t, "start_eval", start()))
	if v.Status != workflows.StatusQueued || v.Created == nil || !*v.Created {
		t.Fatalf("start without worker: %+v", v)
	}
	again := mustView(t, parseOutcome(t, "start_eval", start()))
	if again.JobID != v.JobID || again.Created == nil || *again.Created || again.Status != workflows.StatusQueued {
		t.Fatalf("retry without worker: %+v", again)
	}
	b.startWorker()
	var res *mcp.CallToolResult
	eventually(t, 30*time.Second, "the retry to be asked", func() bool {
		res = start()
		return res.NeedsInput()
	})
	if el, ok := res.InputRequests[jobcore.InputKeyApproval].(*mcp.ElicitParams); !ok || !strings.Contains(el.Message, "150 episodes") {
		t.Fatalf("retry with a worker: %+v", res)
	}
}
