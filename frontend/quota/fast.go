// fast.go decides a start on the figures of its tenant's and owner's last checks, without
// waiting for a new one, while those figures are younger than Options.QuotaFresh and leave
// every limit a margin of headroom (farLimits). Near a limit, or on older figures, the start
// waits for a check made after it arrived, as before (quota.go).
//
// What this changes across replicas: a start another replica admitted after the figures were
// taken is not in them. Within one replica nothing is missed (the reservations since the
// check are added). So a start decided here can overshoot a limit only when the other
// replicas admitted more than the margin of that tenant's (or owner's) starts within the
// figures' age, and by at most that excess; at and near the limit every start is decided by
// a check made after it arrived, exactly as before.

package quota

import (
	"math"
	"slices"
	"time"

	"github.com/jobgate/jobgate/authz"
)

// FreshDefault is the frontend's default Options.QuotaFresh.
const FreshDefault = time.Second

// fastMarginStarts and fastMarginShare are the headroom a start decided on recent figures
// leaves under each limit: the larger of fastMarginStarts starts and fastMarginShare of the
// limit (for episode slots, fastMarginStarts starts of the largest slot count a job holds).
const (
	fastMarginStarts = 16
	fastMarginShare  = 10 // percent
)

// ownerFreshFactor is how many times QuotaFresh an owner's figures stay fresh: they move
// only with that owner's own starts on the other replicas, a small share of its tenant's
// (whose figures every start of the tenant refreshes).
const ownerFreshFactor = 5

// recentCheck is the last check of a key that answered: what it measured, when it took off
// (its counts were asked after that) and the last reservation made by then (every later one
// is in no count of it).
type recentCheck struct {
	res any // *tenantSnap or *ownerSnap
	at  time.Time
	seq uint64
	// used is when a start last used an owner's figures (activeOwnersLocked).
	used time.Time
	// rate is a tenant's starts per second on every replica, as its last two checks saw them
	// (at least its average over the last minute).
	rate float64
}

// noteRecent keeps fl's figures as k's most recent (an owner-groups flight's as each of its
// owners'), dropping others older than keep.
func (q *quotas) noteRecent(k flightKey, fl *flight, keep time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	swept(&q.recent, 256, func(_ flightKey, c recentCheck) bool { return fl.at.Sub(c.at) > keep })
	if g, ok := fl.res.(*ownersSnap); ok {
		for o, s := range g.owners {
			q.noteRecentLocked(flightKey{k.tenant, o}, recentCheck{res: s, at: fl.at, seq: fl.seq})
		}
		return
	}
	q.noteRecentLocked(k, recentCheck{res: fl.res, at: fl.at, seq: fl.seq})
}

// noteRecentLocked keeps c as k's most recent figures unless a later check's are (q.mu held).
func (q *quotas) noteRecentLocked(k flightKey, c recentCheck) {
	if cur, ok := q.recent[k]; ok {
		if cur.seq > c.seq {
			return // a later check already answered
		}
		c.used = cur.used
	}
	if c.used.IsZero() {
		c.used = c.at // a start waited for these figures
	}
	if t, ok := c.res.(*tenantSnap); ok {
		if t.recentCounted {
			c.rate = float64(t.recent+len(t.rs)) / time.Minute.Seconds()
		}
		if prev, ok := q.recent[k]; ok && c.at.Sub(prev.at) > 0 {
			if p := prev.res.(*tenantSnap); p.epoch.Equal(t.epoch) {
				d := (t.sinceEpoch + len(t.rs)) - (p.sinceEpoch + len(p.rs))
				c.rate = max(c.rate, float64(d)/c.at.Sub(prev.at).Seconds())
			}
		}
	}
	q.recent[k] = c
}

// keepRecent is how long a key's recent figures can still serve (an owner's, the longest).
func (adm *Admitter) keepRecent() time.Duration { return ownerFreshFactor * adm.opts.QuotaFresh }

// farLimits is l with each limit lowered by the margin a start decided on recent figures must
// leave under it; ok is false when a limit is too small to leave it (every start of such a
// tenant waits for its check). The tenant's limits leave extra starts more (of slots each
// for episode slots): the starts the tenant's rate may have brought since its figures.
func (adm *Admitter) farLimits(l authz.Limits, extra, slots int) (far authz.Limits, ok bool) {
	ok = true
	lower := func(v, margin int) int {
		if v <= 0 {
			return v // no limit
		}
		if v-margin < 1 {
			ok = false
		}
		return v - margin
	}
	margin := func(v int) int { return max(fastMarginStarts, v*fastMarginShare/100) }
	far = authz.Limits{
		RunningJobsPerOwner:       lower(l.RunningJobsPerOwner, margin(l.RunningJobsPerOwner)),
		RunningJobsPerTenant:      lower(l.RunningJobsPerTenant, margin(l.RunningJobsPerTenant)+extra),
		EpisodesInFlightPerTenant: lower(l.EpisodesInFlightPerTenant, max(fastMarginStarts*adm.MaxJobSlots(), l.EpisodesInFlightPerTenant*fastMarginShare/100)+extra*slots),
		StartsPerMinutePerOwner:   lower(l.StartsPerMinutePerOwner, margin(l.StartsPerMinutePerOwner)),
	}
	return far, ok
}

// withLater is the reservations a recent check left out of its counts (rs) and those made
// after it took off (seq above c.seq): every one of the tenant's starts on this replica that
// no count of c can hold.
func withLater(rs, pending []reservation, seq uint64) []reservation {
	out := slices.Clone(rs)
	for _, r := range pending {
		if r.seq > seq {
			out = append(out, r)
		}
	}
	return out
}

// admitFast admits a start on its keys' recent figures when they are fresh and keep it far
// from every limit; ok false leaves the decision to a new check, or first to inAir, when the
// tenant has no fresh figures but a check of it is in the air (taken off before the start
// arrived, so its figures are recent ones like any other). An admitted start is a
// reservation like any other. When the figures it used are past half their freshness, a
// check is started in the background (without waiting for it) so that the next start finds
// them fresh.
func (adm *Admitter) admitFast(p authz.Principal, pol authz.TenantPolicy, id string, episodes int, needT, needO bool, now time.Time) (out fastOutcome) {
	fresh := adm.opts.QuotaFresh
	if fresh <= 0 {
		return fastOutcome{}
	}
	q := &adm.quotas
	tenantKey, ownerKey := flightKey{p.Tenant, ""}, flightKey{p.Tenant, p.Subject}
	q.mu.Lock()
	var (
		ts           *tenantSnap
		osn          *ownerSnap
		stale        []flightKey
		extra, slots = 0, adm.MaxJobSlots()
		// ownerByTenant: the owner has no fresh figures of its own; the tenant's bound them.
		ownerByTenant bool
	)
	if needT {
		c, have := q.recent[tenantKey]
		if !have || now.Sub(c.at) > fresh {
			// A check of the tenant in the air now answers sooner than a new one.
			if slot := q.flights[tenantKey]; slot != nil {
				out.inAir = slot.cur
			}
			q.mu.Unlock()
			return out
		}
		t := *c.res.(*tenantSnap)
		if episodes > 0 && pol.Limits.EpisodesInFlightPerTenant > 0 && !t.heldMeasured {
			q.mu.Unlock()
			return fastOutcome{}
		}
		t.rs = withLater(t.rs, q.pending[p.Tenant], c.seq)
		ts = &t
		// The tenant's rate (on every replica, this one's included) over the figures' age: at
		// least the other replicas' starts they miss, at the rate the last checks saw.
		extra = int(math.Ceil(c.rate * now.Sub(c.at).Seconds()))
		slots = avgSlots(&t, q.pending[p.Tenant])
		if now.Sub(c.at) > fresh/2 {
			stale = append(stale, tenantKey)
		}
	}
	if needO {
		if c, have := q.recent[ownerKey]; have && now.Sub(c.at) <= ownerFreshFactor*fresh {
			o := *c.res.(*ownerSnap)
			o.rs = withLater(o.rs, q.pending[p.Tenant], c.seq)
			osn = &o
			c.used = now
			q.recent[ownerKey] = c
			if now.Sub(c.at) > ownerFreshFactor*fresh/2 {
				stale = append(stale, ownerRefreshKey(p, ts))
			}
		} else {
			// No fresh figures of the owner: the tenant's may bound them (ownerBounded).
			if osn = uncountedOwner(p, ts); osn == nil {
				q.mu.Unlock()
				return fastOutcome{}
			}
			ownerByTenant = true
		}
	}
	far, farOK := adm.farLimits(pol.Limits, extra, slots)
	if !farOK {
		q.mu.Unlock()
		return fastOutcome{}
	}
	r := q.reserveLocked(p.Tenant, id, p.Subject, episodes, now)
	farPol := pol
	farPol.Limits = far
	if !ownerBounded(far, ts, osn, r) || decide(farPol, r, episodes, now, ts, osn) != nil {
		tenantOnly := farPol
		tenantOnly.Limits.RunningJobsPerOwner, tenantOnly.Limits.StartsPerMinutePerOwner = 0, 0
		if needO && osn.owner && decide(tenantOnly, r, episodes, now, ts, nil) == nil {
			// Far from the tenant's limits; only the owner's figures are missing: count those
			// (the owner's flight) and decide with them, the tenant's kept.
			j := q.enlistLocked(ownerKey, episodes, now)
			adm.refreshLocked(pol, stale, episodes, now)
			q.mu.Unlock()
			return fastOutcome{owner: &j, ts: ts, r: r, far: far}
		}
		q.pending[p.Tenant] = slices.DeleteFunc(q.pending[p.Tenant], func(x reservation) bool { return x.seq == r.seq })
		q.mu.Unlock()
		return fastOutcome{}
	}
	if needO && (ownerByTenant || !osn.runningCounted && !osn.recentCounted) && osn.owner && tenantBoundNearing(far, ts, r) {
		// The tenant's figures will soon stop bounding the owner's: count the owner's now (with
		// the tenant's other owners, in groups), in the background, so that its next starts find
		// figures of their own.
		stale = append(stale, ownerRefreshKey(p, ts))
	}
	adm.refreshLocked(pol, stale, episodes, now)
	q.mu.Unlock()
	return fastOutcome{a: admission{f: adm, tenant: p.Tenant, r: &r}, ok: true}
}

// refreshLocked starts a check of each key in stale that has none in the air, waited for by no
// start: its figures serve the next starts (q.mu is held). An owner-groups flight in the air
// counts the owners active when it took off, so for those a start enlists the next one
// instead (one at most gathers; it takes off when the first lands): owners new to the tenant
// are counted before the tenant's figures stop bounding theirs.
func (adm *Admitter) refreshLocked(pol authz.TenantPolicy, stale []flightKey, episodes int, now time.Time) {
	for _, k := range stale {
		if _, busy := adm.quotas.flights[k]; busy && k.owner != ownersGroup {
			continue
		}
		ep := episodes
		if k.owner == "" && pol.Limits.EpisodesInFlightPerTenant > 0 {
			ep = max(ep, 1) // measure the slots for the tenant's next eval, whatever this start is
		}
		if j := adm.quotas.enlistLocked(k, ep, now); j.start {
			j.fl.refresh = true
			go adm.fly(j.key, pol, j.fl)
		}
	}
}

// fastOutcome is what admitFast decided: admitted (a, ok); not, but a check of the tenant in
// the air may let it (inAir: wait for it and ask again); or far from the tenant's limits on
// its recent figures (ts, far) with only the owner's to count: r is reserved and owner is the
// owner's flight it joined (admitOwnerCounted decides).
type fastOutcome struct {
	a     admission
	ok    bool
	inAir *flight
	owner *joined
	ts    *tenantSnap
	r     reservation
	far   authz.Limits
}

// avgSlots estimates the slots of a start of the tenant another replica made: the larger of
// the averages (rounded up) of its running jobs' (when measured) and of this replica's
// reservations', at least 1.
func avgSlots(t *tenantSnap, pending []reservation) int {
	avg := 1
	if t.running > 0 && t.heldMeasured {
		avg = max(avg, (t.held+t.running-1)/t.running)
	}
	if n := len(pending); n > 0 {
		sum := 0
		for _, r := range pending {
			sum += r.episodes
		}
		avg = max(avg, (sum+n-1)/n)
	}
	return avg
}

// ownersCountedFrom is the share (1/n) of an owner limit from which the tenant's figures no
// longer spare its owners their own counts: a tenant's unfinished jobs climb from there to the
// whole limit within a few rounds of a busy tenant's starts, and each owner's count must be in
// before then (measured: at a half, 61 of 100 owner-replica pairs of the many-owners benchmark
// still met the limit without figures of their own and waited for a count; at a quarter, 0).
const ownersCountedFrom = 4

// tenantBoundNearing reports whether t's figures, which bound an owner's, have reached
// 1/ownersCountedFrom of an owner limit of l.
func tenantBoundNearing(l authz.Limits, t *tenantSnap, r reservation) bool {
	pending, _, _ := pendingBefore(t.rs, r)
	return l.RunningJobsPerOwner > 0 && ownersCountedFrom*(t.running+pending) >= l.RunningJobsPerOwner ||
		l.StartsPerMinutePerOwner > 0 && t.recentCounted && ownersCountedFrom*(t.recent+pending) >= l.StartsPerMinutePerOwner
}

// uncountedOwner is p's owner figures with nothing counted, for the tenant's figures t to
// bound (ownerBounded, decide); nil without t or when p's tenant cannot be scoped.
func uncountedOwner(p authz.Principal, t *tenantSnap) *ownerSnap {
	sc, err := quotaScopeOf(p.Tenant, p.Subject, nil)
	if err != nil || t == nil {
		return nil
	}
	return &ownerSnap{owner: sc.hasOwner, rs: t.rs}
}

// baseBounds reports whether o's base, with t's starts since its epoch, bounds the owner's
// starts of the minute (else t's own starts of the minute may: decide).
func baseBounds(t *tenantSnap, o *ownerSnap) bool {
	return o.base != nil && t.epoch.Equal(o.base.epoch)
}

// ownerBounded reports whether o's figures bound the owner's usage for r under l: counted, or
// bounded by the tenant's figures as measureOwner bounds them (ownerExact's test).
func ownerBounded(l authz.Limits, t *tenantSnap, o *ownerSnap, r reservation) bool {
	if o == nil || !o.owner {
		return true
	}
	pending := 0
	if t != nil {
		pending, _, _ = pendingBefore(t.rs, r)
	}
	runningOK := o.runningCounted || l.RunningJobsPerOwner <= 0 || t != nil && t.running+pending < l.RunningJobsPerOwner
	recentOK := o.recentCounted || l.StartsPerMinutePerOwner <= 0 ||
		t != nil && baseBounds(t, o) && o.base.c+t.sinceEpoch+pending < l.StartsPerMinutePerOwner ||
		t != nil && !baseBounds(t, o) && t.recentCounted && t.recent+pending < l.StartsPerMinutePerOwner
	return runningOK && recentOK
}
