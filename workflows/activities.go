package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// How job workflows run their activities: one retry policy and one bounded fan-out, shared by
// the kinds (eval episodes, export parts).

// retryPolicy is the retry policy of a job's activities: backoff from 1s, doubling up to 30s,
// at most maxAttempts attempts, and no retry for the nonRetryable error types (an activity
// reports with them what retrying the same input cannot fix).
func retryPolicy(maxAttempts int32, nonRetryable ...string) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        30 * time.Second,
		MaximumAttempts:        maxAttempts,
		NonRetryableErrorTypes: nonRetryable,
	}
}

// fanOut keeps at most limit activities in flight. While more() allows one, start starts it
// and returns its future and what to do when it completes; fanOut calls that on completion and
// then tick (progress), one completion at a time. It returns once none is in flight and more()
// allows no further start, so more() is where a kind stops on cancel or failure.
//
// The order of starts, completions and ticks is the one each kind's own loop had, so the
// commands a run issues, and recorded histories, are unchanged.
func fanOut(ctx workflow.Context, limit int, more func() bool, start func() (workflow.Future, func(workflow.Future)), tick func()) {
	sel := workflow.NewSelector(ctx)
	inflight := 0
	for {
		for inflight < limit && more() {
			f, done := start()
			inflight++
			sel.AddFuture(f, func(f workflow.Future) {
				inflight--
				done(f)
			})
		}
		if inflight == 0 {
			return
		}
		sel.Select(ctx)
		tick()
	}
}
