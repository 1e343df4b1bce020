package quota

import (
	"slices"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
)

// The reservation table: a start in flight counts until abandoned; a started one until a check
// finds it visible or visibleWait passes.
func TestQuotaReservations(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := &Admitter{opts: Options{Now: func() time.Time { return now }}}
	q := &f.quotas
	// ahead reserves a probe start at at and lists the tenant's other live reservations, those a
	// check at that moment counts (reserving drops the expired ones).
	ahead := func(tenant, id string, at time.Time) []string {
		q.mu.Lock()
		r := q.reserveLocked(tenant, id, "ann", 0, at)
		var out []string
		for _, x := range q.pending[tenant] {
			if x.seq != r.seq {
				out = append(out, x.id)
			}
		}
		q.mu.Unlock()
		(admission{f: f, tenant: tenant, r: &r}).Abandoned() // only look
		return out
	}
	admit := func(id string) admission {
		q.mu.Lock()
		r := q.reserveLocked("acme", id, "ann", 0, now)
		q.mu.Unlock()
		return admission{f: f, tenant: "acme", r: &r}
	}
	a, b := admit("a"), admit("b")
	if got := ahead("acme", "x", now); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("ahead: %v, want [a b]", got)
	}
	if got := ahead("globex", "x", now); len(got) != 0 {
		t.Fatalf("another tenant sees %v", got)
	}
	// In flight (not started): neither being seen nor time drops it.
	q.release("acme", map[string]bool{"a": true})
	if got := ahead("acme", "x", now.Add(time.Hour)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("in-flight reservations dropped: %v", got)
	}
	b.Abandoned()
	a.Started()
	c := admit("c")
	c.Started()
	if got := ahead("acme", "x", now); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("after b abandoned: %v, want [a c]", got)
	}
	// Started and seen in visibility: gone.
	q.release("acme", map[string]bool{"a": true})
	if got := ahead("acme", "x", now); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("after a seen: %v, want [c]", got)
	}
	// Started and never seen: gone once visibleWait has passed.
	if got := ahead("acme", "x", now.Add(visibleWait)); len(got) != 0 {
		t.Fatalf("expired reservation kept: %v", got)
	}
}

// A window's n-th most recent start, bounded by probes: never early for a retry_after, never
// late for "full until"; runs continued as new (slack) widen the early bound.
func TestQuotaStartWindow(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	since := now.Add(-time.Minute)
	ago := func(s int) time.Time { return now.Add(-time.Duration(s) * time.Second) }
	// 5 starts in the minute: 4 since 45 s ago, 3 since 30 s ago, none since 15 s ago.
	w := &startWindow{since: since, now: now, n: 5, probes: []probe{{ago(45), 4}, {ago(30), 3}, {ago(15), 0}}}
	for _, c := range []struct {
		n    int
		late bool
		want time.Time
	}{{5, true, ago(45)}, {5, false, since}, {4, false, ago(45)}, {3, true, ago(15)}, {3, false, ago(30)}, {1, true, ago(15)}} {
		if got := w.nth(c.n, c.late); !got.Equal(c.want) {
			t.Errorf("nth(%d, late=%v) = %s ago, want %s ago", c.n, c.late, now.Sub(got), now.Sub(c.want))
		}
	}
	w.slack = 1 // one of the runs counted since a probe may be a job created before it
	if got := w.nth(3, false); !got.Equal(ago(45)) {
		t.Errorf("with slack 1: early bound of the 3rd %s ago, want 45 s", now.Sub(got))
	}
}

// One snapshot serves every start that waited on it: each adds the reservations admitted
// before it (the counts leave all of them out), and no others.
func TestQuotaSharedSnapshot(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pol := authz.TenantPolicy{Limits: authz.Limits{RunningJobsPerTenant: 5, RunningJobsPerOwner: -1, EpisodesInFlightPerTenant: -1, StartsPerMinutePerOwner: -1}}
	rs := []reservation{{seq: 1, id: "a", owner: "ann"}, {seq: 2, id: "b", owner: "ann"}, {seq: 3, id: "c", owner: "ann"}, {seq: 4, id: "d", owner: "ann"}}
	s := &tenantSnap{rs: rs, running: 2}
	// a: 2 running. b: + a. c: + a, b = 4. d: + a, b, c = 5: over.
	for i, want := range []bool{true, true, true, false} {
		ref := decide(pol, rs[i], 0, now, s, nil)
		if (ref == nil) != want {
			t.Errorf("reservation %s: admitted %v, want %v (%+v)", rs[i].id, ref == nil, want, ref)
		}
	}
}

// A full window is remembered until it frees, for its owner and limit only, and the refusal
// it gives says when a retry passes.
func TestQuotaFullWindowRemembered(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var q quotas
	k := flightKey{"acme", "ann"}
	q.rememberFull(k, windowFull{limit: 600, count: 600, until: now.Add(10 * time.Second), freeAt: now.Add(11 * time.Second)}, now)
	w, ok := q.windowRefusal(k, 600, now)
	if !ok {
		t.Fatal("full window not remembered")
	}
	ref := windowRefusal(600, w.count, w.freeAt, now)
	if ref == nil || ref.Limit != "starts_per_minute_per_owner" || ref.RetryAfter != 11*time.Second {
		t.Fatalf("refusal %+v, want starts_per_minute_per_owner retrying after 11s", ref)
	}
	if _, ok := q.windowRefusal(flightKey{"acme", "ben"}, 600, now); ok {
		t.Fatal("another owner refused by ann's window")
	}
	if _, ok := q.windowRefusal(k, 700, now); ok {
		t.Fatal("a window full for another limit refuses")
	}
	if _, ok := q.windowRefusal(k, 600, now.Add(10*time.Second)); ok {
		t.Fatal("window still refusing once it may have freed")
	}
}
