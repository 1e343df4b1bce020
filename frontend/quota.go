package frontend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/jobgate/jobgate/activities"
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
// reservations: a start admitted here counts against later starts of its tenant until a later
// check finds it in visibility (or visibleWait after its start passes). Across replicas the gap
// stays open: two replicas admitting the same tenant's starts in the same instant may each count
// the other's start as not yet there. The overshoot is therefore at most the starts of that
// tenant in flight on the other replicas (README "Fairness and quotas"; tests/quota_test.go
// measures it).

// visibleWait bounds how long a started job's reservation outlives its start: visibility
// shows a job within milliseconds, and a later check that finds it releases it sooner.
const visibleWait = 5 * time.Second

// quotaPageSize bounds one visibility page read for a quota.
const quotaPageSize = 1000

// startLogLag is how far before it is read a start log stops: starts that recent may not be
// visible yet, so they are counted later instead of missed.
const startLogLag = 2 * time.Second

// ledgerMaxAge bounds how long a slot ledger bounds the running evals' slots (with the evals
// started since counted at the largest concurrency): past it, or when that bound does not
// fit, the running evals are listed again.
const ledgerMaxAge = 30 * time.Second

type reservation struct {
	seq      uint64
	id       string // the job's workflow ID
	owner    string
	episodes int
	// expires is zero while the start is in flight; once started, visibleWait after it.
	expires time.Time
}

// flightKey names whose starts share a check: one owner of one tenant.
type flightKey struct{ tenant, owner string }

// flight is one shared quota check. Its inputs are fixed when it starts (every start waiting on
// it reserved before that); done closes when res and err are set.
type flight struct {
	done chan struct{}
	// rs are the tenant's reservations when the flight started.
	rs []reservation
	// minEp and maxEp are the smallest and largest episode concurrency its waiters ask for (0: none).
	minEp, maxEp int
	res          *usageSnap
	err          error
}

// flightSlot is one key's flights: at most one running, and the next one gathering waiters.
type flightSlot struct {
	running bool
	next    *flight
}

// windowFull remembers that an owner's starts window holds at least limit visible starts until
// until (a start never leaves the window early); freeAt is when a retry can pass.
type windowFull struct {
	limit         int
	until, freeAt time.Time
	count         int
}

// startLog is an owner's job creations before t0 (creation times, newest first), read once
// from visibility; creations since t0 are counted. Immutable once built.
type startLog struct {
	t0    time.Time
	times []time.Time
}

// quotas is the replica-local admission state: reservations, shared check flights, full
// start windows and start logs; the counts themselves come from visibility.
type quotas struct {
	mu      sync.Mutex
	seq     uint64
	pending map[string][]reservation // by tenant, in admission order
	flights map[flightKey]*flightSlot
	full    map[flightKey]windowFull
	logs    map[flightKey]*startLog
	reading map[flightKey]bool // start logs being read
	ledgers map[string]slotLedger
}

// slotLedger is what a tenant's running evals held (summed from a listing) as of t0: every
// eval running then that visibility may not have shown the listing started after t0.
type slotLedger struct {
	t0   time.Time
	held int
}

func (q *quotas) ledger(tenant string) (slotLedger, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l, ok := q.ledgers[tenant]
	return l, ok
}

func (q *quotas) setLedger(tenant string, l slotLedger) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ledgers == nil {
		q.ledgers = map[string]slotLedger{}
	}
	for t, o := range q.ledgers {
		if o.t0.Before(l.t0.Add(-ledgerMaxAge)) {
			delete(q.ledgers, t)
		}
	}
	q.ledgers[tenant] = l
}

// startReading claims the read of k's start log; false when one is under way.
func (q *quotas) startReading(k flightKey) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.reading[k] {
		return false
	}
	if q.reading == nil {
		q.reading = map[flightKey]bool{}
	}
	q.reading[k] = true
	return true
}

func (q *quotas) doneReading(k flightKey) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.reading, k)
}

func (q *quotas) startLog(k flightKey) *startLog {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.logs[k]
}

func (q *quotas) setStartLog(k flightKey, l *startLog, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.logs == nil {
		q.logs = map[flightKey]*startLog{}
	}
	// Logs of owners that stopped starting go (bounds the map by the owners of the last minutes).
	for key, o := range q.logs {
		if o.t0.Before(now.Add(-2 * time.Minute)) {
			delete(q.logs, key)
		}
	}
	q.logs[k] = l
}

// reserve records a start about to be checked and returns it with the reservations of the
// tenant admitted before it that visibility may not show yet (expired ones are dropped).
func (q *quotas) reserve(tenant, id, owner string, episodes int, now time.Time) (reservation, []reservation) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.reserveLocked(tenant, id, owner, episodes, now)
}

func (q *quotas) reserveLocked(tenant, id, owner string, episodes int, now time.Time) (reservation, []reservation) {
	if q.pending == nil {
		q.pending = map[string][]reservation{}
	}
	live := q.pending[tenant][:0]
	for _, r := range q.pending[tenant] {
		if r.expires.IsZero() || now.Before(r.expires) {
			live = append(live, r)
		}
	}
	q.seq++
	r := reservation{seq: q.seq, id: id, owner: owner, episodes: episodes}
	ahead := append([]reservation(nil), live...)
	q.pending[tenant] = append(live, r)
	return r, ahead
}

// update applies fn to each of the tenant's reservations; fn returns false to drop one.
func (q *quotas) update(tenant string, fn func(*reservation) bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	rs := q.pending[tenant][:0]
	for _, r := range q.pending[tenant] {
		if fn(&r) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		delete(q.pending, tenant)
	} else {
		q.pending[tenant] = rs
	}
}

// visible drops the reservations of jobs visibility has been seen to show.
func (q *quotas) visible(tenant string, ids map[string]bool) {
	q.update(tenant, func(r *reservation) bool { return !(ids[r.id] && !r.expires.IsZero()) })
}

// windowRefusal returns the remembered full window of k, if it is still full at now.
func (q *quotas) windowRefusal(k flightKey, limit int, now time.Time) (windowFull, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.full[k]
	if ok && !now.Before(w.until) {
		delete(q.full, k)
		ok = false
	}
	return w, ok && w.limit == limit
}

func (q *quotas) rememberFull(k flightKey, w windowFull) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.full == nil {
		q.full = map[flightKey]windowFull{}
	}
	q.full[k] = w
}

// join reserves a start and enlists it in k's next flight; start is true when the caller must
// run that flight (none was running).
func (q *quotas) join(k flightKey, id string, episodes int, now time.Time) (r reservation, fl *flight, start bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r, _ = q.reserveLocked(k.tenant, id, k.owner, episodes, now)
	if q.flights == nil {
		q.flights = map[flightKey]*flightSlot{}
	}
	slot := q.flights[k]
	if slot == nil {
		slot = &flightSlot{}
		q.flights[k] = slot
	}
	if slot.next == nil {
		slot.next = &flight{done: make(chan struct{})}
	}
	fl = slot.next
	if episodes > 0 {
		if fl.minEp == 0 || episodes < fl.minEp {
			fl.minEp = episodes
		}
		fl.maxEp = max(fl.maxEp, episodes)
	}
	if !slot.running {
		q.takeOffLocked(k, slot)
		start = true
	}
	return r, fl, start
}

// takeOffLocked starts slot's next flight: its reservations are fixed now.
func (q *quotas) takeOffLocked(k flightKey, slot *flightSlot) {
	fl := slot.next
	slot.next, slot.running = nil, true
	fl.rs = slices.Clone(q.pending[k.tenant])
}

// landed ends k's running flight and returns the next one to run, if any start waits for it.
func (q *quotas) landed(k flightKey) *flight {
	q.mu.Lock()
	defer q.mu.Unlock()
	slot := q.flights[k]
	if slot.next == nil {
		delete(q.flights, k)
		return nil
	}
	fl := slot.next
	q.takeOffLocked(k, slot)
	return fl
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

// started keeps the reservation until a later check finds the job in visibility, or
// visibleWait passes.
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

// windowRefusal is the starts_per_minute_per_owner refusal for a window remembered as full.
func windowRefusal(limit, count int, freeAt, now time.Time) *authz.QuotaRefusal {
	return authz.CheckQuota(authz.TenantPolicy{Limits: authz.Limits{StartsPerMinutePerOwner: limit}},
		authz.Usage{OwnerStartsLastMinute: count, OldestStart: freeAt.Add(-time.Minute)}, 0, now)
}

// fly runs flight fl of k and then the flights that gathered behind it, one at a time.
func (f *Frontend) fly(k flightKey, pol authz.TenantPolicy, fl *flight) {
	for fl != nil {
		ctx, cancel := context.WithTimeout(context.Background(), f.opts.TemporalTimeout)
		fl.res, fl.err = f.measure(ctx, k, pol, fl)
		cancel()
		close(fl.done)
		fl = f.quotas.landed(k)
	}
}

// usageSnap is what one flight measured, shared by every start waiting on it.
type usageSnap struct {
	// rs are the reservations the flight started with; visible the ones visibility showed.
	rs      []reservation
	visible map[string]bool
	owner   bool // the owner is matchable in visibility (else it has no owner counts)
	// tenantRunning and ownerRunning count unfinished jobs (ownerRunning is the tenant's count
	// when that already fits the owner's limit).
	tenantRunning, ownerRunning int
	// recent counts the owner's job creations in the last minute (an upper bound unless win
	// is set; then exact).
	recent int
	win    *startWindow
	// held is the episode concurrency the tenant's running evals hold; heldMin a lower bound
	// used when held was not needed exactly (heldExact false: held is an upper bound).
	held, heldMin int
	heldExact     bool
}

// decide is CheckQuota for reservation r with the snapshot, adding the reservations admitted
// before r that the snapshot does not show.
func (s *usageSnap) decide(pol authz.TenantPolicy, r reservation, episodes int, now time.Time) *authz.QuotaRefusal {
	var pending, pendingMine, pendingEpisodes int
	for _, o := range s.rs {
		if o.seq < r.seq && !s.visible[o.id] {
			pending++
			pendingEpisodes += o.episodes
			if o.owner == r.owner {
				pendingMine++
			}
		}
	}
	u := authz.Usage{TenantRunning: s.tenantRunning + pending, OwnerStartsLastMinute: s.recent + pendingMine}
	if s.owner {
		u.OwnerRunning = s.ownerRunning + pendingMine
	} else {
		u.OwnerRunning = pendingMine
	}
	if l := pol.Limits.StartsPerMinutePerOwner; s.win != nil && l > 0 && u.OwnerStartsLastMinute >= l && l-pendingMine >= 1 {
		// The window frees a start when its (limit - pending)-th most recent one turns a minute old.
		u.OldestStart = s.win.nth(l-pendingMine, true)
	}
	u.TenantEpisodes = s.held + pendingEpisodes
	if !s.heldExact && s.heldMin+pendingEpisodes+episodes > pol.Limits.EpisodesInFlightPerTenant {
		// Over the limit whatever the running evals hold exactly.
		u.TenantEpisodes = s.heldMin + pendingEpisodes
	}
	return authz.CheckQuota(pol, u, episodes, now)
}

// measure takes one snapshot for the starts waiting on fl. Counts are visibility COUNT queries
// (a few milliseconds whatever the tenant holds). The one figure a count cannot give — the
// episode concurrency of running evals — is bounded by counts from both sides and read row by
// row only when neither bound decides any waiting start, once for all of them.
func (f *Frontend) measure(ctx context.Context, k flightKey, pol authz.TenantPolicy, fl *flight) (*usageSnap, error) {
	started := false
	for _, r := range fl.rs {
		started = started || !r.expires.IsZero()
	}
	if started {
		// This replica's started jobs may be in the counts already. First count as if none
		// were: far from every limit that decides, in one round of counts.
		if s, err := f.measureWith(ctx, k, pol, fl, true); s != nil || err != nil {
			return s, err
		}
	}
	return f.measureWith(ctx, k, pol, fl, false)
}

// measureWith is measure. quick counts every reservation as not yet visible and returns nil
// (for an exact measure) when that does not fit some limit, before any further query.
func (f *Frontend) measureWith(ctx context.Context, k flightKey, pol authz.TenantPolicy, fl *flight, quick bool) (*usageSnap, error) {
	l := pol.Limits
	qt, err := quoteQueryString(k.tenant)
	if err != nil {
		return nil, fmt.Errorf("quota: tenant: %w", err)
	}
	tenant := "JobTenant = " + qt
	// A subject the visibility store cannot match (see ownerMatchable) has no owner counts:
	// its tenant's limits still hold.
	owner := ""
	if qs, err := quoteQueryString(k.owner); err == nil && ownerMatchable(k.owner) {
		owner = tenant + " AND JobOwner = " + qs
	}
	const running = " AND ExecutionStatus = 'Running'"
	evals := tenant + " AND JobKind = '" + workflows.KindEval + "'" + running

	s := &usageSnap{rs: fl.rs, owner: owner != ""}
	// Reservations that visibility shows already are in the counts below; asked first, so one
	// that appears meanwhile is counted twice (a refusal to retry), never not at all.
	if !quick {
		if s.visible, err = f.visibleOf(ctx, k.tenant, fl.rs); err != nil {
			return nil, err
		}
	}
	var pending, pendingMine, pendingEpisodes int
	for _, o := range fl.rs {
		if !s.visible[o.id] {
			pending++
			pendingEpisodes += o.episodes
			if o.owner == k.owner {
				pendingMine++
			}
		}
	}
	now := f.opts.Now()
	var recent, evalsRunning int
	counts := map[*int]string{&s.tenantRunning: tenant + running}
	if owner != "" && l.StartsPerMinutePerOwner > 0 {
		counts[&recent] = owner + createdSinceQuery(now.Add(-time.Minute))
	}
	episodes := l.EpisodesInFlightPerTenant > 0 && fl.maxEp > 0
	var newEvals int
	ledger, hasLedger := f.quotas.ledger(k.tenant)
	hasLedger = hasLedger && now.Sub(ledger.t0) < ledgerMaxAge
	if episodes {
		counts[&evalsRunning] = evals
		if hasLedger {
			counts[&newEvals] = evals + " AND StartTime >= '" + ledger.t0.UTC().Format(time.RFC3339Nano) + "'"
		}
	}
	if err := f.countAll(ctx, counts); err != nil {
		return nil, err
	}
	if quick {
		mx := f.maxEvalSlots()
		held := evalsRunning * mx
		if hasLedger {
			held = min(held, ledger.held+newEvals*mx)
		}
		if (l.RunningJobsPerTenant > 0 && s.tenantRunning+pending >= l.RunningJobsPerTenant) ||
			(owner != "" && l.RunningJobsPerOwner > 0 && s.tenantRunning+pending >= l.RunningJobsPerOwner) ||
			(owner != "" && l.StartsPerMinutePerOwner > 0 && recent+pendingMine >= l.StartsPerMinutePerOwner) ||
			(episodes && held+pendingEpisodes+fl.maxEp > l.EpisodesInFlightPerTenant) {
			return nil, nil
		}
		s.ownerRunning, s.recent = s.tenantRunning, recent
		s.held, s.heldMin = held, evalsRunning
		return s, nil
	}
	// The tenant's count bounds the owner's: count it only when that does not fit the limit.
	s.ownerRunning = s.tenantRunning
	counts = map[*int]string{}
	if owner != "" && l.RunningJobsPerOwner > 0 && s.tenantRunning+pending >= l.RunningJobsPerOwner {
		counts[&s.ownerRunning] = owner + running
	}
	if err := f.countAll(ctx, counts); err != nil {
		return nil, err
	}
	s.recent = recent
	if lim := l.StartsPerMinutePerOwner; owner != "" && lim > 0 && recent+pendingMine >= lim {
		// The count (which also counts a job continued-as-new in the window) does not fit:
		// count exactly, from the owner's start log.
		if s.win, err = f.startWindow(ctx, k, owner, lim, now); err != nil {
			return nil, err
		}
		s.recent = s.win.len()
		if s.recent >= lim && s.win.probes == nil {
			// Full with visible starts alone, and it stays full until its limit-th most
			// recent start turns a minute old: remember that, so the owner's next starts in
			// it are refused without asking.
			f.quotas.rememberFull(k, windowFull{limit: lim, count: s.recent,
				until: s.win.nth(lim, false).Add(time.Minute), freeAt: s.win.nth(lim, true).Add(time.Minute)})
		}
	}
	if episodes {
		s.held, s.heldMin, s.heldExact = evalsRunning*f.maxEvalSlots(), evalsRunning, false
		fits := s.held+pendingEpisodes+fl.maxEp <= l.EpisodesInFlightPerTenant
		over := s.heldMin+fl.minEp > l.EpisodesInFlightPerTenant
		if !fits && !over && hasLedger {
			// The last listing's sum, with every eval started since at the largest
			// concurrency (one that finished since still counts: an upper bound).
			if est := ledger.held + newEvals*f.maxEvalSlots(); est < s.held {
				s.held = est
				fits = s.held+pendingEpisodes+fl.maxEp <= l.EpisodesInFlightPerTenant
			}
		}
		if !fits && !over {
			// Neither bound decides: sum what the running evals hold, once for every waiter,
			// and keep the sum as the tenant's ledger.
			t0 := f.opts.Now().Add(-startLogLag)
			held := 0
			err := f.eachExecution(ctx, evals, func(info *workflowpb.WorkflowExecutionInfo) {
				slots, _ := decodeMemo[int](f.opts.DataConverter, info.GetMemo(), workflows.MemoSlots)
				held += slots
			})
			if err != nil {
				return nil, err
			}
			s.held, s.heldExact = held, true
			f.quotas.setLedger(k.tenant, slotLedger{t0: t0, held: held})
		}
	}
	if lim := l.StartsPerMinutePerOwner; owner != "" && lim > 0 && 4*(recent+pendingMine) >= 3*lim {
		// Three quarters of the way: have the start log read before the limit is reached
		// (after this check's own queries, see startWindow).
		f.keepStartLog(k, owner, now)
	}
	return s, nil
}

// createdSinceQuery counts runs started since t that did not continue as new: every job
// created since t once, plus once each job created before t that continued as new since.
func createdSinceQuery(t time.Time) string {
	return " AND StartTime >= '" + t.UTC().Format(time.RFC3339Nano) + "' AND ExecutionStatus != 'ContinuedAsNew'"
}

// continuedSinceQuery counts what createdSinceQuery counts too much: each job created before t
// and continued as new since has exactly one run that started before t and closed (continued)
// after it.
func continuedSinceQuery(t time.Time) string {
	ts := t.UTC().Format(time.RFC3339Nano)
	return " AND ExecutionStatus = 'ContinuedAsNew' AND StartTime < '" + ts + "' AND CloseTime >= '" + ts + "'"
}

// createdSince counts the owner's jobs created at or after t, by two counts. A job that
// continues as new between the two may be missed by this one count.
func (f *Frontend) createdSince(ctx context.Context, owner string, t time.Time) (int, error) {
	var all, continued int
	if err := f.countAll(ctx, map[*int]string{&all: owner + createdSinceQuery(t), &continued: owner + continuedSinceQuery(t)}); err != nil {
		return 0, err
	}
	return max(all-continued, 0), nil
}

// startWindow is an owner's job creations in the minute before now: the start log's times
// (exact) and a count of creations since the log's t0 (times unknown, between t0 and now).
// Without a log, all are counted (since is all of them, t0 a minute before now) and probes
// bound when they happened.
type startWindow struct {
	t0, now time.Time
	since   int
	times   []time.Time // newest first, all within the minute
	probes  []probe     // without a log: runs started since each probe's t, ascending t
}

// probe is a count of the owner's runs started since t (continued-as-new ones too: at least
// the jobs created since t).
type probe struct {
	t time.Time
	n int
}

// windowProbes is how many probes bound the creation times of a window counted without a log:
// a retry_after_ms is then late by at most a minute divided by this plus one.
const windowProbes = 5

func (w *startWindow) len() int { return w.since + len(w.times) }

// nth is the creation time of the n-th most recent start (1-based; n <= len). For a start
// counted since t0, late says which end of its span to take: the latest it can be (the window
// frees no earlier than that) or t0 (the window stays full at least that long).
func (w *startWindow) nth(n int, late bool) time.Time {
	if n <= w.since {
		if !late {
			return w.t0
		}
		// Fewer than n runs started since a probe's t: the n-th most recent job was created
		// before it.
		for _, p := range w.probes {
			if p.n < n {
				return p.t
			}
		}
		return w.now
	}
	return w.times[n-w.since-1]
}

// startWindow counts the owner's job creations in the minute before now exactly, from the
// owner's start log plus a count of creations since the log; without a usable log (it is then
// read in the background), from counts alone, its times bounded by probes.
func (f *Frontend) startWindow(ctx context.Context, k flightKey, owner string, limit int, now time.Time) (*startWindow, error) {
	since := now.Add(-time.Minute)
	if lg := f.quotas.startLog(k); lg != nil && !lg.t0.Before(since) {
		n, err := f.createdSince(ctx, owner, lg.t0)
		if err != nil {
			return nil, err
		}
		if n < limit {
			w := &startWindow{t0: lg.t0, now: now, since: n}
			for _, c := range lg.times {
				if c.Before(since) {
					break
				}
				w.times = append(w.times, c)
			}
			return w, nil
		}
		// More than a window's worth since the log: their times matter.
	}
	w := &startWindow{t0: since, now: now, probes: make([]probe, windowProbes)}
	var all, continued int
	counts := map[*int]string{&all: owner + createdSinceQuery(since), &continued: owner + continuedSinceQuery(since)}
	for i := range w.probes {
		w.probes[i].t = since.Add(time.Duration(i+1) * time.Minute / (windowProbes + 1))
		counts[&w.probes[i].n] = owner + createdSinceQuery(w.probes[i].t)
	}
	if err := f.countAll(ctx, counts); err != nil {
		return nil, err
	}
	w.since = max(all-continued, 0)
	// After the counts: on a single-connection store (the dev server's SQLite) a listing
	// delays every other query while it runs.
	f.readStartLogAsync(k, owner)
	return w, nil
}

// keepStartLog has k's start log read in the background when it is missing or half a minute
// old, so that a window at its limit is counted from a log rather than from probes.
func (f *Frontend) keepStartLog(k flightKey, owner string, now time.Time) {
	if lg := f.quotas.startLog(k); lg == nil || lg.t0.Before(now.Add(-30*time.Second)) {
		f.readStartLogAsync(k, owner)
	}
}

// readStartLogAsync reads k's start log in the background, once at a time; waiting starts do
// not wait for it.
func (f *Frontend) readStartLogAsync(k flightKey, owner string) {
	if !f.quotas.startReading(k) {
		return
	}
	go func() {
		defer f.quotas.doneReading(k)
		ctx, cancel := context.WithTimeout(context.Background(), f.opts.TemporalTimeout)
		defer cancel()
		now := f.opts.Now()
		if lg, err := f.readStartLog(ctx, owner, now); err == nil {
			f.quotas.setStartLog(k, lg, now)
		}
	}()
}

// readStartLog lists the owner's runs started in the minute before now and keeps the creation
// times (memo created_at, which survives continue-as-new) of jobs created in it up to
// startLogLag ago.
func (f *Frontend) readStartLog(ctx context.Context, owner string, now time.Time) (*startLog, error) {
	since := now.Add(-time.Minute)
	lg := &startLog{t0: now.Add(-startLogLag)}
	err := f.eachExecution(ctx, owner+createdSinceQuery(since), func(info *workflowpb.WorkflowExecutionInfo) {
		if c, ok := decodeMemo[time.Time](f.opts.DataConverter, info.GetMemo(), workflows.MemoCreatedAt); ok && !c.Before(since) && c.Before(lg.t0) {
			lg.times = append(lg.times, c)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(lg.times, func(a, b time.Time) int { return b.Compare(a) })
	return lg, nil
}

// maxEvalSlots bounds the episode concurrency one eval holds: the largest concurrency any suite allows.
func (f *Frontend) maxEvalSlots() int {
	return int(f.suiteMax(func(s activities.Suite) int { return s.MaxConcurrency }))
}

// countAll runs the visibility counts in parallel, each into its int.
func (f *Frontend) countAll(ctx context.Context, counts map[*int]string) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(counts))
	for into, q := range counts {
		wg.Go(func() {
			resp, err := f.opts.Temporal.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: f.opts.Namespace, Query: q})
			if err != nil {
				errs <- fmt.Errorf("quota count: %w", err)
				return
			}
			*into = int(resp.GetCount())
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// visibleOf returns which of rs visibility shows, and releases the started ones it shows.
func (f *Frontend) visibleOf(ctx context.Context, tenant string, rs []reservation) (map[string]bool, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(rs))
	for _, r := range rs {
		q, err := quoteQueryString(r.id)
		if err != nil {
			return nil, fmt.Errorf("quota: job id: %w", err)
		}
		ids = append(ids, q)
	}
	q := "WorkflowId IN (" + strings.Join(ids, ",") + ") AND ExecutionStatus != 'ContinuedAsNew'"
	var visible int
	if err := f.countAll(ctx, map[*int]string{&visible: q}); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(rs))
	if visible >= len(rs) {
		// The common case: all there (a count is cheaper than a listing).
		for _, r := range rs {
			seen[r.id] = true
		}
	} else if visible > 0 {
		// At most len(rs) rows: the starts of this replica in flight, not the tenant's jobs.
		err := f.eachExecution(ctx, q, func(info *workflowpb.WorkflowExecutionInfo) {
			seen[info.GetExecution().GetWorkflowId()] = true
		})
		if err != nil {
			return nil, err
		}
	}
	f.quotas.visible(tenant, seen)
	return seen, nil
}

// eachExecution pages through visibility for q, calling fn per execution.
func (f *Frontend) eachExecution(ctx context.Context, q string, fn func(*workflowpb.WorkflowExecutionInfo)) error {
	var token []byte
	for {
		resp, err := f.opts.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: f.opts.Namespace, PageSize: quotaPageSize, NextPageToken: token, Query: q})
		if err != nil {
			return fmt.Errorf("quota list: %w", err)
		}
		for _, info := range resp.GetExecutions() {
			fn(info)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

// fairness is tenant's dispatch key and configured weight.
func (f *Frontend) fairness(tenant string) workflows.Fairness {
	return workflows.Fairness{Key: tenant, Weight: float32(f.opts.Tenants.For(tenant).FairnessWeight)}
}
