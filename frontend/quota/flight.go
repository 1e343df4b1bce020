// flight.go holds the shared quota checks (flights) and the usage snapshots they measure
// in visibility (measure.go), by which every start waiting on them is decided.

package quota

import (
	"context"
	"slices"
	"time"

	"github.com/jobgate/jobgate/authz"
)

// flightKey names whose starts share a check: a tenant's (owner "") for the tenant-wide
// measures, or one owner's of one tenant for that owner's measures. A tenant's fifty owners
// share one tenant flight: its counts are asked once per round, not once per owner.
type flightKey struct{ tenant, owner string }

// flight is one shared quota check. Its inputs are fixed when it starts (every start waiting on
// it reserved before that); done closes when res and err are set.
type flight struct {
	done chan struct{}
	// rs are the tenant's reservations when the flight started.
	rs []reservation
	// minEp and maxEp are the smallest and largest episode concurrency its waiters ask for (0: none).
	minEp, maxEp int
	res          any // *tenantSnap or *ownerSnap
	err          error
	// at is when it took off (its counts were asked after it) and seq the last reservation
	// made by then.
	at  time.Time
	seq uint64
	// refresh is true when refreshLocked took it off (no start did).
	refresh bool
	// owners are the owners an owner-groups flight counts (groups.go).
	owners []string
}

// flightSlot is one key's flights: at most one running, and the next one gathering waiters.
type flightSlot struct {
	running bool
	cur     *flight // the running one
	next    *flight
}

// joined is a flight a start waits for; start is true when the start must run it.
type joined struct {
	key   flightKey
	fl    *flight
	start bool
}

// join reserves a start and enlists it in the next flight of its tenant (when tenant) and of
// its owner (when owner).
func (q *quotas) join(tenant, owner, id string, episodes int, now time.Time, needTenant, needOwner bool) (reservation, []joined) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.reserveLocked(tenant, id, owner, episodes, now)
	var js []joined
	if needTenant {
		js = append(js, q.enlistLocked(flightKey{tenant, ""}, episodes, now))
	}
	if needOwner {
		js = append(js, q.enlistLocked(flightKey{tenant, owner}, episodes, now))
	}
	return r, js
}

// enlistLocked adds a waiter to k's next flight, taking it off when none is running.
func (q *quotas) enlistLocked(k flightKey, episodes int, now time.Time) joined {
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
	fl := slot.next
	if episodes > 0 {
		if fl.minEp == 0 || episodes < fl.minEp {
			fl.minEp = episodes
		}
		fl.maxEp = max(fl.maxEp, episodes)
	}
	j := joined{key: k, fl: fl}
	if !slot.running {
		q.takeOffLocked(k, slot, now)
		j.start = true
	}
	return j
}

// takeOffLocked starts slot's next flight: its reservations are fixed now.
func (q *quotas) takeOffLocked(k flightKey, slot *flightSlot, now time.Time) {
	fl := slot.next
	slot.next, slot.running, slot.cur = nil, true, fl
	fl.rs = slices.Clone(q.pending[k.tenant])
	fl.at, fl.seq = now, q.seq
	if k.owner == ownersGroup {
		// Only refreshLocked enlists these; the owners are those active now.
		fl.refresh, fl.owners = true, q.activeOwnersLocked(k.tenant, now, q.ownersKeep)
	}
}

// landed ends k's running flight and returns the next one to run, if any start waits for it.
func (q *quotas) landed(k flightKey, now time.Time) *flight {
	q.mu.Lock()
	defer q.mu.Unlock()
	slot := q.flights[k]
	if slot.next == nil {
		delete(q.flights, k)
		return nil
	}
	fl := slot.next
	q.takeOffLocked(k, slot, now)
	return fl
}

// fly runs flight fl of k and then the flights that gathered behind it, one at a time. A
// flight that answered forgets the tenant's unchecked starts (it counted them) when it is the
// flight that measures the tenant's limits.
func (adm *Admitter) fly(k flightKey, pol authz.TenantPolicy, fl *flight) {
	l := pol.Limits
	tenantLimits := l.RunningJobsPerTenant > 0 || l.EpisodesInFlightPerTenant > 0
	for fl != nil {
		ctx, cancel := context.WithTimeout(context.Background(), adm.opts.TemporalTimeout)
		began, scope := time.Now(), "tenant"
		switch k.owner {
		case "":
			fl.res, fl.err = adm.measureTenant(ctx, k.tenant, pol, fl)
		case ownersGroup:
			scope = "owners"
			fl.res, fl.err = adm.measureOwners(ctx, k, pol, fl)
		default:
			scope = "owner"
			fl.res, fl.err = adm.measureOwner(ctx, k, pol, fl, false)
		}
		cancel()
		if adm.metrics.Checks != nil {
			by := "start"
			if fl.refresh {
				by = "refresh"
			}
			adm.metrics.Checks.WithLabelValues(scope, by).Observe(time.Since(began).Seconds())
		}
		if fl.err == nil && k.owner != ownersGroup && (k.owner == "") == tenantLimits {
			adm.quotas.checked(k.tenant)
		}
		if fl.err == nil && adm.opts.QuotaFresh > 0 {
			adm.quotas.noteRecent(k, fl, adm.keepRecent())
		}
		close(fl.done)
		fl = adm.quotas.landed(k, adm.opts.Now())
	}
}

// tenantSnap is what one tenant flight measured, shared by every start of the tenant waiting
// on it. Its counts leave out the jobs of the reservations it started with (rs): each start
// adds those admitted before it, so every job is counted exactly once, visible yet or not.
type tenantSnap struct {
	rs []reservation
	// running counts the tenant's unfinished jobs.
	running int
	// held is the episode concurrency the tenant's running evals hold; heldMin a lower bound
	// used when held was not needed exactly (heldExact false: held is an upper bound).
	held, heldMin int
	heldExact     bool
	// heldMeasured is true when held was measured (a waiter asked for episodes).
	heldMeasured bool
	// recent counts the tenant's runs started in the minute before the flight when
	// recentCounted (only while Options.QuotaFresh is on): it bounds every owner's starts of
	// the minute, so a start far from that limit needs no figures of its owner (admitFast).
	recent        int
	recentCounted bool
	// sinceEpoch counts the tenant's starts since epoch (less visibilityLag): with an owner's
	// count made in that epoch, it bounds the owner's starts of the minute.
	sinceEpoch int
	epoch      time.Time
}

// ownerSnap is what one owner flight measured (rs as tenantSnap's).
type ownerSnap struct {
	rs    []reservation
	owner bool // the owner is matchable in visibility (else it has no owner counts)
	// running counts the owner's unfinished jobs when runningCounted; else the tenant's count
	// bounds them (decide).
	running        int
	runningCounted bool
	// recent counts the owner's job creations in the last minute when recentCounted (an upper
	// bound unless win is set; then exact); else base, with the tenant's starts since its
	// epoch, bounds them (decide).
	recent        int
	recentCounted bool
	base          *ownerBase
	win           *startWindow
}

// pendingBefore sums the reservations of rs admitted before r: all of them, their episodes,
// and those of r's owner.
func pendingBefore(rs []reservation, r reservation) (all, episodes, mine int) {
	for _, o := range rs {
		if o.seq < r.seq {
			all++
			episodes += o.episodes
			if o.owner == r.owner {
				mine++
			}
		}
	}
	return all, episodes, mine
}

// decide is CheckQuota for reservation r with the snapshots its flights measured (nil: that
// flight was not needed), adding the reservations admitted before it.
func decide(pol authz.TenantPolicy, r reservation, episodes int, now time.Time, t *tenantSnap, o *ownerSnap) *authz.QuotaRefusal {
	var u authz.Usage
	if t != nil {
		pending, pendingEpisodes, _ := pendingBefore(t.rs, r)
		u.TenantRunning = t.running + pending
		u.TenantEpisodes = t.held + pendingEpisodes
		if !t.heldExact && t.heldMin+pendingEpisodes+episodes > pol.Limits.EpisodesInFlightPerTenant {
			// Over the limit whatever the running evals hold exactly.
			u.TenantEpisodes = t.heldMin + pendingEpisodes
		}
	}
	if o != nil {
		_, _, pendingMine := pendingBefore(o.rs, r)
		u.OwnerStartsLastMinute = o.recent + pendingMine
		if !o.recentCounted && t != nil && !baseBounds(t, o) && t.recentCounted {
			// Neither counted nor based: the tenant's starts of the minute bound the owner's
			// (admitFast, on the tenant's recent figures).
			pending, _, _ := pendingBefore(t.rs, r)
			u.OwnerStartsLastMinute = t.recent + pending
		}
		if !o.recentCounted && t != nil && baseBounds(t, o) {
			// Not counted: the owner's last count plus the tenant's starts since its epoch bound
			// them (admit counted the owner's had this bound not kept them under: ownerExact).
			pending, _, _ := pendingBefore(t.rs, r)
			u.OwnerStartsLastMinute = o.base.c + t.sinceEpoch + pending
		}
		u.OwnerRunning = pendingMine
		switch {
		case o.owner && o.runningCounted:
			u.OwnerRunning += o.running
		case o.owner && t != nil:
			// Not counted: the tenant's unfinished jobs bound the owner's (admit counted the
			// owner's had this bound not kept them under the limit: ownerRunningExact).
			pending, _, _ := pendingBefore(t.rs, r)
			u.OwnerRunning = t.running + pending
		}
		if l := pol.Limits.StartsPerMinutePerOwner; o.win != nil && l > 0 && u.OwnerStartsLastMinute >= l && l-pendingMine >= 1 {
			// The window frees a start when its (limit - pending)-th most recent one turns a minute old.
			u.OldestStart = o.win.nth(l-pendingMine, true)
		}
	}
	return authz.CheckQuota(pol, u, episodes, now)
}
