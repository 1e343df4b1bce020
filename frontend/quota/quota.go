package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
)

// Quotas are counted in the job store (Temporal visibility), which every replica shares: running jobs
// (an unfinished run covers queued, awaiting input, running and cancelling), the episode
// concurrency of running evals (search attribute JobSlots, summed by counts), and the owner's
// job creations in the last minute (counted so that a continue-as-new is not a new start).
//
// Admission costs the same whatever the tenant holds, and concurrent starts do not queue on
// it. A start waits for two shared checks ("flights"): its tenant's, which measures the
// tenant-wide figures (running jobs, episode slots held) once for every start of the tenant
// that arrives meanwhile, whoever its owner; and its owner's, which measures the owner's
// figures (running jobs, starts in the last minute). Each start adds on top the reservations
// admitted before it (see below). Every measure is a visibility COUNT: none lists executions,
// none reads closed ones. A refusal by starts_per_minute_per_owner is remembered until the
// window frees (it cannot free sooner: a start never leaves the window early), so further
// starts in that window are refused without any Temporal call. No lock is held across a
// Temporal call. Far from every limit a start waits for no check at all: fast.go decides it
// on the last check's figures while they are younger than Options.QuotaFresh, with a margin
// under each limit (what that allows across replicas is stated there).
//
// A check that cannot answer within Options.QuotaBudget (or whose visibility store is
// unreachable) never turns into unavailable: the start is decided by Options.QuotaDegraded —
// admitted within a bounded overshoot (QuotaOvershoot starts of the tenant per replica until a
// check answers again; they are reservations, so the next check counts them) or refused with
// quota_exceeded and retry_after_ms — and the log and jobgate_quota_degraded_total say which.
//
// Visibility trails a start by a few milliseconds. Within one replica the gap is closed by
// reservations: a start admitted here counts against later starts of its tenant until a check
// finds it in visibility (or visibleWait after its start), and the counts leave out every job
// this replica holds a reservation for (jobstore.Filter.ExcludeIDs), so each is counted exactly once.
// Across replicas the gap stays open: two replicas admitting the same tenant's starts in the same instant may each
// count the other's start as not yet there. The overshoot is therefore at most the starts of
// that tenant in flight on the other replicas (frontend/README.md "Fairness and quotas";
// tests/quota_test.go measures it).

// quotaPageSize bounds one visibility page read for a quota (only the slots of evals started
// before JobSlots existed, or on a namespace without it, are ever listed).
const quotaPageSize = 1000

// Defaults of the quota options.
const (
	BudgetDefault    = 2 * time.Second
	OvershootDefault = 8
)

// QuotaPolicy is how a start whose quota check cannot answer in time is decided.
type Policy string

const (
	// AdmitBounded admits it while fewer than Options.QuotaOvershoot starts of its tenant
	// were admitted so on this replica since a check of the tenant last answered; else refuses.
	AdmitBounded Policy = "admit-bounded"
	// Refuse refuses it: quota_exceeded, retryable, with retry_after_ms.
	Refuse Policy = "refuse"
)

// quotas is the replica-local admission state: reservations, shared check flights, full
// start windows, slot ledgers and unchecked admissions; the counts come from visibility.
type quotas struct {
	mu      sync.Mutex
	seq     uint64
	pending map[string][]reservation // by tenant, in admission order
	flights map[flightKey]*flightSlot
	full    map[flightKey]windowFull
	ledgers map[string]slotLedger
	// ranged is when each tenant's check last needed its evals' slots by range.
	ranged map[string]time.Time
	// epochs and bases are the starts-of-the-minute bound's state (bounds.go).
	epochs map[string]startEpoch
	bases  map[flightKey]ownerBase
	// tenantRunning is each tenant's last count of unfinished jobs (measureOwner's bound).
	tenantRunning map[string]tenantRunningCount
	// recent is each key's last check that answered (admitFast).
	recent map[flightKey]recentCheck
	// unchecked counts, by tenant, the starts admitted without a check (AdmitBounded)
	// since a check of the tenant last answered.
	unchecked map[string]int
	// ownersKeep is how long after a start last used an owner's figures an owner-groups
	// flight still counts that owner (activeOwnersLocked).
	ownersKeep time.Duration
}

// swept returns *m, made if nil, once the entries stale reports are deleted from it, when it
// holds more than most (0: always). It is how every map of figures above forgets the tenants and
// owners that stopped starting, so that none grows with every key it ever saw (q.mu held).
func swept[K comparable, V any](m *map[K]V, most int, stale func(K, V) bool) map[K]V {
	if *m == nil {
		*m = map[K]V{}
	}
	if len(*m) > most {
		for k, v := range *m {
			if stale(k, v) {
				delete(*m, k)
			}
		}
	}
	return *m
}

// admission is an admitted start's reservation: started hands it to visibility, abandoned drops it.
type admission struct {
	f      *Admitter
	tenant string
	r      *reservation
}

// abandoned drops the reservation of a start that created nothing.
func (a admission) Abandoned() {
	if a.r != nil {
		a.f.quotas.update(a.tenant, func(r *reservation) bool { return r.seq != a.r.seq })
	}
}

// started keeps the reservation until a check finds the job in visibility, or visibleWait
// passes.
func (a admission) Started() {
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

// quotaNeeds says which flights a start of a tenant under limits l waits for.
func quotaNeeds(l authz.Limits, episodes int) (tenant, owner bool) {
	// The tenant's figures also bound each owner's (bounds.go).
	tenant = l.RunningJobsPerTenant > 0 || l.RunningJobsPerOwner > 0 || l.StartsPerMinutePerOwner > 0 ||
		l.EpisodesInFlightPerTenant > 0 && episodes > 0
	owner = l.RunningJobsPerOwner > 0 || l.StartsPerMinutePerOwner > 0
	return tenant, owner
}

// admit checks p's quotas for new job id holding episodes of episode concurrency. A refusal is
// a quota_exceeded tool error; the admission must be resolved with started or abandoned.
func (adm *Admitter) Admit(ctx context.Context, p authz.Principal, id string, episodes int) (admission, error) {
	pol := adm.opts.Tenants.For(p.Tenant)
	l := pol.Limits
	needT, needO := quotaNeeds(l, episodes)
	if !needT && !needO {
		return admission{}, nil
	}
	ok := flightKey{p.Tenant, p.Subject}
	now := adm.opts.Now()
	if l.StartsPerMinutePerOwner > 0 {
		// A full window stays full until its oldest counted start leaves it: no need to ask.
		if w, full := adm.quotas.windowRefusal(ok, l.StartsPerMinutePerOwner, now); full {
			return admission{}, adm.refuse(p, windowRefusal(l.StartsPerMinutePerOwner, w.count, w.freeAt, now))
		}
	}
	budget := time.NewTimer(adm.opts.QuotaBudget)
	defer budget.Stop()
	fo := adm.admitFast(p, pol, id, episodes, needT, needO, now)
	if fo.inAir != nil {
		select {
		case <-fo.inAir.done:
			fo = adm.admitFast(p, pol, id, episodes, needT, needO, adm.opts.Now())
		case <-ctx.Done():
			return admission{}, fmt.Errorf("quota check: %w", ctx.Err())
		case <-budget.C:
			// Decided unchecked: a reservation like any other, so the next check counts it.
			adm.quotas.mu.Lock()
			r := adm.quotas.reserveLocked(p.Tenant, id, p.Subject, episodes, now)
			adm.quotas.mu.Unlock()
			return adm.degraded(ctx, p, admission{f: adm, tenant: p.Tenant, r: &r}, "budget", nil)
		}
	}
	if fo.ok {
		adm.decided("recent")
		return fo.a, nil
	}
	if fo.owner != nil {
		return adm.admitOwnerCounted(ctx, p, pol, episodes, fo, budget.C)
	}
	// With QuotaFresh on, a start that needs both flights waits for its tenant's first: the
	// tenant's figures, counted after it arrived, often bound its owner's (no owner flight).
	deferOwner := needT && needO && adm.opts.QuotaFresh > 0
	r, fls := adm.quotas.join(p.Tenant, p.Subject, id, episodes, now, needT, needO && !deferOwner)
	a := admission{f: adm, tenant: p.Tenant, r: &r}
	if out, err, done := adm.wait(ctx, p, pol, a, fls, budget.C); done {
		return out, err
	}
	var ts *tenantSnap
	var on *ownerSnap
	for _, j := range fls {
		switch res := j.fl.res.(type) {
		case *tenantSnap:
			ts = res
		case *ownerSnap:
			on = res
		}
	}
	if deferOwner {
		if o := uncountedOwner(p, ts); o != nil && ownerBounded(l, ts, o, r) {
			on = o
		} else {
			adm.quotas.mu.Lock()
			j := adm.quotas.enlistLocked(ok, episodes, adm.opts.Now())
			adm.quotas.mu.Unlock()
			if out, err, done := adm.wait(ctx, p, pol, a, []joined{j}, budget.C); done {
				return out, err
			}
			on = j.fl.res.(*ownerSnap)
		}
	}
	on, err := adm.ownerExact(ctx, pol, ok, r, ts, on)
	if err != nil {
		if errors.Is(err, jobstore.ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			return adm.degraded(ctx, p, a, "unavailable", err)
		}
		a.Abandoned()
		return admission{}, err
	}
	adm.decided("check")
	if ref := decide(pol, r, episodes, adm.opts.Now(), ts, on); ref != nil {
		a.Abandoned()
		return admission{}, adm.refuse(p, ref)
	}
	return a, nil
}

// admitOwnerCounted decides a start that admitFast found far from its tenant's limits on
// recent figures (fo.ts, fo.far) but whose owner's figures it could not bound: by the owner's
// flight it joined (fo.owner), and the owner's counts where that flight left them to bounds,
// against the owner's limits exactly.
func (adm *Admitter) admitOwnerCounted(ctx context.Context, p authz.Principal, pol authz.TenantPolicy, episodes int, fo fastOutcome, budget <-chan time.Time) (admission, error) {
	a := admission{f: adm, tenant: p.Tenant, r: &fo.r}
	if out, err, done := adm.wait(ctx, p, pol, a, []joined{*fo.owner}, budget); done {
		return out, err
	}
	l := pol.Limits
	on := fo.owner.fl.res.(*ownerSnap)
	if on.owner && (l.RunningJobsPerOwner > 0 && !on.runningCounted || l.StartsPerMinutePerOwner > 0 && !on.recentCounted) {
		var err error
		if on, err = adm.measureOwner(ctx, fo.owner.key, pol, &flight{rs: on.rs}, true); err != nil {
			if errors.Is(err, jobstore.ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				return adm.degraded(ctx, p, a, "unavailable", err)
			}
			a.Abandoned()
			return admission{}, err
		}
	}
	mixed := pol
	mixed.Limits.RunningJobsPerTenant, mixed.Limits.EpisodesInFlightPerTenant = fo.far.RunningJobsPerTenant, fo.far.EpisodesInFlightPerTenant
	adm.decided("check")
	if ref := decide(mixed, fo.r, episodes, adm.opts.Now(), fo.ts, on); ref != nil {
		// The tenant's part passed admitFast with the same figures: this is the owner's limit.
		a.Abandoned()
		return admission{}, adm.refuse(p, ref)
	}
	return a, nil
}

// wait waits for the flights a start joined (starting those it must) until each answered, the
// budget passed or ctx ended; done is true when that decided the start (out, err).
func (adm *Admitter) wait(ctx context.Context, p authz.Principal, pol authz.TenantPolicy, a admission, fls []joined, budget <-chan time.Time) (out admission, err error, done bool) {
	for _, j := range fls {
		if j.start {
			go adm.fly(j.key, pol, j.fl)
		}
	}
	for _, j := range fls {
		select {
		case <-j.fl.done:
		case <-ctx.Done():
			a.Abandoned()
			return admission{}, fmt.Errorf("quota check: %w", ctx.Err()), true
		case <-budget:
			out, err = adm.degraded(ctx, p, a, "budget", nil)
			return out, err, true
		}
		if err := j.fl.err; err != nil {
			if errors.Is(err, jobstore.ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				out, err = adm.degraded(ctx, p, a, "unavailable", err)
				return out, err, true
			}
			a.Abandoned()
			return admission{}, err, true
		}
	}
	return admission{}, nil, false
}

// degraded decides a start whose check did not answer (why: "budget" or "unavailable") by
// Options.QuotaDegraded.
func (adm *Admitter) degraded(ctx context.Context, p authz.Principal, a admission, why string, err error) (admission, error) {
	admitted := adm.opts.QuotaDegraded == AdmitBounded && adm.quotas.takeUnchecked(p.Tenant, adm.opts.QuotaOvershoot)
	decision := "refused"
	if admitted {
		decision = "admitted"
	}
	adm.metrics.Degraded.WithLabelValues(decision, why).Inc()
	log := adm.logger(ctx).With(zap.String("tenant", p.Tenant), zap.String("policy", string(adm.opts.QuotaDegraded)),
		zap.String("why", why), zap.Duration("budget", adm.opts.QuotaBudget))
	if err != nil {
		log = log.With(zap.Error(err))
	}
	if admitted {
		log.Warn("quota check did not answer in time: start admitted within the bounded overshoot",
			zap.Int("overshoot", adm.opts.QuotaOvershoot))
		return a, nil
	}
	log.Warn("quota check did not answer in time: start refused")
	a.Abandoned()
	adm.metrics.Rejected(p.Tenant, quotaLimitUnchecked)
	return admission{}, &wire.ToolError{Code: wire.CodeQuotaExceeded, Retryable: true, RetryAfterMS: max(adm.opts.QuotaBudget.Milliseconds(), 1),
		Message: quotaLimitUnchecked + ": your tenant's usage could not be counted in time; nothing was started, retry shortly"}
}

// quotaLimitUnchecked names a refusal by QuotaDegraded (the limit of a quota_exceeded message).
const quotaLimitUnchecked = "quota_check_unavailable"

// takeUnchecked counts one more start of tenant admitted without a check, if fewer than max are.
func (q *quotas) takeUnchecked(tenant string, max int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.unchecked[tenant] >= max {
		return false
	}
	if q.unchecked == nil {
		q.unchecked = map[string]int{}
	}
	q.unchecked[tenant]++
	return true
}

// checked forgets the tenant's unchecked starts: a check that answered counted them (each is a
// reservation until visibility shows it).
func (q *quotas) checked(tenant string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.unchecked, tenant)
}

// decided counts a start decided on figures ("recent" or "check": Metrics.Decided).
func (adm *Admitter) decided(figures string) {
	if adm.metrics.Decided != nil {
		adm.metrics.Decided.WithLabelValues(figures).Inc()
	}
}

// refuse counts a refusal and renders it as the quota_exceeded tool error.
func (adm *Admitter) refuse(p authz.Principal, ref *authz.QuotaRefusal) error {
	adm.metrics.Rejected(p.Tenant, ref.Limit)
	te := &wire.ToolError{Code: wire.CodeQuotaExceeded, Message: ref.Limit + ": " + ref.Message + "; nothing was started", Retryable: true}
	if ref.RetryAfter > 0 {
		te.RetryAfterMS = max(ref.RetryAfter.Milliseconds(), 1)
	}
	return te
}

// countAll runs the store counts in parallel, each into its int.
func (adm *Admitter) countAll(ctx context.Context, counts map[*int]jobstore.Filter) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(counts))
	for into, q := range counts {
		wg.Go(func() {
			n, err := adm.store.Count(ctx, q)
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

// eachExecution pages through the runs jf selects, calling fn per run.
func (adm *Admitter) eachExecution(ctx context.Context, jf jobstore.Filter, fn func(*jobstore.Job)) error {
	var token []byte
	for {
		jobs, next, err := adm.store.List(ctx, jf, quotaPageSize, token)
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
