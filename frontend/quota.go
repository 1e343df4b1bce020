package frontend

import (
	"context"
	"fmt"
	"sync"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

// Quotas are counted in Temporal visibility, which every replica shares: running jobs
// (ExecutionStatus Running covers queued, awaiting input, running and cancelling), the episode
// concurrency of running evals (memo "slots"), and the owner's job creations in the last minute
// (counted so that a continue-as-new is not a new start).
//
// Admission costs the same whatever the tenant holds, and concurrent starts do not queue on
// it: the starts of one owner that arrive while a check is in flight wait for ONE next check
// (a "flight") and share its counts, each adding on top the reservations admitted before it
// (see below). A refusal by starts_per_minute_per_owner is remembered until the window frees
// (it cannot free sooner: a start never leaves the window early), so further starts in that
// window are refused without any Temporal call. No lock is held across a Temporal call.
//
// Visibility trails a start by a few milliseconds. Within one replica the gap is closed by
// reservations: a start admitted here counts against later starts of its tenant until a check
// finds it in visibility (or visibleWait after its start), and the counts leave out every job
// this replica holds a reservation for (WorkflowId NOT IN …), so each is counted exactly once.
// Across replicas the gap stays open: two replicas admitting the same tenant's starts in the same instant may each
// count the other's start as not yet there. The overshoot is therefore at most the starts of
// that tenant in flight on the other replicas (frontend/README.md "Fairness and quotas";
// tests/quota_test.go measures it).

// quotaPageSize bounds one visibility page read for a quota.
const quotaPageSize = 1000

// quotas is the replica-local admission state: reservations, shared check flights, full
// start windows and slot ledgers; the counts themselves come from visibility.
type quotas struct {
	mu      sync.Mutex
	seq     uint64
	pending map[string][]reservation // by tenant, in admission order
	flights map[flightKey]*flightSlot
	full    map[flightKey]windowFull
	ledgers map[string]slotLedger
}

// admission is an admitted start's reservation: started hands it to visibility, abandoned drops it.
type admission struct {
	f      *Frontend
	tenant string
	r      *reservation
}

// abandoned drops the reservation of a start that created nothing.
func (a admission) abandoned() {
	if a.r != nil {
		a.f.quotas.update(a.tenant, func(r *reservation) bool { return r.seq != a.r.seq })
	}
}

// started keeps the reservation until a check finds the job in visibility, or visibleWait
// passes.
func (a admission) started() {
	if a.r != nil {
		exp := a.f.opts.Now().Add(visibleWait)
		a.f.quotas.update(a.tenant, func(r *reservation) bool {
			if r.seq == a.r.seq {
				r.expires = exp
			}
			return true
		})
	}
}

// admit checks p's quotas for new job id holding episodes of episode concurrency. A refusal is
// a quota_exceeded tool error; the admission must be resolved with started or abandoned.
func (f *Frontend) admit(ctx context.Context, p authz.Principal, id string, episodes int) (admission, error) {
	pol := f.opts.Tenants.For(p.Tenant)
	l := pol.Limits
	if l.RunningJobsPerOwner == 0 && l.RunningJobsPerTenant == 0 && l.EpisodesInFlightPerTenant == 0 && l.StartsPerMinutePerOwner == 0 {
		return admission{}, nil
	}
	k := flightKey{p.Tenant, p.Subject}
	now := f.opts.Now()
	if l.StartsPerMinutePerOwner > 0 {
		// A full window stays full until its oldest counted start leaves it: no need to ask.
		if w, ok := f.quotas.windowRefusal(k, l.StartsPerMinutePerOwner, now); ok {
			return admission{}, f.refuse(p, windowRefusal(l.StartsPerMinutePerOwner, w.count, w.freeAt, now))
		}
	}
	r, fl, start := f.quotas.join(k, id, episodes, now)
	a := admission{f: f, tenant: p.Tenant, r: &r}
	if start {
		go f.fly(k, pol, fl)
	}
	wctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
	defer cancel()
	select {
	case <-fl.done:
	case <-wctx.Done():
		a.abandoned()
		return admission{}, fmt.Errorf("quota check: %w", wctx.Err())
	}
	if fl.err != nil {
		a.abandoned()
		return admission{}, fl.err
	}
	ref := fl.res.decide(pol, r, episodes, f.opts.Now())
	if ref != nil {
		a.abandoned()
		return admission{}, f.refuse(p, ref)
	}
	return a, nil
}

// refuse counts a refusal and renders it as the quota_exceeded tool error.
func (f *Frontend) refuse(p authz.Principal, ref *authz.QuotaRefusal) error {
	f.metrics.quotaRejected(f.opts.Tenants, p.Tenant, ref.Limit)
	te := &ToolError{Code: CodeQuotaExceeded, Message: ref.Limit + ": " + ref.Message + "; nothing was started", Retryable: true}
	if ref.RetryAfter > 0 {
		te.RetryAfterMS = max(ref.RetryAfter.Milliseconds(), 1)
	}
	return te
}

// countAll runs the visibility counts in parallel, each into its int.
func (f *Frontend) countAll(ctx context.Context, counts map[*int]string) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(counts))
	for into, q := range counts {
		wg.Go(func() {
			n, err := f.store.Count(ctx, q)
			if err != nil {
				errs <- fmt.Errorf("quota count: %w", err)
				return
			}
			*into = n
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// eachExecution pages through visibility for q, calling fn per job.
func (f *Frontend) eachExecution(ctx context.Context, q string, fn func(*job)) error {
	var token []byte
	for {
		jobs, next, err := f.store.List(ctx, q, quotaPageSize, token)
		if err != nil {
			return fmt.Errorf("quota list: %w", err)
		}
		for _, j := range jobs {
			fn(j)
		}
		if token = next; len(token) == 0 {
			return nil
		}
	}
}

// fairness is tenant's dispatch key and configured weight.
func (f *Frontend) fairness(tenant string) workflows.Fairness {
	return workflows.Fairness{Key: tenant, Weight: float32(f.opts.Tenants.For(tenant).FairnessWeight)}
}
