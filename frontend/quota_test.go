package frontend

import (
	"slices"
	"testing"
	"time"
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
