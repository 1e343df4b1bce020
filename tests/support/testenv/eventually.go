package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond until it returns true, and fails t if within passes first; what names
// the awaited condition in the failure. Polls start 5 ms apart (an in-process condition is met
// soon) and back off to 50 ms (a condition read over the network is not polled in a loop).
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for wait := 5 * time.Millisecond; !cond(); wait = min(2*wait, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(wait) // the poll interval; the deadline above bounds the wait
	}
}
