package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

func TestIdempotency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.session(ana, 0, "")

	t.Run("SameArgumentsSameJob", func(t *testing.T) {
		key := uniqueKey(t)
		first := mustView(t, call(t, cs, "start_eval", startArgs(key, 3, map[string]any{"episode_ms": 10})))
		// Defaults spelled out are the same arguments.
		again := mustView(t, call(t, b.session(ana, 1, ""), "start_eval", map[string]any{"idempotency_key": key, "suite": "demo",
			"episodes": 3, "concurrency": 3, "params": map[string]any{"episode_ms": 10, "fail_rate": 0.05}}))
		if first.Created == nil || !*first.Created || again.Created == nil || *again.Created {
			t.Fatalf("created flags: first %v again %v", first.Created, again.Created)
		}
		if again.JobID != first.JobID || again.JobID != "acme/eval/ana/"+key {
			t.Fatalf("job ids %s %s", first.JobID, again.JobID)
		}
		// Also after it finished.
		waitStatus(t, cs, first.Handle, workflows.StatusSucceeded, 30*time.Second)
		done := mustView(t, call(t, cs, "start_eval", startArgs(key, 3, map[string]any{"episode_ms": 10})))
		if *done.Created || done.Status != workflows.StatusSucceeded || done.Result == nil {
			t.Fatalf("after finish: created=%v status=%s result=%v", *done.Created, done.Status, done.Result)
		}
		if n := runsOf(t, b, first.JobID); n != 1 {
			t.Fatalf("%d runs for one key", n)
		}
	})
	t.Run("DifferentArgumentsRejected", func(t *testing.T) {
		key := uniqueKey(t)
		first := mustView(t, call(t, cs, "start_eval", startArgs(key, 2, map[string]any{"episode_ms": 10})))
		for _, args := range []map[string]any{
			startArgs(key, 3, map[string]any{"episode_ms": 10}),
			startArgs(key, 2, map[string]any{"episode_ms": 11}),
			startArgs(key, 2, nil),
		} {
			mustErr(t, call(t, cs, "start_eval", args), "idempotency_key_reused")
		}
		if n := runsOf(t, b, first.JobID); n != 1 {
			t.Fatalf("%d runs after reuse attempts", n)
		}
	})
	// Keys are per owner: bo's start with ana's key (same or other arguments) starts bo's own
	// job; it neither answers idempotency_key_reused (an oracle for ana's keys) nor touches hers.
	t.Run("SameKeyOtherOwnerStartsOwnJob", func(t *testing.T) {
		key := uniqueKey(t)
		a := mustView(t, call(t, cs, "start_eval", startArgs(key, 2, map[string]any{"episode_ms": 10})))
		before, err := b.temporal.DescribeWorkflowExecution(context.Background(), a.JobID, "")
		must(t, err)
		bos := b.session(bo, 1, "")
		for i, args := range []map[string]any{
			startArgs(key, 2, map[string]any{"episode_ms": 10}), // ana's very arguments
			startArgs(key, 3, map[string]any{"episode_ms": 10}), // other arguments: bo's retry of his own key is reused
		} {
			o := call(t, bos, "start_eval", args)
			if i == 1 {
				mustErr(t, o, "idempotency_key_reused")
				continue
			}
			v := mustView(t, o)
			if v.Created == nil || !*v.Created || v.JobID == a.JobID || v.Owner != "bo" || v.JobID != "acme/eval/bo/"+key {
				t.Fatalf("bo's start with ana's key: created=%v job %s owner %s (ana's job %s)", v.Created, v.JobID, v.Owner, a.JobID)
			}
			if n := runsOf(t, b, v.JobID); n != 1 {
				t.Fatalf("%d runs of bo's job", n)
			}
		}
		// Ana's job is untouched: one run, the same run, her arguments.
		after, err := b.temporal.DescribeWorkflowExecution(context.Background(), a.JobID, "")
		must(t, err)
		if after.GetWorkflowExecutionInfo().GetExecution().GetRunId() != before.GetWorkflowExecutionInfo().GetExecution().GetRunId() ||
			runsOf(t, b, a.JobID) != 1 {
			t.Fatal("ana's job changed after bo used her key")
		}
		again := mustView(t, call(t, cs, "start_eval", startArgs(key, 2, map[string]any{"episode_ms": 10})))
		if again.JobID != a.JobID || again.Created == nil || *again.Created {
			t.Fatalf("ana's retry after bo: %s created=%v", again.JobID, again.Created)
		}
	})
	t.Run("SameKeyOtherTenantIsIndependent", func(t *testing.T) {
		key := uniqueKey(t)
		a := mustView(t, call(t, cs, "start_eval", startArgs(key, 2, map[string]any{"episode_ms": 10})))
		g := mustView(t, call(t, b.session(gus, 0, ""), "start_eval", startArgs(key, 5, map[string]any{"episode_ms": 10})))
		if !*g.Created || g.JobID == a.JobID || g.JobID != "globex/eval/gus/"+key {
			t.Fatalf("tenants share a key namespace: %s vs %s", a.JobID, g.JobID)
		}
	})
	t.Run("ConcurrentDuplicatesOnTwoReplicas", func(t *testing.T) {
		key := uniqueKey(t)
		sessions := []*mcp.ClientSession{b.session(ana, 0, ""), b.session(ana, 1, "2025-11-25")}
		const n = 12
		var wg sync.WaitGroup
		views := make([]outcome, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				views[i] = call(t, sessions[i%2], "start_eval", startArgs(key, 4, map[string]any{"episode_ms": 10}))
			}()
		}
		wg.Wait()
		created := 0
		for _, o := range views {
			v := mustView(t, o)
			if v.JobID != "acme/eval/ana/"+key {
				t.Fatalf("job id %s", v.JobID)
			}
			if *v.Created {
				created++
			}
		}
		if created != 1 {
			t.Fatalf("%d calls report created=true, want exactly 1", created)
		}
		if n := runsOf(t, b, "acme/eval/ana/"+key); n != 1 {
			t.Fatalf("%d workflow runs", n)
		}
	})
}

// TestCrossReplica: start on replica A, then get, resume and cancel on replica B.
func TestCrossReplica(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.session(ana, 0, "")
	bb := b.session(ana, 1, "2025-06-18")
	v := mustView(t, call(t, a, "start_eval", startArgs(uniqueKey(t), 101, map[string]any{"episode_ms": 30000})))
	w := waitStatus(t, bb, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	if w.NeedsInput == nil {
		t.Fatal("awaiting_input without needs_input")
	}
	r := mustView(t, call(t, bb, "resume_eval", map[string]any{"handle": v.Handle, "input_id": w.NeedsInput.InputID,
		"scope_digest": w.NeedsInput.ScopeDigest, "decision": "approve"}))
	if r.Status != workflows.StatusRunning && r.Status != workflows.StatusAwaitingInput {
		t.Fatalf("after approve: %s", r.Status)
	}
	waitStatus(t, a, v.Handle, workflows.StatusRunning, 30*time.Second)
	c := mustView(t, call(t, bb, "cancel_eval", map[string]any{"handle": v.Handle, "reason": "test over"}))
	if c.Status != workflows.StatusCancelling && c.Status != workflows.StatusCancelled {
		t.Fatalf("cancel: %s", c.Status)
	}
	f := waitStatus(t, a, v.Handle, workflows.StatusCancelled, 30*time.Second)
	if f.Error == nil || f.Error.Code != workflows.ErrCodeCancelled || f.PollAfterMS != 0 {
		t.Fatalf("final: %+v", f)
	}
}

// TestGetWithoutWorker: the job view answers from the server while no worker runs.
func TestGetWithoutWorker(t *testing.T) {
	// A worker stopped and started twice, waiting out the episode it held: 15 s of waits.
	testenv.Heavy(t, "stops and restarts a worker mid-run")
	t.Parallel()
	b := setup(t, setupOpts{noWorker: true})
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 4, map[string]any{"episode_ms": 400})))
	g := mustView(t, call(t, b.session(ana, 1, ""), "get_eval", map[string]any{"handle": v.Handle}))
	if g.Status != workflows.StatusQueued || g.Progress.Total != 4 || g.Progress.AsOf.IsZero() || g.PollAfterMS == 0 {
		t.Fatalf("queued view: %+v", g)
	}
	// A cancel is accepted while no worker runs; the job reports cancelling until one does.
	c := mustView(t, call(t, cs, "cancel_eval", map[string]any{"handle": v.Handle}))
	if c.Status != workflows.StatusCancelling {
		t.Fatalf("cancel without worker: %s", c.Status)
	}
	// Any replica, later, still says so: the recorded request is read from the server.
	if g := mustView(t, call(t, b.session(ana, 1, ""), "get_eval", map[string]any{"handle": v.Handle})); g.Status != workflows.StatusCancelling {
		t.Fatalf("get after cancel without worker: %s", g.Status)
	}
	b.startWorker()
	waitStatus(t, cs, v.Handle, workflows.StatusCancelled, 30*time.Second)

	// Mid-run: progress survives the worker's absence, marked as of its last update.
	v2 := mustView(t, call(t, cs, "start_eval", map[string]any{"idempotency_key": uniqueKey(t), "suite": "demo",
		"episodes": 40, "concurrency": 1, "params": map[string]any{"episode_ms": 100, "fail_rate": 0}}))
	var mid = v2
	eventually(t, 30*time.Second, "some progress", func() bool {
		mid = mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v2.Handle}))
		return mid.Progress.Done > 0
	})
	b.stopWorker()
	g2 := mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v2.Handle}))
	if g2.Status != workflows.StatusRunning || g2.Progress.Done < mid.Progress.Done || g2.Progress.AsOf.IsZero() {
		t.Fatalf("view without worker: %+v", g2)
	}
	b.startWorker()
	waitStatus(t, cs, v2.Handle, workflows.StatusSucceeded, 60*time.Second)
}

// runsOf counts the workflow runs ever started under one workflow ID, from visibility (which
// lists every run, closed or open), waiting until at least the first is indexed.
func runsOf(t *testing.T, b *testBundle, id string) int {
	t.Helper()
	n := 0
	eventually(t, 10*time.Second, "visibility rows for "+id, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := b.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, Query: fmt.Sprintf("WorkflowId = %q", id)})
		must(t, err)
		n = len(resp.GetExecutions())
		return n > 0
	})
	return n
}
