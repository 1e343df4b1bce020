package telemetry

import (
	"context"
	"sync"
	"time"
)

const (
	// readyTTL is how long one Temporal health check answers /readyz. /readyz is
	// unauthenticated and polled by every load balancer: without it each request is a call to
	// Temporal that anyone who reaches the port can multiply.
	ReadyTTL = time.Second
	// readyCheckTimeout bounds one health check.
	readyCheckTimeout = 3 * time.Second
)

// readiness caches the result of a health check for ttl and runs at most one check at a time:
// concurrent callers with a stale result wait for the check in flight and share its result.
type Readiness struct {
	check func(context.Context) error
	ttl   time.Duration
	now   func() time.Time

	mu     sync.Mutex
	have   bool
	at     time.Time // when the cached result was taken
	err    error
	flight chan struct{} // closed when the check in flight ends; nil when none runs
}

func NewReadiness(check func(context.Context) error, ttl time.Duration, now func() time.Time) *Readiness {
	return &Readiness{check: check, ttl: ttl, now: now}
}

// get answers the cached result while it is fresh, else waits for (or runs) one check. A
// caller that gives up (ctx) stops waiting; the check goes on for the others, on a context of
// its own so one impatient caller cannot fail it for everyone.
func (r *Readiness) Get(ctx context.Context) error {
	r.mu.Lock()
	for {
		if r.have && r.now().Sub(r.at) < r.ttl {
			err := r.err
			r.mu.Unlock()
			return err
		}
		if r.flight == nil {
			break
		}
		ch := r.flight
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.mu.Lock()
	}
	ch := make(chan struct{})
	r.flight = ch
	r.mu.Unlock()

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyCheckTimeout)
	err := r.check(cctx)
	cancel()

	r.mu.Lock()
	r.have, r.at, r.err, r.flight = true, r.now(), err, nil
	r.mu.Unlock()
	close(ch)
	return err
}
