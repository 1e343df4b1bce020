// window.go holds the starts-per-minute window: its exact count, the probes bounding
// when its starts happened, and the remembered full windows.

package quota

import (
	"context"
	"slices"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
)

// windowFull remembers that an owner's starts window holds at least limit visible starts until
// until (a start never leaves the window early); freeAt is when a retry can pass.
type windowFull struct {
	limit         int
	until, freeAt time.Time
	count         int
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
	// A freed window goes: owners that stopped starting leave nothing behind.
	swept(&q.full, 0, func(_ flightKey, o windowFull) bool { return !o.until.After(now) })[k] = w
}

// windowRefusal is the starts_per_minute_per_owner refusal for a window remembered as full.
func windowRefusal(limit, count int, freeAt, now time.Time) *authz.QuotaRefusal {
	return authz.CheckQuota(authz.TenantPolicy{Limits: authz.Limits{StartsPerMinutePerOwner: limit}},
		authz.Usage{OwnerStartsLastMinute: count, OldestStart: freeAt.Add(-time.Minute)}, 0, now)
}

// createdSince narrows jf to the runs started since t that did not continue as new: every
// job created since t once, plus once each job created before t that continued as new since.
func createdSince(jf jobstore.Filter, t time.Time) jobstore.Filter {
	jf.StartedSince, jf.Runs = t, jobstore.RunsLatest
	return jf
}

// continuedSince narrows jf to what createdSince counts too much: each job created before t
// and continued as new since has exactly one run that started before t and closed (continued)
// after it.
func continuedSince(jf jobstore.Filter, t time.Time) jobstore.Filter {
	jf.Runs, jf.StartedBefore, jf.ClosedSince = jobstore.RunsContinued, t, t
	return jf
}

// continuedAfter narrows jf to the runs that continued as new since t.
func continuedAfter(jf jobstore.Filter, t time.Time) jobstore.Filter {
	jf.Runs, jf.ClosedSince = jobstore.RunsContinued, t
	return jf
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
func (adm *Admitter) startWindow(ctx context.Context, owner jobstore.Filter, now time.Time) (*startWindow, error) {
	since := now.Add(-time.Minute)
	w := &startWindow{since: since, now: now}
	var all, continued int
	counts := map[*int]jobstore.Filter{&all: createdSince(owner, since), &continued: continuedSince(owner, since),
		&w.slack: continuedAfter(owner, since)}
	probes := func(lo, hi time.Time) []probe {
		ps := make([]probe, windowProbes)
		for i := range ps {
			ps[i].t = lo.Add(time.Duration(i+1) * hi.Sub(lo) / (windowProbes + 1))
		}
		for i := range ps {
			counts[&ps[i].n] = createdSince(owner, ps[i].t)
		}
		return ps
	}
	w.probes = probes(since, now)
	if err := adm.countAll(ctx, counts); err != nil {
		return nil, err
	}
	w.n = max(all-continued, 0)
	return w, nil
}

// refined is w with probes within the bracket of its limit-th most recent start (a new
// window: w is shared).
func (adm *Admitter) refined(ctx context.Context, owner jobstore.Filter, limit int, w *startWindow) (*startWindow, error) {
	lo, hi := w.nth(limit, false), w.nth(limit, true)
	fine := make([]probe, windowProbes)
	counts := map[*int]jobstore.Filter{}
	for i := range fine {
		fine[i].t = lo.Add(time.Duration(i+1) * hi.Sub(lo) / (windowProbes + 1))
		counts[&fine[i].n] = createdSince(owner, fine[i].t)
	}
	if err := adm.countAll(ctx, counts); err != nil {
		return nil, err
	}
	r := *w
	r.probes = append(slices.Clone(w.probes), fine...)
	slices.SortFunc(r.probes, func(a, b probe) int { return a.t.Compare(b.t) })
	return &r, nil
}

// rememberFullWindow remembers k's window as full, first with w's bounds and then — in the
// background, so that the starts waiting now are answered at once — with refined ones.
func (adm *Admitter) rememberFullWindow(k flightKey, owner jobstore.Filter, limit int, w *startWindow) {
	remember := func(w *startWindow) {
		if until := w.nth(limit, false).Add(time.Minute); until.After(w.now) {
			adm.quotas.rememberFull(k, windowFull{limit: limit, count: w.n, until: until, freeAt: w.nth(limit, true).Add(time.Minute)}, w.now)
		}
	}
	remember(w)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), adm.opts.TemporalTimeout)
		defer cancel()
		if r, err := adm.refined(ctx, owner, limit, w); err == nil {
			remember(r)
		}
	}()
}
