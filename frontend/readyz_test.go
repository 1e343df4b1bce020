package frontend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/telemetry"
)

// TestReadinessCachedAndSingleFlight: concurrent callers share one health check; a result
// (healthy or not) answers for readyTTL; after that one new check runs; a caller that gives up
// does not fail the check for the others.
func TestReadinessCachedAndSingleFlight(t *testing.T) {
	var (
		mu    sync.Mutex
		now   = time.Unix(1_800_000_000, 0)
		calls atomic.Int64
		fail  atomic.Bool
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	release := make(chan struct{})
	started := make(chan struct{}, 100)
	r := telemetry.NewReadiness(func(ctx context.Context) error {
		calls.Add(1)
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		if fail.Load() {
			return errors.New("unreachable")
		}
		return nil
	}, telemetry.ReadyTTL, clock)

	// 64 concurrent callers while the first check is in flight: one check, 64 answers.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- r.Get(context.Background()) }()
	}
	<-started
	// A caller that gives up while waiting gets its own context's error...
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Get(gone); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("shared check: %v", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d health checks for 65 concurrent callers", n)
	}
	// Fresh for readyTTL: no new check.
	advance(telemetry.ReadyTTL - time.Millisecond)
	for range 100 {
		if err := r.Get(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d checks within the TTL", n)
	}
	// Stale: exactly one new check; a failure is cached the same way.
	fail.Store(true)
	advance(time.Millisecond)
	for range 10 {
		if err := r.Get(context.Background()); err == nil {
			t.Fatal("a failed check answered healthy")
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d checks after the TTL, want 2", n)
	}
}
