package frontend

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/jobgate/jobgate/authz"
)

// slotEvals is a tenant's running evals for the count evaluator: JobSlots of each (0: none, an
// eval started before JobSlots existed; its memo says memo[i]).
type slotEvals struct {
	slots, memo []int
}

var (
	reSlotsEq      = regexp.MustCompile(`JobSlots = (\d+)`)
	reSlotsBetween = regexp.MustCompile(`JobSlots BETWEEN (\d+) AND (\d+)`)
	reSlotsGE      = regexp.MustCompile(`JobSlots >= (\d+)`)
)

// count answers the visibility counts heldByCounts asks: the evals (no JobSlots clause), those
// without JobSlots (IS NULL), and those in a range.
func (e slotEvals) count(q string) int {
	match := func(v int) bool { return true }
	switch {
	case strings.Contains(q, "JobSlots IS NULL"):
		match = func(v int) bool { return v == 0 }
	case reSlotsEq.MatchString(q):
		n, _ := strconv.Atoi(reSlotsEq.FindStringSubmatch(q)[1])
		match = func(v int) bool { return v == n }
	case reSlotsBetween.MatchString(q):
		m := reSlotsBetween.FindStringSubmatch(q)
		lo, _ := strconv.Atoi(m[1])
		hi, _ := strconv.Atoi(m[2])
		match = func(v int) bool { return v >= lo && v <= hi }
	case reSlotsGE.MatchString(q):
		n, _ := strconv.Atoi(reSlotsGE.FindStringSubmatch(q)[1])
		match = func(v int) bool { return v >= n }
	}
	c := 0
	for _, v := range e.slots {
		if match(v) {
			c++
		}
	}
	return c
}

func (e slotEvals) sum() int {
	s := 0
	for i, v := range e.slots {
		if v == 0 {
			v = e.memo[i]
		}
		s += v
	}
	return s
}

// heldFixture is a frontend over the in-memory store whose counts evaluate e.
func heldFixture(t *testing.T, e slotEvals) (*Frontend, *memStore, *int) {
	t.Helper()
	tc := newMemStore()
	tc.slotsIndexed = true
	var mu sync.Mutex
	calls := new(int)
	tc.count = func(q string) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		*calls++
		return e.count(q), nil
	}
	var legacy []*job
	for i, v := range e.slots {
		if v == 0 {
			legacy = append(legacy, &job{id: "acme/eval/ann/legacy-" + strconv.Itoa(i), slots: e.memo[i]})
		}
	}
	tc.pages = []memPage{{jobs: legacy}}
	return newStoreFrontend(t, tc, Options{}), tc, calls
}

// The slots running evals hold are summed by counts of JobSlots ranges, halved until they
// decide: exact when the limit needs it, in a handful of rounds, and never a listing unless an
// eval carries no JobSlots and only it leaves the answer open.
func TestHeldByCounts(t *testing.T) {
	for _, c := range []struct {
		name     string
		e        slotEvals
		limit    int
		wantList bool
	}{
		{"one value", slotEvals{slots: []int{1, 1, 1, 1}}, 4, false},
		{"mixed, exact at the limit", slotEvals{slots: []int{1, 8, 8, 13, 64, 64, 3, 2, 2, 47}}, 212, false},
		{"mixed, far below", slotEvals{slots: []int{1, 8, 8, 13, 64, 64, 3, 2, 2, 47}}, 4096, false},
		{"legacy decides nothing", slotEvals{slots: []int{5, 0, 7}, memo: []int{0, 9, 0}}, 21, true},
		{"legacy, bounded without reading", slotEvals{slots: []int{5, 0, 7}, memo: []int{0, 9, 0}}, 1000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, tc, calls := heldFixture(t, c.e)
			evals := len(c.e.slots)
			fl := &flight{minEp: 1, maxEp: 1}
			sc, err := quotaScopeOf("acme", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			held, heldMin, exact, err := f.measureHeld(t.Context(), "acme", sc, fl, c.limit, evals, 0)
			if err != nil {
				t.Fatal(err)
			}
			sum := c.e.sum()
			if heldMin > sum || held < sum {
				t.Fatalf("bounds [%d, %d] miss the sum %d", heldMin, held, sum)
			}
			// Decided for a start of 1 episode: exact, or a bound that answers it (and, containing
			// the sum, answers it as the sum would).
			if !exact && held+1 > c.limit && heldMin+1 <= c.limit {
				t.Fatalf("bounds [%d, %d] do not decide a start of 1 at limit %d (sum %d)", heldMin, held, c.limit, sum)
			}
			if exact && held != sum {
				t.Fatalf("exact %d, want %d", held, sum)
			}
			if listed := len(tc.lists) > 0; listed != c.wantList {
				t.Fatalf("listed %v, want %v (%d lists)", listed, c.wantList, len(tc.lists))
			}
			if *calls > 8+6*7 {
				t.Fatalf("%d counts: more than the first round and ~log2(64) halvings", *calls)
			}
		})
	}
}

// Fifty owners of one tenant starting at once share ONE tenant flight per round: its
// tenant-wide counts are asked once for all of them, not once per owner (issue 29: 50 owners
// sent 50 concurrent tenant-wide queries per round). Each owner's own counts are its own.
func TestTenantFlightShared(t *testing.T) {
	tc := newMemStore()
	tc.slotsIndexed = true
	gate := make(chan struct{})
	var mu sync.Mutex
	tenantWide, ownerCounts := 0, 0
	tc.count = func(q string) (int, error) {
		<-gate
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(q, "JobOwner") {
			ownerCounts++
		} else if !strings.HasPrefix(q, "WorkflowId IN") {
			tenantWide++
		}
		return 0, nil
	}
	ten := authz.DefaultTenants()
	f := newStoreFrontend(t, tc, Options{Tenants: ten, QuotaBudget: time.Minute})
	const owners = 50
	var wg sync.WaitGroup
	errs := make(chan error, owners)
	for i := range owners {
		p := authz.Principal{Tenant: "acme", Subject: "owner" + strconv.Itoa(i)}
		wg.Go(func() {
			a, err := f.admit(context.Background(), p, "acme/eval/"+p.Subject+"/k", 1)
			if err != nil {
				errs <- err
				return
			}
			a.abandoned()
		})
	}
	// Every start has reserved (and so joined its flights) before the first count answers.
	for {
		f.quotas.mu.Lock()
		n := len(f.quotas.pending["acme"])
		f.quotas.mu.Unlock()
		if n == owners {
			break
		}
		time.Sleep(time.Millisecond) // polling a condition, bounded by the test's timeout
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Two tenant flights at most (the first took off with the first start; the rest gathered
	// behind it), each asking running jobs and running evals: 4 counts, not 100.
	if tenantWide > 4 {
		t.Fatalf("%d tenant-wide counts for %d owners' starts: the tenant's measures are not shared", tenantWide, owners)
	}
	if ownerCounts != 2*owners {
		t.Fatalf("%d owner counts, want %d (running and starts of the last minute, once per owner)", ownerCounts, 2*owners)
	}
}

// A check that cannot answer within the budget is decided by the policy, never answered
// unavailable: bounded admission admits QuotaOvershoot starts of the tenant, then refuses with
// quota_exceeded and retry_after_ms; the refuse policy refuses at once. A check that answers
// again lifts the bound.
func TestQuotaDegraded(t *testing.T) {
	for _, pol := range []QuotaPolicy{QuotaAdmitBounded, QuotaRefuse} {
		t.Run(string(pol), func(t *testing.T) {
			tc := newMemStore()
			var answering sync.Mutex // held while counts hang
			tc.count = func(q string) (int, error) {
				answering.Lock()
				defer answering.Unlock()
				return 0, nil
			}
			answering.Lock()
			f := newStoreFrontend(t, tc, Options{Tenants: authz.DefaultTenants(), QuotaBudget: 20 * time.Millisecond,
				QuotaDegraded: pol, QuotaOvershoot: 3})
			p := authz.Principal{Tenant: "acme", Subject: "ann"}
			admitted, refused := 0, 0
			for i := range 5 {
				_, err := f.admit(t.Context(), p, "acme/eval/ann/k"+strconv.Itoa(i), 1)
				te, ok := asToolError(err)
				switch {
				case err == nil:
					admitted++
				case ok && te.Code == CodeQuotaExceeded && te.Retryable && te.RetryAfterMS > 0 && strings.HasPrefix(te.Message, quotaLimitUnchecked):
					refused++
				default:
					t.Fatalf("start %d: %v", i, err)
				}
			}
			want := 0
			if pol == QuotaAdmitBounded {
				want = 3
			}
			if admitted != want || refused != 5-want {
				t.Fatalf("admitted %d, refused %d; want %d and %d", admitted, refused, want, 5-want)
			}
			if got := testutil.ToFloat64(f.metrics.quotaDegraded.WithLabelValues("admitted", "budget")); int(got) != want {
				t.Fatalf("metric admitted %v, want %d", got, want)
			}
			if got := testutil.ToFloat64(f.metrics.quotaDegraded.WithLabelValues("refused", "budget")); int(got) != 5-want {
				t.Fatalf("metric refused %v, want %d", got, 5-want)
			}
			// Visibility answers again: the next start is checked (and the bound lifted).
			answering.Unlock()
			if _, err := f.admit(t.Context(), p, "acme/eval/ann/after", 1); err != nil {
				t.Fatalf("after visibility answers: %v", err)
			}
			f.quotas.mu.Lock()
			left := f.quotas.unchecked["acme"]
			f.quotas.mu.Unlock()
			if left != 0 {
				t.Fatalf("%d unchecked starts remembered after a check answered", left)
			}
		})
	}
}
