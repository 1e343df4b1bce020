// measure.go measures a flight's usage in visibility: the tenant's figures (running
// jobs, the episode slots its running evals hold) and an owner's (running jobs, starts in the
// last minute). Every figure is a COUNT; only the slots of evals that carry no JobSlots (started
// before it existed, or on a namespace without it) are ever read row by row.

package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
)

// quotaScope is the store filters a flight counts in: the tenant's jobs less this replica's
// reservations, and the owner's among them (hasOwner false when no store can match the owner).
type quotaScope struct {
	tenant, owner jobstore.Filter
	hasOwner      bool
}

// quotaScopeOf builds the filters for tenant (and owner, if not "") leaving out rs: this
// replica's reservations are counted as such, never in the store, so there is no race with
// the store showing them between two counts.
func quotaScopeOf(tenant, owner string, rs []reservation) (quotaScope, error) {
	sc := quotaScope{tenant: jobstore.Filter{Tenant: tenant}}
	for _, r := range rs {
		sc.tenant.ExcludeIDs = append(sc.tenant.ExcludeIDs, r.id)
	}
	if err := sc.tenant.Validate(); err != nil {
		return quotaScope{}, fmt.Errorf("quota: %w", err)
	}
	// A subject no store can match (see ownerMatchable) has no owner counts: its tenant's
	// limits still hold.
	if owner != "" {
		o := sc.tenant
		o.Owner = owner
		if o.Validate() == nil {
			sc.owner, sc.hasOwner = o, true
		}
	}
	return sc, nil
}

// running is jf narrowed to unfinished runs (queued, awaiting input, running, cancelling).
func running(jf jobstore.Filter) jobstore.Filter {
	jf.Runs = jobstore.RunsUnfinished
	return jf
}

// runningSlotEvals is jf narrowed to the unfinished runs of the kinds that hold slots.
func (adm *Admitter) runningSlotEvals(jf jobstore.Filter) jobstore.Filter {
	jf = running(jf)
	jf.Kinds = adm.SlotKinds()
	return jf
}

// measureTenant takes the tenant's snapshot for the starts waiting on fl: its running jobs
// and, when a waiter asks for episodes, the slots its running evals hold.
func (adm *Admitter) measureTenant(ctx context.Context, tenant string, pol authz.TenantPolicy, fl *flight) (*tenantSnap, error) {
	l := pol.Limits
	sc, err := quotaScopeOf(tenant, "", fl.rs)
	if err != nil {
		return nil, err
	}
	s := &tenantSnap{rs: fl.rs}
	pendingEpisodes := 0
	for _, o := range fl.rs {
		pendingEpisodes += o.episodes
	}
	counts := map[*int]jobstore.Filter{}
	// The tenant's count also bounds each owner's: far from running_jobs_per_owner, the owners'
	// flights need not count their own (measureOwner).
	if l.RunningJobsPerTenant > 0 || l.RunningJobsPerOwner > 0 {
		counts[&s.running] = running(sc.tenant)
	}
	episodes := l.EpisodesInFlightPerTenant > 0 && fl.maxEp > 0
	// A tenant whose last check needed the slots by range has them counted in this first
	// round too: one round of counts instead of two while it holds that many evals. The ranges
	// (and the evals without JobSlots) add up to its running evals, which are then not asked.
	var pre *slotCounts
	if episodes && adm.quotas.rangedRecently(tenant, adm.opts.Now()) && adm.store.SlotsIndexed(ctx) {
		pre = newSlotCounts(adm.runningSlotEvals(sc.tenant), adm.MaxJobSlots(), counts)
	}
	var evals int
	if episodes && pre == nil {
		counts[&evals] = adm.runningSlotEvals(sc.tenant)
	}
	// The tenant's starts since its epoch bound each owner's starts of the minute (ownerBelow).
	var epoch time.Time
	if l.StartsPerMinutePerOwner > 0 {
		epoch = adm.quotas.epoch(tenant, adm.opts.Now())
		counts[&s.sinceEpoch] = createdSince(sc.tenant, epoch.Add(-visibilityLag))
		if adm.opts.QuotaFresh > 0 {
			counts[&s.recent] = createdSince(sc.tenant, fl.at.Add(-time.Minute))
			s.recentCounted = true
		}
	}
	release := adm.shownCount(tenant, fl.rs, "", counts)
	if err := adm.countAll(ctx, counts); err != nil {
		return nil, err
	}
	release()
	if pre != nil {
		evals = pre.legacy
		for _, r := range pre.ranges {
			evals += r.n
		}
	}
	if l.RunningJobsPerTenant > 0 && s.running+len(fl.rs) >= l.RunningJobsPerTenant {
		// At the limit: count once more before deciding. Visibility trails another replica's
		// start by milliseconds; this gives a start made there just before the count the
		// time to show.
		if err := adm.countAll(ctx, map[*int]jobstore.Filter{&s.running: running(sc.tenant)}); err != nil {
			return nil, err
		}
	}
	if l.RunningJobsPerOwner > 0 {
		adm.quotas.noteTenantRunning(tenant, s.running+len(fl.rs), adm.opts.Now())
	}
	if l.StartsPerMinutePerOwner > 0 {
		s.epoch = epoch
		adm.quotas.noteTenantSince(tenant, epoch, s.sinceEpoch+len(fl.rs), l.StartsPerMinutePerOwner, adm.opts.Now())
	}
	if episodes {
		s.heldMeasured = true
		// With QuotaFresh on, the bounds are narrowed until they also decide well under
		// farLimits' (half of it: starts decided on these figures later add their own and the
		// other replicas' likely ones, admitFast).
		far := l.EpisodesInFlightPerTenant
		if adm.opts.QuotaFresh > 0 {
			if fl, ok := adm.farLimits(l, 0, 1); ok {
				far = fl.EpisodesInFlightPerTenant / 2
			}
		}
		if s.held, s.heldMin, s.heldExact, err = adm.measureHeld(ctx, tenant, sc, fl, l.EpisodesInFlightPerTenant, far, evals, pendingEpisodes, pre); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// measureOwner takes the owner's snapshot for the starts waiting on fl: its running jobs and
// its starts in the last minute (exactly, with when they happened, once that nears the limit).
// Each is counted only when the tenant's last figures do not already keep every owner under
// its limit (ownerBelow); force counts both (ownerExact: this start's own tenant figures did
// not confirm the bound).
func (adm *Admitter) measureOwner(ctx context.Context, k flightKey, pol authz.TenantPolicy, fl *flight, force bool) (*ownerSnap, error) {
	l := pol.Limits
	sc, err := quotaScopeOf(k.tenant, k.owner, fl.rs)
	if err != nil {
		return nil, err
	}
	s := &ownerSnap{rs: fl.rs, owner: sc.hasOwner}
	if !s.owner {
		return s, nil
	}
	pendingMine := 0
	for _, o := range fl.rs {
		if o.owner == k.owner {
			pendingMine++
		}
	}
	now := adm.opts.Now()
	counts := map[*int]jobstore.Filter{}
	// When admitFast is on, bounds are judged against its limits (less the margin), the
	// running jobs' against 1/ownersCountedFrom of that: the fast path bounds owners by the
	// tenant's figures up to the whole of them, and the owner's own running jobs, counted here
	// meanwhile, serve its starts beyond (tenantBoundNearing). The starts of the minute are
	// counted only past the whole: a count per owner per refresh costs more than the rare
	// owner near its own minute limit, whose start then waits for that count
	// (admitOwnerCounted).
	lim := l
	if adm.opts.QuotaFresh > 0 {
		if far, ok := adm.farLimits(l, 0, 1); ok {
			lim.RunningJobsPerOwner, lim.StartsPerMinutePerOwner = far.RunningJobsPerOwner/ownersCountedFrom, far.StartsPerMinutePerOwner
		}
	}
	// The tenant's unfinished jobs bound the owner's: while the tenant's last count (with this
	// replica's reservations) is below the owner's limit, the owner's own is not asked.
	if l.RunningJobsPerOwner > 0 && (force || !adm.quotas.tenantRunningBelow(k.tenant, lim.RunningJobsPerOwner-len(fl.rs), now)) {
		counts[&s.running] = running(sc.owner)
		s.runningCounted = true
	}
	// The owner's starts of the minute are at most what they were at its last count plus all
	// of the tenant's starts since the epoch that count was made in (startEpoch), and at most
	// the tenant's starts of the minute (its recent figures, when admitFast is on).
	var epoch time.Time
	if l.StartsPerMinutePerOwner > 0 {
		if b, ok := adm.quotas.ownerBelow(k, lim.StartsPerMinutePerOwner-len(fl.rs), now); ok && !force {
			s.base = &b
		} else if !force && adm.quotas.tenantRecentBelow(k.tenant, lim.StartsPerMinutePerOwner-len(fl.rs), now) {
			// Bounded by the tenant's (decide checks it again against the start's own figures).
		} else {
			counts[&s.recent] = createdSince(sc.owner, now.Add(-time.Minute))
			s.recentCounted = true
			epoch = adm.quotas.epoch(k.tenant, now)
		}
	}
	// The tenant's flight hands started reservations back when the tenant has limits of its
	// own; else this one does, for the owner's.
	release := func() {}
	if l.RunningJobsPerTenant <= 0 && l.EpisodesInFlightPerTenant <= 0 && l.RunningJobsPerOwner <= 0 && l.StartsPerMinutePerOwner <= 0 {
		release = adm.shownCount(k.tenant, fl.rs, k.owner, counts)
	}
	if len(counts) == 0 {
		return s, nil
	}
	if err := adm.countAll(ctx, counts); err != nil {
		return nil, err
	}
	release()
	if s.recentCounted {
		adm.quotas.noteOwnerBase(k, ownerBase{c: s.recent, epoch: epoch})
	}
	if s.runningCounted && s.running+pendingMine >= l.RunningJobsPerOwner {
		// At the limit: count once more (as measureTenant).
		if err := adm.countAll(ctx, map[*int]jobstore.Filter{&s.running: running(sc.owner)}); err != nil {
			return nil, err
		}
	}
	if lim := l.StartsPerMinutePerOwner; s.recentCounted && s.recent+pendingMine >= lim {
		// The count (which also counts a job continued-as-new in the window) does not fit:
		// count exactly, and bound when the window frees.
		if s.win, err = adm.startWindow(ctx, sc.owner, now); err != nil {
			return nil, err
		}
		s.recent = s.win.len()
		if s.recent >= lim {
			// Full without this replica's reservations, and it stays full until its limit-th
			// most recent start turns a minute old: remember that, so the owner's next starts
			// in it are refused without asking.
			adm.rememberFullWindow(k, sc.owner, lim, s.win)
		}
	}
	return s, nil
}

// shownCount adds to counts the question whether visibility shows every started reservation
// of rs (of owner, when not ""), and returns what releases them once counts are answered: the
// next checks need not count them as reservations (these counts leave them out anyway).
func (adm *Admitter) shownCount(tenant string, rs []reservation, owner string, counts map[*int]jobstore.Filter) func() {
	ids, list := map[string]bool{}, []string{}
	for _, r := range rs {
		if !r.expires.IsZero() && (owner == "" || r.owner == owner) && jobstore.StoreValue(r.id) {
			ids[r.id] = true
			list = append(list, r.id)
		}
	}
	if len(list) == 0 {
		return func() {}
	}
	shown := new(int)
	// Each reservation's job is its tenant's (its ID begins with the tenant), so naming the
	// tenant selects the same runs; every filter names one.
	counts[shown] = jobstore.Filter{Tenant: tenant, IDs: list, Runs: jobstore.RunsLatest}
	return func() {
		if *shown >= len(ids) {
			adm.quotas.release(tenant, ids)
		}
	}
}

// measureHeld is the episode concurrency the tenant's running evals (evals of them, counted)
// hold: exact, or bounds [min, held] that decide every start waiting on fl (and, admitted,
// keep it under far ≤ limit: see admitFast). One eval holds
// from 1 to maxJobSlots slots; when that does not decide, JobSlots is counted by ranges
// (heldByCounts), or — on a namespace without it — the slot ledger decides (heldByLedger).
func (adm *Admitter) measureHeld(ctx context.Context, tenant string, sc quotaScope, fl *flight, limit, far, evals, pendingEpisodes int, pre *slotCounts) (held, heldMin int, exact bool, err error) {
	maxSlots := adm.MaxJobSlots()
	decided := func(lo, hi int) bool {
		return lo == hi || hi+pendingEpisodes+fl.maxEp <= far || lo+fl.minEp > limit
	}
	lo, hi := evals, evals*maxSlots
	if decided(lo, hi) {
		return hi, lo, lo == hi, nil
	}
	if adm.store.SlotsIndexed(ctx) {
		adm.quotas.noteRanged(tenant, adm.opts.Now())
		lo, hi, err = adm.heldByCounts(ctx, adm.runningSlotEvals(sc.tenant), maxSlots, decided, pre)
		return hi, lo, lo == hi, err
	}
	return adm.heldByLedger(ctx, tenant, fl, limit, evals, pendingEpisodes, maxSlots)
}

// slotRange is a count of running evals whose JobSlots lies in [lo, hi] (open: or above hi,
// for the top range: an eval started under a larger suite limit than today's counts as
// today's largest).
type slotRange struct {
	lo, hi int
	open   bool
	n      int
}

// filter narrows evals to the range.
func (r slotRange) filter(evals jobstore.Filter) jobstore.Filter {
	evals.SlotsMin, evals.SlotsMax = r.lo, r.hi
	if r.open {
		evals.SlotsMax = 0
	}
	return evals
}

// slotRanges are the first ranges counted: [1, 1] and [2, maxSlots] (open). Two counts
// decide the common tenant whose evals mostly run one episode at a time; halving refines the
// rest only where evals are.
func slotRanges(maxSlots int) []slotRange {
	if maxSlots <= 1 {
		return []slotRange{{lo: 1, hi: 1, open: true}}
	}
	return []slotRange{{lo: 1, hi: 1}, {lo: 2, hi: maxSlots, open: true}}
}

// heldByCounts bounds the slots evals (the filter) hold by counting them per JobSlots range,
// halving every range that holds evals until the bounds decide (or are exact): about log2 of
// the largest concurrency rounds of counts at most, whatever the tenant holds. Evals without
// JobSlots are counted apart (1 to maxSlots each) and, only if still undecided, read.
func (adm *Admitter) heldByCounts(ctx context.Context, evals jobstore.Filter, maxSlots int, decided func(lo, hi int) bool, pre *slotCounts) (lo, hi int, err error) {
	if pre == nil {
		counts := map[*int]jobstore.Filter{}
		pre = newSlotCounts(evals, maxSlots, counts)
		if err := adm.countAll(ctx, counts); err != nil {
			return 0, 0, err
		}
	}
	ranges, legacy := pre.ranges, pre.legacy
	bounds := func() (lo, hi int) {
		lo, hi = legacy, legacy*maxSlots
		for _, r := range ranges {
			lo, hi = lo+r.n*r.lo, hi+r.n*r.hi
		}
		return lo, hi
	}
	for lo, hi = bounds(); !decided(lo, hi); lo, hi = bounds() {
		// Halve each range that holds evals: count its lower half, and the upper half is the
		// rest (one count per range, not two).
		next := make([]slotRange, 0, 2*len(ranges))
		var lower []int // indexes in next of the lower halves just made
		for _, r := range ranges {
			if r.n == 0 || r.lo == r.hi {
				next = append(next, r)
				continue
			}
			mid := (r.lo + r.hi) / 2
			next = append(next, slotRange{lo: r.lo, hi: mid, n: r.n}, slotRange{lo: mid + 1, hi: r.hi, open: r.open})
			lower = append(lower, len(next)-2)
		}
		if len(lower) == 0 {
			break // every range is one value: only the evals without JobSlots are left open
		}
		counts := map[*int]jobstore.Filter{}
		for _, i := range lower {
			counts[&next[i].n] = next[i].filter(evals)
		}
		whole := make([]int, len(lower))
		for k, i := range lower {
			whole[k] = next[i].n
		}
		if err := adm.countAll(ctx, counts); err != nil {
			return 0, 0, err
		}
		for k, i := range lower {
			// The upper half holds the rest of the range (clamped: the two counts are not one
			// snapshot, and an eval may have started or ended between them).
			next[i+1].n = max(whole[k]-next[i].n, 0)
		}
		ranges = next
	}
	if decided(lo, hi) || legacy == 0 {
		return lo, hi, nil
	}
	// Only evals started before JobSlots existed are left: read their memo.
	held := 0
	unindexed := evals
	unindexed.NoSlots = true
	err = adm.eachExecution(ctx, unindexed, func(j *jobstore.Job) { held += j.Slots })
	if err != nil {
		return 0, 0, err
	}
	lo, hi = bounds()
	lo, hi = lo-legacy+held, hi-legacy*maxSlots+held
	return lo, hi, nil
}

// heldByLedger is measureHeld on a namespace without JobSlots (until `jobgate setup` adds it):
// the tenant's slot ledger (the last listing's sum, with every eval started since at the
// largest concurrency) and, when that does not decide, a listing of the running evals.
func (adm *Admitter) heldByLedger(ctx context.Context, tenant string, fl *flight, limit, evals, pendingEpisodes, maxSlots int) (held, heldMin int, exact bool, err error) {
	held, heldMin = evals*maxSlots, evals
	fits := func() bool { return held+pendingEpisodes+fl.maxEp <= limit }
	all := adm.runningSlotEvals(jobstore.Filter{Tenant: tenant})
	if err := all.Validate(); err != nil {
		return 0, 0, false, err
	}
	if ledger, ok := adm.quotas.ledger(tenant); ok && adm.opts.Now().Sub(ledger.t0) < ledgerMaxAge {
		var newEvals int
		since := all
		since.StartedSince = ledger.t0
		if err := adm.countAll(ctx, map[*int]jobstore.Filter{&newEvals: since}); err != nil {
			return 0, 0, false, err
		}
		if est := ledger.held + newEvals*maxSlots; est < held {
			held = est
		}
		if fits() {
			return held, heldMin, false, nil
		}
	}
	// Sum what the running evals hold, once for every waiter, and keep the sum as the
	// tenant's ledger (without the flight's reservations: the ledger outlives them).
	t0 := adm.opts.Now().Add(-visibilityLag)
	mine := make(map[string]bool, len(fl.rs))
	for _, r := range fl.rs {
		mine[r.id] = true
	}
	sum, total := 0, 0
	err = adm.eachExecution(ctx, all, func(j *jobstore.Job) {
		total += j.Slots
		if !mine[j.ID] {
			sum += j.Slots
		}
	})
	if err != nil {
		return 0, 0, false, err
	}
	adm.quotas.setLedger(tenant, slotLedger{t0: t0, held: total})
	return sum, sum, true, nil
}

// ownerExact returns o as it is when this start's own tenant snapshot t (with the
// reservations admitted before r) confirms the bounds o's flight relied on instead of counting
// — the tenant's unfinished jobs below running_jobs_per_owner, the owner's starts of the minute
// at its last count plus the tenant's since below starts_per_minute_per_owner — and otherwise
// the owner measured afresh for this start (both counted), so each limit holds exactly as
// with the owner's own counts.
func (adm *Admitter) ownerExact(ctx context.Context, pol authz.TenantPolicy, k flightKey, r reservation, t *tenantSnap, o *ownerSnap) (*ownerSnap, error) {
	if o == nil || !o.owner {
		return o, nil
	}
	if ownerBounded(pol.Limits, t, o, r) {
		return o, nil
	}
	return adm.measureOwner(ctx, k, pol, &flight{rs: o.rs}, true)
}

// slotCounts is the first round of heldByCounts: the evals per JobSlots range (slotRanges)
// and those without JobSlots.
type slotCounts struct {
	ranges []slotRange
	legacy int
}

// newSlotCounts adds the first round's counts of evals to counts, answered into the result.
func newSlotCounts(evals jobstore.Filter, maxSlots int, counts map[*int]jobstore.Filter) *slotCounts {
	c := &slotCounts{ranges: slotRanges(maxSlots)}
	unindexed := evals
	unindexed.NoSlots = true
	counts[&c.legacy] = unindexed
	for i := range c.ranges {
		counts[&c.ranges[i].n] = c.ranges[i].filter(evals)
	}
	return c
}

// rangedFor is how long a tenant whose check needed slots by range has them counted in the
// first round of its next checks (measureTenant).
const rangedFor = 30 * time.Second

func (q *quotas) noteRanged(tenant string, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	swept(&q.ranged, 0, func(_ string, a time.Time) bool { return at.Sub(a) > rangedFor })[tenant] = at
}

func (q *quotas) rangedRecently(tenant string, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	a, ok := q.ranged[tenant]
	return ok && now.Sub(a) < rangedFor
}
