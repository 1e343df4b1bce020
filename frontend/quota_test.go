package frontend

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
	f := &Frontend{opts: Options{Now: func() time.Time { return now }}}
	q := &f.quotas
	ahead := func(tenant, id string, at time.Time) []string {
		r, rs := q.reserve(tenant, id, "ann", 0, at)
		(admission{f: f, tenant: tenant, r: &r}).abandoned() // only look
		var out []string
		for _, r := range rs {
			out = append(out, r.id)
		}
		return out
	}
	admit := func(id string) admission {
		r, _ := q.reserve("acme", id, "ann", 0, now)
		return admission{f: f, tenant: "acme", r: &r}
	}
	a, b := admit("a"), admit("b")
	if got := ahead("acme", "x", now); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("ahead: %v, want [a b]", got)
	}
	if got := ahead("globex", "x", now); len(got) != 0 {
		t.Fatalf("another tenant sees %v", got)
	}
	// In flight (not started): neither seen-visible nor time drops it.
	q.visible("acme", map[string]bool{"a": true})
	if got := ahead("acme", "x", now.Add(time.Hour)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("in-flight reservations dropped: %v", got)
	}
	b.abandoned()
	a.started()
	c := admit("c")
	c.started()
	if got := ahead("acme", "x", now); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("after b abandoned: %v, want [a c]", got)
	}
	// Started and seen visible: gone.
	q.visible("acme", map[string]bool{"a": true})
	if got := ahead("acme", "x", now); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("after a seen visible: %v, want [c]", got)
	}
	// Started and never seen: gone once visibleWait has passed.
	if got := ahead("acme", "x", now.Add(visibleWait)); len(got) != 0 {
		t.Fatalf("expired reservation kept: %v", got)
	}
}

// A window's n-th most recent start: exact from the log, and for starts only counted (since
// the log, or without one) the end of their span the caller asks for — never early for a
// retry_after, never late for "full until".
func TestQuotaStartWindow(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	t0 := now.Add(-2 * time.Second)
	w := &startWindow{t0: t0, now: now, since: 2, times: []time.Time{now.Add(-3 * time.Second), now.Add(-50 * time.Second)}}
	if w.len() != 4 {
		t.Fatalf("len %d, want 4", w.len())
	}
	for _, c := range []struct {
		n    int
		late bool
		want time.Time
	}{{1, true, now}, {2, false, t0}, {3, true, now.Add(-3 * time.Second)}, {4, false, now.Add(-50 * time.Second)}} {
		if got := w.nth(c.n, c.late); !got.Equal(c.want) {
			t.Errorf("nth(%d, late=%v) = %s, want %s", c.n, c.late, got, c.want)
		}
	}
	// Without a log: 5 starts in the minute, 3 of them since 30 s ago, none since 45 s ago.
	since := now.Add(-time.Minute)
	w = &startWindow{t0: since, now: now, since: 5, probes: []probe{{now.Add(-45 * time.Second), 4}, {now.Add(-30 * time.Second), 3}, {now.Add(-15 * time.Second), 0}}}
	if got := w.nth(5, true); !got.Equal(now.Add(-45 * time.Second)) {
		t.Errorf("5th most recent: late bound %s, want 45 s ago", got)
	}
	if got := w.nth(3, true); !got.Equal(now.Add(-15 * time.Second)) {
		t.Errorf("3rd most recent: late bound %s, want 15 s ago", got)
	}
	if got := w.nth(3, false); !got.Equal(since) {
		t.Errorf("3rd most recent: early bound %s, want the window's start", got)
	}
}

// One snapshot serves every start that waited on it: each adds the reservations admitted
// before it that visibility did not show, and no others.
func TestQuotaSharedSnapshot(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pol := authz.TenantPolicy{Limits: authz.Limits{RunningJobsPerTenant: 5, RunningJobsPerOwner: -1, EpisodesInFlightPerTenant: -1, StartsPerMinutePerOwner: -1}}
	rs := []reservation{{seq: 1, id: "a", owner: "ann"}, {seq: 2, id: "b", owner: "ann"}, {seq: 3, id: "c", owner: "ann"}, {seq: 4, id: "d", owner: "ann"}}
	s := &usageSnap{rs: rs, visible: map[string]bool{"a": true}, owner: true, tenantRunning: 3}
	// b: 3 running (a among them) + nothing unseen ahead: fits. c: + b. d: + b, c = 5: over.
	for i, want := range []bool{true, true, true, false} {
		ref := s.decide(pol, rs[i], 0, now)
		if (ref == nil) != want {
			t.Errorf("reservation %s: admitted %v, want %v (%+v)", rs[i].id, ref == nil, want, ref)
		}
	}
}
