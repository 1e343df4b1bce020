// quota_flight.go holds the shared quota checks (flights) and the usage snapshot one flight
// measures in visibility and every start waiting on it decides by.

package frontend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobgate/jobgate/authz"
)

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

// join reserves a start and enlists it in k's next flight; start is true when the caller must
// run that flight (none was running).
func (q *quotas) join(k flightKey, id string, episodes int, now time.Time) (r reservation, fl *flight, start bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r = q.reserveLocked(k.tenant, id, k.owner, episodes, now)
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
	evals := tenant + " AND " + f.slotKindsQuery() + running

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
		s.held, s.heldMin, s.heldExact = evalsRunning*f.maxJobSlots(), evalsRunning, false
		fits := s.held+pendingEpisodes+fl.maxEp <= l.EpisodesInFlightPerTenant
		over := s.heldMin+fl.minEp > l.EpisodesInFlightPerTenant
		if !fits && !over && hasLedger {
			// The last listing's sum, with every eval started since at the largest
			// concurrency (one that finished since still counts: an upper bound).
			if est := ledger.held + newEvals*f.maxJobSlots(); est < s.held {
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
			err := f.eachExecution(ctx, "JobTenant = "+qt+" AND "+f.slotKindsQuery()+running, func(j *job) {
				all += j.slots
				if !mine[j.id] {
					held += j.slots
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
