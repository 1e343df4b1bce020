// bounds.go holds what lets an owner's check skip its own counts: the tenant's last
// figures, which bound every owner's (its unfinished jobs bound theirs; its starts since an
// epoch, added to an owner's count made in that epoch, bound that owner's starts of the
// minute). A bound only saves a count: each start's own tenant figures confirm it before it
// is admitted (ownerExact), so the limits hold as with the owners' own counts.

package quota

import "time"

// tenantBound is how long a tenant's count of unfinished jobs bounds its owners' (the owners'
// flights that start meanwhile skip their own count while it is far enough below the limit).
// A start's own tenant count confirms the bound before it is admitted (ownerRunningExact).
const tenantBound = 2 * time.Second

// tenantRunningCount is a tenant's last count of unfinished jobs, reservations included.
type tenantRunningCount struct {
	n  int
	at time.Time
}

func (q *quotas) noteTenantRunning(tenant string, n int, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	swept(&q.tenantRunning, 0, func(_ string, c tenantRunningCount) bool {
		return at.Sub(c.at) > tenantBound
	})[tenant] = tenantRunningCount{n: n, at: at}
}

// tenantRunningBelow reports whether the tenant's last count, younger than tenantBound, is
// below limit.
func (q *quotas) tenantRunningBelow(tenant string, limit int, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, ok := q.tenantRunning[tenant]
	return ok && now.Sub(c.at) < tenantBound && c.n < limit
}

// startEpoch is a tenant's epoch for the starts-of-the-minute bound: an owner's count made at
// or after e, plus the tenant's starts since e, bounds the owner's starts of any later minute.
// A new epoch begins once the tenant's starts since e reach half the limit (the bound would
// soon decide nothing); each owner then counts once more.
type startEpoch struct {
	e time.Time
	// since is the tenant's starts since e (reservations included) at its last count, at.
	since int
	at    time.Time
}

// ownerBase is an owner's count of its starts of the minute, made in epoch.
type ownerBase struct {
	c     int
	epoch time.Time
}

// epoch is the tenant's current epoch, begun now if it has none.
func (q *quotas) epoch(tenant string, now time.Time) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.epochs == nil {
		q.epochs = map[string]startEpoch{}
	}
	ep, ok := q.epochs[tenant]
	if !ok {
		ep = startEpoch{e: now}
		q.epochs[tenant] = ep
	}
	return ep.e
}

// noteTenantSince records the tenant's starts since epoch e, and begins a new epoch once they
// reach half of limit.
func (q *quotas) noteTenantSince(tenant string, e time.Time, since, limit int, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, ok := swept(&q.epochs, 0, func(_ string, ep startEpoch) bool {
		return now.Sub(ep.at) > time.Minute && now.Sub(ep.e) > time.Minute
	})[tenant]
	if ok && !cur.e.Equal(e) {
		return // a newer epoch began meanwhile
	}
	if 2*since >= limit {
		q.epochs[tenant] = startEpoch{e: now}
		return
	}
	q.epochs[tenant] = startEpoch{e: e, since: since, at: now}
}

func (q *quotas) noteOwnerBase(k flightKey, b ownerBase) {
	q.mu.Lock()
	defer q.mu.Unlock()
	swept(&q.bases, 4096, func(o flightKey, ob ownerBase) bool {
		ep, ok := q.epochs[o.tenant]
		return !ok || !ep.e.Equal(ob.epoch) // counted in an epoch that is over
	})[k] = b
}

// ownerBelow returns k's count in the tenant's current epoch when it, plus the tenant's
// starts since the epoch (counted within tenantBound), is below limit.
func (q *quotas) ownerBelow(k flightKey, limit int, now time.Time) (ownerBase, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b, ok := q.bases[k]
	ep, eok := q.epochs[k.tenant]
	if !ok || !eok || !b.epoch.Equal(ep.e) || ep.at.IsZero() || now.Sub(ep.at) >= tenantBound {
		return ownerBase{}, false
	}
	return b, b.c+ep.since < limit
}

// tenantRecentBelow reports whether the tenant's last counted starts of the minute (admitFast's
// figures, younger than tenantBound, reservations included) are below limit.
func (q *quotas) tenantRecentBelow(tenant string, limit int, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, ok := q.recent[flightKey{tenant, ""}]
	if !ok || now.Sub(c.at) >= tenantBound {
		return false
	}
	t := c.res.(*tenantSnap)
	return t.recentCounted && t.recent+len(t.rs) < limit
}
