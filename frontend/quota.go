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
// reservations: a start admitted here counts against later starts of its tenant until a check
// finds it in visibility (or visibleWait after its start), and the counts leave out every job
// this replica holds a reservation for (WorkflowId NOT IN …), so each is counted exactly once.
// Across replicas the gap stays open: two replicas admitting the same tenant's starts in the same instant may each
// count the other's start as not yet there. The overshoot is therefore at most the starts of
// that tenant in flight on the other replicas (README "Fairness and quotas";
// tests/quota_test.go measures it).

// visibleWait bounds how long a started job's reservation outlives its start: visibility
// shows a job within milliseconds, and a check that finds all of this replica's started jobs
// of the tenant shown releases them sooner.
const visibleWait = 5 * time.Second

// quotaPageSize bounds one visibility page read for a quota.
const quotaPageSize = 1000

// visibilityLag bounds how long visibility may take to show a start: a listing read at t is
// taken to show the evals started before t minus this; those started since are counted apart.
const visibilityLag = 2 * time.Second

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

// slotLedger is what a tenant's running evals held, summed from a listing; t0 is the listing's
// time less visibilityLag, so an eval the listing could not show yet is one started since t0
// (counted apart).
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

// release drops the started reservations of ids: visibility showed their jobs before the
// counts that now include them were asked.
func (q *quotas) release(tenant string, ids map[string]bool) {
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

func (q *quotas) rememberFull(k flightKey, w windowFull, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.full == nil {
		q.full = map[flightKey]windowFull{}
	}
	for key, o := range q.full {
		if !o.until.After(now) {
			delete(q.full, key) // freed: owners that stopped starting leave nothing behind
		}
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

// usageSnap is what one flight measured, shared by every start waiting on it. Its counts
// leave out the jobs of the reservations it started with (rs): each start adds those admitted
// before it, so every job is counted exactly once, visible yet or not.
type usageSnap struct {
	rs    []reservation
	owner bool // the owner is matchable in visibility (else it has no owner counts)
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
// before it.
func (s *usageSnap) decide(pol authz.TenantPolicy, r reservation, episodes int, now time.Time) *authz.QuotaRefusal {
	var pending, pendingMine, pendingEpisodes int
	for _, o := range s.rs {
		if o.seq < r.seq {
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
// (a few milliseconds whatever the tenant holds), one round of them far from every limit. The
// one figure a count cannot give — the episode concurrency of running evals — is bounded by
// counts from both sides (and by the tenant's slot ledger), and read row by row only when
// none of that decides any waiting start, once for all of them.
func (f *Frontend) measure(ctx context.Context, k flightKey, pol authz.TenantPolicy, fl *flight) (*usageSnap, error) {
	l := pol.Limits
	qt, err := quoteQueryString(k.tenant)
	if err != nil {
		return nil, fmt.Errorf("quota: tenant: %w", err)
	}
	// This replica's reservations are counted as such, never in visibility: no race with
	// visibility showing them between two queries.
	excl := ""
	if len(fl.rs) > 0 {
		ids := make([]string, 0, len(fl.rs))
		for _, r := range fl.rs {
			q, err := quoteQueryString(r.id)
			if err != nil {
				return nil, fmt.Errorf("quota: job id: %w", err)
			}
			ids = append(ids, q)
		}
		excl = " AND WorkflowId NOT IN (" + strings.Join(ids, ",") + ")"
	}
	tenant := "JobTenant = " + qt + excl
	// A subject the visibility store cannot match (see ownerMatchable) has no owner counts:
	// its tenant's limits still hold.
	owner := ""
	if qs, err := quoteQueryString(k.owner); err == nil && ownerMatchable(k.owner) {
		owner = tenant + " AND JobOwner = " + qs
	}
	const running = " AND ExecutionStatus = 'Running'"
	evals := tenant + " AND JobKind = '" + workflows.KindEval + "'" + running

	s := &usageSnap{rs: fl.rs, owner: owner != ""}
	var pending, pendingMine, pendingEpisodes int
	for _, o := range fl.rs {
		pending++
		pendingEpisodes += o.episodes
		if o.owner == k.owner {
			pendingMine++
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
	// Started reservations that visibility shows already can go for the next checks (asked
	// along with this check's counts, which leave them out anyway).
	startedIDs, startedQ := map[string]bool{}, []string{}
	for _, r := range fl.rs {
		if !r.expires.IsZero() {
			q, _ := quoteQueryString(r.id)
			startedIDs[r.id] = true
			startedQ = append(startedQ, q)
		}
	}
	var shown int
	if len(startedQ) > 0 {
		counts[&shown] = "WorkflowId IN (" + strings.Join(startedQ, ",") + ") AND ExecutionStatus != 'ContinuedAsNew'"
	}
	if err := f.countAll(ctx, counts); err != nil {
		return nil, err
	}
	if len(startedQ) > 0 && shown >= len(startedIDs) {
		f.quotas.release(k.tenant, startedIDs)
	}
	// The tenant's count bounds the owner's: count it only when that does not fit the limit.
	s.ownerRunning = s.tenantRunning
	ownerCount := owner != "" && l.RunningJobsPerOwner > 0 && s.tenantRunning+pending >= l.RunningJobsPerOwner
	if ownerCount {
		if err := f.countAll(ctx, map[*int]string{&s.ownerRunning: owner + running}); err != nil {
			return nil, err
		}
	}
	if (l.RunningJobsPerTenant > 0 && s.tenantRunning+pending >= l.RunningJobsPerTenant) ||
		(ownerCount && s.ownerRunning+pendingMine >= l.RunningJobsPerOwner) {
		// At a running-jobs limit: count once more before deciding. Visibility trails another
		// replica's start by milliseconds; this gives a start made there just before these
		// counts the time to show.
		counts := map[*int]string{&s.tenantRunning: tenant + running}
		if ownerCount {
			counts[&s.ownerRunning] = owner + running
		}
		if err := f.countAll(ctx, counts); err != nil {
			return nil, err
		}
		if !ownerCount {
			s.ownerRunning = s.tenantRunning
		}
	}
	s.recent = recent
	if lim := l.StartsPerMinutePerOwner; owner != "" && lim > 0 && recent+pendingMine >= lim {
		// The count (which also counts a job continued-as-new in the window) does not fit:
		// count exactly, and bound when the window frees.
		if s.win, err = f.startWindow(ctx, owner, now); err != nil {
			return nil, err
		}
		s.recent = s.win.len()
		if s.recent >= lim {
			// Full without this replica's reservations, and it stays full until its limit-th
			// most recent start turns a minute old: remember that, so the owner's next starts
			// in it are refused without asking.
			f.rememberFullWindow(k, owner, lim, s.win)
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
			t0 := f.opts.Now().Add(-visibilityLag)
			mine := make(map[string]bool, len(fl.rs))
			for _, r := range fl.rs {
				mine[r.id] = true
			}
			held, all := 0, 0
			// Without the exclusion: the ledger outlives this flight's reservations.
			err := f.eachExecution(ctx, "JobTenant = "+qt+" AND JobKind = '"+workflows.KindEval+"'"+running, func(info *workflowpb.WorkflowExecutionInfo) {
				slots, _ := decodeMemo[int](f.opts.DataConverter, info.GetMemo(), workflows.MemoSlots)
				all += slots
				if !mine[info.GetExecution().GetWorkflowId()] {
					held += slots
				}
			})
			if err != nil {
				return nil, err
			}
			s.held, s.heldExact = held, true
			f.quotas.setLedger(k.tenant, slotLedger{t0: t0, held: all})
		}
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

// startWindow is an owner's job creations in the minute before now: their exact number, and
// probes bounding when they happened.
type startWindow struct {
	since, now time.Time
	n          int
	// slack bounds how many more runs than jobs a probe counts: the owner's jobs that
	// continued as new in the window.
	slack  int
	probes []probe // ascending t
}

// probe is a count of the owner's runs started since t (not continued as new): the jobs
// created since t, plus at most slack that continued as new since.
type probe struct {
	t time.Time
	n int
}

// windowProbes is how many probes bound the creation times in a window, in each of two
// rounds (the second within the bracket the first found, in the background): a
// retry_after_ms is late by at most a minute / (windowProbes+1)², about 0.94 s, once the
// second round is in (7.5 s for the starts that waited on the first).
const windowProbes = 7

func (w *startWindow) len() int { return w.n }

// nth bounds the creation time of the n-th most recent start (1-based; n <= len): late, the
// latest it can be (the window frees no earlier than a minute after); else the earliest (the
// window stays full at least until a minute after).
func (w *startWindow) nth(n int, late bool) time.Time {
	if late {
		// Fewer than n runs started since t: the n-th most recent job was created before t.
		for _, p := range w.probes {
			if p.n < n {
				return p.t
			}
		}
		return w.now
	}
	t := w.since
	for _, p := range w.probes {
		if p.n-w.slack >= n {
			t = p.t
		}
	}
	return t
}

// startWindow counts the owner's job creations in the minute before now exactly and brackets
// when they happened — by counts only, one round, never a listing.
func (f *Frontend) startWindow(ctx context.Context, owner string, now time.Time) (*startWindow, error) {
	since := now.Add(-time.Minute)
	w := &startWindow{since: since, now: now}
	var all, continued int
	counts := map[*int]string{&all: owner + createdSinceQuery(since), &continued: owner + continuedSinceQuery(since),
		&w.slack: owner + " AND ExecutionStatus = 'ContinuedAsNew' AND CloseTime >= '" + since.UTC().Format(time.RFC3339Nano) + "'"}
	probes := func(lo, hi time.Time) []probe {
		ps := make([]probe, windowProbes)
		for i := range ps {
			ps[i].t = lo.Add(time.Duration(i+1) * hi.Sub(lo) / (windowProbes + 1))
		}
		for i := range ps {
			counts[&ps[i].n] = owner + createdSinceQuery(ps[i].t)
		}
		return ps
	}
	w.probes = probes(since, now)
	if err := f.countAll(ctx, counts); err != nil {
		return nil, err
	}
	w.n = max(all-continued, 0)
	return w, nil
}

// refined is w with probes within the bracket of its limit-th most recent start (a new
// window: w is shared).
func (f *Frontend) refined(ctx context.Context, owner string, limit int, w *startWindow) (*startWindow, error) {
	lo, hi := w.nth(limit, false), w.nth(limit, true)
	fine := make([]probe, windowProbes)
	counts := map[*int]string{}
	for i := range fine {
		fine[i].t = lo.Add(time.Duration(i+1) * hi.Sub(lo) / (windowProbes + 1))
		counts[&fine[i].n] = owner + createdSinceQuery(fine[i].t)
	}
	if err := f.countAll(ctx, counts); err != nil {
		return nil, err
	}
	r := *w
	r.probes = append(slices.Clone(w.probes), fine...)
	slices.SortFunc(r.probes, func(a, b probe) int { return a.t.Compare(b.t) })
	return &r, nil
}

// rememberFullWindow remembers k's window as full, first with w's bounds and then — in the
// background, so that the starts waiting now are answered at once — with refined ones.
func (f *Frontend) rememberFullWindow(k flightKey, owner string, limit int, w *startWindow) {
	remember := func(w *startWindow) {
		if until := w.nth(limit, false).Add(time.Minute); until.After(w.now) {
			f.quotas.rememberFull(k, windowFull{limit: limit, count: w.n, until: until, freeAt: w.nth(limit, true).Add(time.Minute)}, w.now)
		}
	}
	remember(w)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), f.opts.TemporalTimeout)
		defer cancel()
		if r, err := f.refined(ctx, owner, limit, w); err == nil {
			remember(r)
		}
	}()
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
