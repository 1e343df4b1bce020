// reserve.go holds this replica's reservations: starts admitted here that visibility may
// not show yet, counted against the tenant's later starts.

package quota

import "time"

// visibleWait bounds how long a started job's reservation outlives its start: visibility
// shows a job within milliseconds, and a check that finds all of this replica's started jobs
// of the tenant shown releases them sooner.
const visibleWait = 5 * time.Second

type reservation struct {
	seq      uint64
	id       string // the job's workflow ID
	owner    string
	episodes int
	// expires is zero while the start is in flight; once started, visibleWait after it.
	expires time.Time
}

// reserveLocked records a start about to be checked among the tenant's reservations, dropping
// expired ones, and returns it. q.mu is held. (What counts against it is the flight's own
// snapshot of the reservations, taken when it takes off.)
func (q *quotas) reserveLocked(tenant, id, owner string, episodes int, now time.Time) reservation {
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
	q.pending[tenant] = append(live, r)
	return r
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
