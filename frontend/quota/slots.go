// slots.go holds the slot ledger of running evals' episode concurrency.

package quota

import (
	"time"
)

// visibilityLag bounds how long visibility may take to show a start: a listing read at t is
// taken to show the evals started before t minus this; those started since are counted apart.
const visibilityLag = 2 * time.Second

// ledgerMaxAge bounds how long a slot ledger bounds the running evals' slots (with the evals
// started since counted at the largest concurrency): past it, or when that bound does not
// fit, the running evals are listed again.
const ledgerMaxAge = 30 * time.Second

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

// maxJobSlots bounds the episode slots one job of a slot-holding kind holds.
func (adm *Admitter) MaxJobSlots() int {
	m := 0
	for _, k := range adm.kinds {
		m = max(m, k.MaxSlots)
	}
	return m
}

// slotKinds are the names of the kinds that hold slots (our registered kinds', never a
// caller's string).
func (adm *Admitter) SlotKinds() []string {
	var names []string
	for _, k := range adm.kinds {
		names = append(names, k.Name)
	}
	return names
}
