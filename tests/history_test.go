package tests

import (
	"context"
	"slices"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
)

// history reads every event of a workflow's latest run from c (tests assert against stored
// history: what ran, what was retried, what reached the job).
func history(t testing.TB, c client.Client, id string) []*historypb.HistoryEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var evs []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		must(t, err)
		evs = append(evs, e)
	}
	return evs
}

// acHistory is the history of the bundle's job id.
func acHistory(t testing.TB, b *testBundle, id string) []*historypb.HistoryEvent {
	t.Helper()
	return history(t, b.temporal, id)
}

// acCount counts the events of any of the given types.
func acCount(evs []*historypb.HistoryEvent, types ...enumspb.EventType) int {
	n := 0
	for _, e := range evs {
		if slices.Contains(types, e.GetEventType()) {
			n++
		}
	}
	return n
}

// acWantCounts asserts how many events of each type evs holds.
func acWantCounts(t testing.TB, evs []*historypb.HistoryEvent, want map[enumspb.EventType]int) {
	t.Helper()
	types := make([]enumspb.EventType, 0, len(want))
	for ty := range want {
		types = append(types, ty)
	}
	slices.Sort(types) // one order of messages from run to run
	for _, ty := range types {
		if n := acCount(evs, ty); n != want[ty] {
			t.Errorf("history has %d %s events, want %d", n, ty, want[ty])
		}
	}
}

// retriedAttempts counts the activity attempts after the first in evs.
func retriedAttempts(evs []*historypb.HistoryEvent) int {
	n := 0
	for _, ev := range evs {
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && a.GetAttempt() > 1 {
			n++
		}
	}
	return n
}
