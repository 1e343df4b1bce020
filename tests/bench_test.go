package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jobgate/jobgate/workflows"
)

// BenchmarkGetEval measures one get_eval through the whole stack (HTTP, bearer verification,
// MCP stateless session, handle check, Describe, policy, view) against its baseline: the bare
// DescribeWorkflowExecution the frontend itself must make. A succeeded job also reads its
// result from the close event (a second Temporal call). Report the ratios:
//
//	go test ./tests -run '^$' -bench GetEval -benchtime 2s
func BenchmarkGetEval(b *testing.B) {
	bundle := setup(b)
	cs := bundle.session(ana, 0, "")
	v := mustView(b, call(b, cs, "start_eval", startArgs("bench-"+randHex(4), 1, map[string]any{"episode_ms": 0})))
	waitStatus(b, cs, v.Handle, workflows.StatusSucceeded, 30*time.Second)
	b.Run("Baseline/Describe", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := bundle.temporal.DescribeWorkflowExecution(ctx, v.JobID, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	waiting := mustView(b, call(b, cs, "start_eval", startArgs("bench-"+randHex(4), 101, nil)))
	waitStatus(b, cs, waiting.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	b.Run("Frontend/get_eval_awaiting_input", func(b *testing.B) {
		args := map[string]any{"handle": waiting.Handle}
		for b.Loop() {
			if o := call(b, cs, "get_eval", args); o.Err != nil {
				b.Fatal(o.Err.Message)
			}
		}
	})
	b.Run("Frontend/get_eval_succeeded", func(b *testing.B) {
		args := map[string]any{"handle": v.Handle}
		for b.Loop() {
			if o := call(b, cs, "get_eval", args); o.Err != nil {
				b.Fatal(o.Err.Message)
			}
		}
	})
}
