package quota

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	enumspb "go.temporal.io/api/enums/v1"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// slotEvals is a tenant's running evals: JobSlots of each (0: none, an eval started before
// JobSlots existed; its memo says memo[i]).
type slotEvals struct {
	slots, memo []int
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

// heldFixture is an admitter over the in-memory store holding e's evals (running, acme's),
// whose counts the store evaluates itself.
func heldFixture(t *testing.T, e slotEvals) (*Admitter, *memstore.Store) {
	t.Helper()
	tc := memstore.New()
	tc.Indexed = true
	for i, v := range e.slots {
		id := "acme/eval/ann/e" + strconv.Itoa(i)
		j := &jobstore.Job{ID: id, RunID: "run-" + id, Tenant: "acme", Owner: "ann", Kind: "eval", Exec: jobstore.RunRunning, SAStatus: workflows.StatusRunning, Slots: v}
		if v == 0 {
			j.Slots = e.memo[i]
		} else {
			tc.JobSlots[j.RunID] = v
		}
		tc.Jobs[id] = j
	}
	return newTestAdmitter(t, tc, Options{}), tc
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
			f, tc := heldFixture(t, c.e)
			evals := len(c.e.slots)
			fl := &flight{minEp: 1, maxEp: 1}
			sc, err := quotaScopeOf("acme", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			held, heldMin, exact, err := f.measureHeld(t.Context(), "acme", sc, fl, c.limit, c.limit, evals, 0, nil)
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
			if listed := len(tc.Lists) > 0; listed != c.wantList {
				t.Fatalf("listed %v, want %v (%d lists)", listed, c.wantList, len(tc.Lists))
			}
			if tc.CountCalls > 8+6*7 {
				t.Fatalf("%d counts: more than the first round and ~log2(64) halvings", tc.CountCalls)
			}
		})
	}
}

// Fifty owners of one tenant starting at once share ONE tenant flight per round: its
// tenant-wide counts are asked once for all of them, not once per owner (issue 29: 50 owners
// sent 50 concurrent tenant-wide queries per round). Each owner's own counts are its own.
func TestTenantFlightShared(t *testing.T) {
	tc := memstore.New()
	tc.Indexed = true
	gate := make(chan struct{})
	var mu sync.Mutex
	tenantWide, ownerCounts := 0, 0
	tc.OnCount = func(f jobstore.Filter) error {
		mu.Lock()
		if f.Owner != "" {
			ownerCounts++
		} else if f.IDs == nil {
			tenantWide++
		}
		mu.Unlock()
		<-gate
		return nil
	}
	ten := authz.DefaultTenants()
	f := newTestAdmitter(t, tc, Options{Tenants: ten, QuotaBudget: time.Minute})
	const owners = 50
	var wg sync.WaitGroup
	errs := make(chan error, owners)
	for i := range owners {
		p := authz.Principal{Tenant: "acme", Subject: "owner" + strconv.Itoa(i)}
		wg.Go(func() {
			if err := admitDropped(f, p, "k"); err != nil {
				errs <- err
			}
		})
	}
	// Every start has reserved (and so joined its flights) before the first count answers.
	testenv.Eventually(t, 10*time.Second, "every start reserved", func() bool {
		f.quotas.mu.Lock()
		defer f.quotas.mu.Unlock()
		return len(f.quotas.pending["acme"]) == owners
	})
	// And every owner's flight has asked its counts: they are decided before the tenant's
	// count answers (a flight that asked later could skip its owner's running jobs on the
	// tenant's fresh count, which the next round shows; under -race that happened 2 runs in 40).
	testenv.Eventually(t, 10*time.Second, "every owner's counts asked", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ownerCounts == 2*owners
	})
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Two tenant flights at most (the first took off with the first start; the rest gathered
	// behind it), each asking running jobs, running evals and starts since the epoch: 6
	// counts, not 150.
	if tenantWide > 6 {
		t.Fatalf("%d tenant-wide counts for %d owners' starts: the tenant's measures are not shared", tenantWide, owners)
	}
	if ownerCounts != 2*owners {
		t.Fatalf("%d owner counts, want %d (running and starts of the last minute, once per owner)", ownerCounts, 2*owners)
	}
	// The next round: the tenant's fresh figures bound every owner's far below its limits (0
	// unfinished jobs of 200; its starts of the minute, 0 at its count, plus the tenant's 50
	// since, of 600), so no owner's flight asks anything.
	ownerCounts = 0
	for i := range owners {
		p := authz.Principal{Tenant: "acme", Subject: "owner" + strconv.Itoa(i)}
		if err := admitDropped(f, p, "k2"); err != nil {
			t.Fatal(err)
		}
	}
	if ownerCounts != 0 {
		t.Fatalf("%d owner counts in the second round, want none", ownerCounts)
	}
}

// An owner's unfinished jobs are bounded by the tenant's while that keeps them under the limit;
// when it does not (the tenant holds many, the owner few or many), the owner's are counted
// before the start is decided, so running_jobs_per_owner holds exactly as before.
func TestOwnerRunningBoundedByTenant(t *testing.T) {
	tc := memstore.New()
	var ownerCounts atomic.Int64
	tc.OnCount = func(f jobstore.Filter) error {
		if f.Owner != "" && f.Runs == jobstore.RunsUnfinished {
			ownerCounts.Add(1)
		}
		return nil
	}
	ten := authz.Unlimited()
	ten.Tenants = map[string]authz.TenantPolicy{"acme": {Limits: authz.Limits{RunningJobsPerOwner: 5, RunningJobsPerTenant: -1,
		EpisodesInFlightPerTenant: -1, StartsPerMinutePerOwner: -1}}}
	f := newTestAdmitter(t, tc, Options{Tenants: ten})
	ann, bo := authz.Principal{Tenant: "acme", Subject: "ann"}, authz.Principal{Tenant: "acme", Subject: "bo"}
	start := func(p authz.Principal, key string) error { return admitDropped(f, p, key) }
	// bo holds 2 running jobs, ann none: the tenant's 2 (3 with a1's reservation) < 5 keeps
	// ann under the limit.
	for i := range 2 {
		tc.Put(memstore.ExecInfo(t, "acme/eval/bo/r"+strconv.Itoa(i), "acme", "bo", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning))
	}
	if err := start(ann, "a1"); err != nil {
		t.Fatal(err)
	}
	ownerCounts.Store(0)
	if err := start(ann, "a2"); err != nil || ownerCounts.Load() != 0 {
		t.Fatalf("start %v, %d owner counts: the tenant's fresh count bounds ann's under 5", err, ownerCounts.Load())
	}
	// The tenant now holds 5, all bo's: ann's own jobs (0) must be counted before ann is
	// admitted; bo, at its limit, is refused exactly as with its own count.
	for i := 2; i < 5; i++ {
		tc.Put(memstore.ExecInfo(t, "acme/eval/bo/r"+strconv.Itoa(i), "acme", "bo", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning))
	}
	ownerCounts.Store(0)
	if err := start(ann, "a3"); err != nil || ownerCounts.Load() == 0 {
		t.Fatalf("start %v after %d owner counts: ann's own jobs must be counted once the tenant's reach the limit", err, ownerCounts.Load())
	}
	err := start(bo, "b1")
	if te, ok := toolError(err); !ok || te.Code != wire.CodeQuotaExceeded || !strings.HasPrefix(te.Message, "running_jobs_per_owner") {
		t.Fatalf("bo at its limit: %v", err)
	}
}

// A check that cannot answer within the budget is decided by the policy, never answered
// unavailable: bounded admission admits QuotaOvershoot starts of the tenant, then refuses with
// quota_exceeded and retry_after_ms; the refuse policy refuses at once. A check that answers
// again lifts the bound.
func TestQuotaDegraded(t *testing.T) {
	for _, pol := range []Policy{AdmitBounded, Refuse} {
		t.Run(string(pol), func(t *testing.T) {
			tc := memstore.New()
			var answering sync.Mutex // held while counts hang
			tc.OnCount = func(jobstore.Filter) error {
				answering.Lock()
				defer answering.Unlock()
				return nil
			}
			answering.Lock()
			f := newTestAdmitter(t, tc, Options{Tenants: authz.DefaultTenants(), QuotaBudget: 20 * time.Millisecond,
				QuotaDegraded: pol, QuotaOvershoot: 3})
			p := authz.Principal{Tenant: "acme", Subject: "ann"}
			admitted, refused := 0, 0
			for i := range 5 {
				_, err := f.Admit(t.Context(), p, "acme/eval/ann/k"+strconv.Itoa(i), 1)
				te, ok := toolError(err)
				switch {
				case err == nil:
					admitted++
				case ok && te.Code == wire.CodeQuotaExceeded && te.Retryable && te.RetryAfterMS > 0 && strings.HasPrefix(te.Message, quotaLimitUnchecked):
					refused++
				default:
					t.Fatalf("start %d: %v", i, err)
				}
			}
			want := 0
			if pol == AdmitBounded {
				want = 3
			}
			if admitted != want || refused != 5-want {
				t.Fatalf("admitted %d, refused %d; want %d and %d", admitted, refused, want, 5-want)
			}
			if got := testutil.ToFloat64(f.metrics.Degraded.WithLabelValues("admitted", "budget")); int(got) != want {
				t.Fatalf("metric admitted %v, want %d", got, want)
			}
			if got := testutil.ToFloat64(f.metrics.Degraded.WithLabelValues("refused", "budget")); int(got) != 5-want {
				t.Fatalf("metric refused %v, want %d", got, 5-want)
			}
			// Visibility answers again: the next start is checked (and the bound lifted).
			answering.Unlock()
			if _, err := f.Admit(t.Context(), p, "acme/eval/ann/after", 1); err != nil {
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

// An owner's starts of the minute are bounded by its last count plus the tenant's starts since
// that count's epoch; when another owner's starts make the bound reach the limit, the owner is
// counted afresh before the start is decided: admitted when its own starts are few, refused
// when they reach the limit — starts_per_minute_per_owner holds as with the owner's own count.
func TestOwnerWindowBoundedByTenant(t *testing.T) {
	tc := memstore.New()
	var recentCounts atomic.Int64
	tc.OnCount = func(f jobstore.Filter) error {
		if f.Owner != "" && !f.StartedSince.IsZero() {
			recentCounts.Add(1)
		}
		return nil
	}
	ten := authz.Unlimited()
	ten.Tenants = map[string]authz.TenantPolicy{"acme": {Limits: authz.Limits{RunningJobsPerOwner: -1, RunningJobsPerTenant: -1,
		EpisodesInFlightPerTenant: -1, StartsPerMinutePerOwner: 10}}}
	f := newTestAdmitter(t, tc, Options{Tenants: ten})
	ann, bo := authz.Principal{Tenant: "acme", Subject: "ann"}, authz.Principal{Tenant: "acme", Subject: "bo"}
	start := func(p authz.Principal, key string) error { return admitDropped(f, p, key) }
	seed := func(owner string, n int) {
		for i := range n {
			info := memstore.ExecInfo(t, "acme/eval/"+owner+"/s"+strconv.Itoa(i), "acme", owner, "eval", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, workflows.StatusRunning)
			info.StartTime = timestamppb.New(time.Now())
			tc.Put(info)
		}
	}
	if err := start(ann, "a1"); err != nil || recentCounts.Load() != 1 {
		t.Fatalf("first start %v after %d counts of ann's starts, want 1", err, recentCounts.Load())
	}
	recentCounts.Store(0)
	if err := start(ann, "a2"); err != nil || recentCounts.Load() != 0 {
		t.Fatalf("second start %v after %d counts: ann's count plus the tenant's 0 since bound her far below 10", err, recentCounts.Load())
	}
	// bo starts 10: the bound for ann reaches the limit, so ann is counted (0) and admitted.
	seed("bo", 10)
	recentCounts.Store(0)
	if err := start(ann, "a3"); err != nil || recentCounts.Load() == 0 {
		t.Fatalf("start %v after %d counts: ann must be counted once the tenant's starts reach her limit", err, recentCounts.Load())
	}
	// bo itself is at its limit.
	if te, ok := toolError(start(bo, "b1")); !ok || te.Code != wire.CodeQuotaExceeded || !strings.HasPrefix(te.Message, "starts_per_minute_per_owner") {
		t.Fatalf("bo at its limit: %v", te)
	}
}

// admitDropped runs the quota check of a 1-episode eval start of p under key and, when
// admitted, drops the reservation (nothing is started): the tests look at the check alone.
func admitDropped(f *Admitter, p authz.Principal, key string) error {
	a, err := f.Admit(context.Background(), p, "acme/eval/"+p.Subject+"/"+key, 1)
	if err == nil {
		a.Abandoned()
	}
	return err
}

// newTestAdmitter is an Admitter over store with opts' zero fields defaulted as the frontend
// defaults them, admitting for the eval kind (at most 64 slots a job).
func newTestAdmitter(t testing.TB, store jobstore.Store, opts Options) *Admitter {
	t.Helper()
	if opts.QuotaBudget <= 0 {
		opts.QuotaBudget = BudgetDefault
	}
	if opts.QuotaOvershoot <= 0 {
		opts.QuotaOvershoot = OvershootDefault
	}
	if opts.QuotaDegraded == "" {
		opts.QuotaDegraded = AdmitBounded
	}
	if opts.TemporalTimeout <= 0 {
		opts.TemporalTimeout = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = func(context.Context) *zap.Logger { return zap.NewNop() }
	}
	m := Metrics{Degraded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_degraded_total"}, []string{"decision", "why"}),
		Decided:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_decisions_total"}, []string{"figures"}),
		Rejected: func(tenant, limit string) {}}
	return New(opts, store, []SlotKind{{Name: "eval", MaxSlots: 64}}, m)
}

// toolError is err's tool error, if it is one.
func toolError(err error) (*wire.ToolError, bool) {
	var te *wire.ToolError
	return te, errors.As(err, &te)
}
