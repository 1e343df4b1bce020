package quota

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// fastBundle is an Admitter with QuotaFresh on, over the in-memory store, on a clock the test
// moves (so that no background refresh starts unless the test ages the figures).
type fastBundle struct {
	adm   *Admitter
	store *memstore.Store
	mu    sync.Mutex
	now   time.Time
}

func fastSetup(t *testing.T, l authz.Limits) *fastBundle {
	t.Helper()
	b := &fastBundle{store: memstore.New(), now: time.Now()}
	b.store.Indexed = true
	ten := authz.Unlimited()
	ten.Tenants = map[string]authz.TenantPolicy{"acme": {Limits: l}}
	b.adm = newTestAdmitter(t, b.store, Options{Tenants: ten, QuotaFresh: time.Second, Now: b.clock})
	return b
}

func (b *fastBundle) clock() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now
}

func (b *fastBundle) advance(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now = b.now.Add(d)
}

// counts is how many counts the store has answered so far.
func (b *fastBundle) counts() int {
	b.store.Mu.Lock()
	defer b.store.Mu.Unlock()
	return b.store.CountCalls
}

// start admits a 1-episode eval of owner under key and keeps it (started, not visible in the
// store: only this replica's reservation counts it).
func (b *fastBundle) start(owner, key string) error {
	a, err := b.adm.Admit(context.Background(), authz.Principal{Tenant: "acme", Subject: owner}, "acme/eval/"+owner+"/"+key, 1)
	if err == nil {
		a.Started()
	}
	return err
}

// seed puts n running evals of owner in the store: another replica's starts, visible.
func (b *fastBundle) seed(t *testing.T, owner string, n int) {
	for i := range n {
		b.store.Put(memstore.ExecInfo(t, "acme/eval/"+owner+"/seed"+strconv.Itoa(i), "acme", owner, "eval",
			enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning))
	}
}

// Far from every limit, a start is decided on its tenant's figures of under QuotaFresh without a
// count; this replica's starts since those figures are added, so that it reaches the margin
// and from there every start waits for a check made after it arrived: the limit is reached
// exactly, never passed.
func TestFastAdmitReachesLimitExactly(t *testing.T) {
	const limit = 40
	b := fastSetup(t, authz.Limits{RunningJobsPerTenant: limit, RunningJobsPerOwner: -1, EpisodesInFlightPerTenant: -1, StartsPerMinutePerOwner: -1})
	far, _ := b.adm.farLimits(authz.Limits{RunningJobsPerTenant: limit}, 0, 1)
	counted := map[int]bool{} // starts that waited for counts
	admitted := 0
	for i := range limit + 5 {
		before := b.counts()
		err := b.start("ann", "k"+strconv.Itoa(i))
		if err == nil {
			admitted++
		} else if te, ok := toolError(err); !ok || te.Code != wire.CodeQuotaExceeded {
			t.Fatalf("start %d: %v", i, err)
		}
		counted[i] = b.counts() > before
	}
	if admitted != limit {
		t.Fatalf("admitted %d, want exactly the limit %d", admitted, limit)
	}
	recent, check := testutil.ToFloat64(b.adm.metrics.Decided.WithLabelValues("recent")), testutil.ToFloat64(b.adm.metrics.Decided.WithLabelValues("check"))
	if want := far.RunningJobsPerTenant - 1; recent != float64(want) || check != float64(limit+5-want) {
		t.Errorf("decisions: recent %v, check %v; want %d and %d", recent, check, want, limit+5-want)
	}
	// The first start counts (no figures yet); those after it are decided on its figures while
	// they leave the margin (far.RunningJobsPerTenant); from there each one counts.
	for i := range limit + 5 {
		want := i == 0 || i >= far.RunningJobsPerTenant
		if counted[i] != want {
			t.Errorf("start %d (far limit %d): counted %v, want %v", i, far.RunningJobsPerTenant, counted[i], want)
		}
	}
}

// Figures older than QuotaFresh decide nothing: the next start waits for a new check, which
// sees what another replica started meanwhile.
func TestFastFiguresAge(t *testing.T) {
	b := fastSetup(t, authz.Limits{RunningJobsPerTenant: 100, RunningJobsPerOwner: -1, EpisodesInFlightPerTenant: -1, StartsPerMinutePerOwner: -1})
	if err := b.start("ann", "a"); err != nil {
		t.Fatal(err)
	}
	n := b.counts()
	if err := b.start("ann", "b"); err != nil || b.counts() != n {
		t.Fatalf("start on fresh figures: %v, %d counts asked", err, b.counts()-n)
	}
	// Another replica's 98 starts become visible; the figures still say 0 (+ a and b here).
	b.seed(t, "bo", 98)
	b.advance(time.Second + time.Millisecond)
	err := b.start("ann", "c")
	te, ok := toolError(err)
	if !ok || te.Code != wire.CodeQuotaExceeded || b.counts() == n {
		t.Fatalf("start on stale figures: %v after %d counts; want a check that finds 98 + 2 + 1 over 100", err, b.counts()-n)
	}
}

// Within QuotaFresh, what another replica started after the figures is not in them: the start
// is admitted only while the figures leave the margin, so an overshoot needs the other replicas
// to have started more than that margin meanwhile (fast.go's bound).
func TestFastMissesOnlyBeyondMargin(t *testing.T) {
	const limit = 100
	b := fastSetup(t, authz.Limits{RunningJobsPerTenant: limit, RunningJobsPerOwner: -1, EpisodesInFlightPerTenant: -1, StartsPerMinutePerOwner: -1})
	far, _ := b.adm.farLimits(authz.Limits{RunningJobsPerTenant: limit}, 0, 1)
	margin := limit - far.RunningJobsPerTenant
	b.seed(t, "bo", far.RunningJobsPerTenant-2) // the first check sees these
	if err := b.start("ann", "a"); err != nil {
		t.Fatal(err)
	}
	// The other replica starts `margin` more: the figures miss them.
	b.seed(t, "cy", margin)
	n := b.counts()
	if err := b.start("ann", "b"); err != nil || b.counts() != n {
		t.Fatalf("b: %v after %d counts: the figures (%d + a) leave the margin", err, b.counts()-n, far.RunningJobsPerTenant-2)
	}
	// Now the figures (with a and b) are at the margin: the next start is counted and refused
	// (the store holds 98 + 16 + a + b).
	err := b.start("ann", "c")
	if te, ok := toolError(err); !ok || te.Code != wire.CodeQuotaExceeded || b.counts() == n {
		t.Fatalf("c at the margin: %v after %d counts", err, b.counts()-n)
	}
}

// Small limits leave no room for a margin: every start of such a tenant waits for its check.
func TestFastNotForSmallLimits(t *testing.T) {
	b := fastSetup(t, authz.Limits{RunningJobsPerTenant: 3, RunningJobsPerOwner: -1, EpisodesInFlightPerTenant: -1, StartsPerMinutePerOwner: -1})
	for i := range 3 {
		n := b.counts()
		if err := b.start("ann", "k"+strconv.Itoa(i)); err != nil || b.counts() == n {
			t.Fatalf("start %d: %v after %d counts: want a check for each", i, err, b.counts()-n)
		}
	}
}

// The tenant's figures bound each owner's far from the owner limits: owners' first starts ask
// no count of their own while the tenant's figures stay under 1/ownersCountedFrom of an owner
// limit; past that, each start is still decided on recent figures, and its owner's own
// figures are counted in the background, with the other owners', in groups (groups.go): a
// few counts for all of them, not one per owner.
func TestFastOwnersBoundedByTenant(t *testing.T) {
	b := fastSetup(t, authz.DefaultTenants().Defaults.Limits)
	var mu sync.Mutex
	ownerCounts, calls := map[string]bool{}, 0
	b.store.OnCount = func(f jobstore.Filter) error {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range append([]string{f.Owner}, f.Owners...) {
			if o != "" {
				ownerCounts[o] = true
			}
		}
		if f.Owner != "" || len(f.Owners) > 0 {
			calls++
		}
		return nil
	}
	counted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ownerCounts)
	}
	far, _ := b.adm.farLimits(authz.DefaultTenants().Defaults.Limits, 0, 1)
	// The tenant holds nothing visible; its figures are this replica's reservations, one per start.
	under := far.RunningJobsPerOwner/ownersCountedFrom - 1
	for i := range under {
		if err := b.start("owner"+strconv.Itoa(i), "k"); err != nil {
			t.Fatal(err)
		}
	}
	if n := counted(); n != 0 {
		t.Fatalf("%d owners counted after %d starts far under a quarter of the owner limit, want 0", n, under)
	}
	for i := under; i < under+10; i++ {
		if err := b.start("owner"+strconv.Itoa(i), "k"); err != nil {
			t.Fatal(err)
		}
	}
	groupsLanded := func() bool {
		b.adm.quotas.mu.Lock()
		defer b.adm.quotas.mu.Unlock()
		_, busy := b.adm.quotas.flights[flightKey{"acme", ownersGroup}]
		return !busy && counted() > 0
	}
	// Owners that started while a count was in the air are in the next one, which their
	// starts enlisted (with every other owner active on this replica).
	testenv.Eventually(t, 10*time.Second, "every owner counted in the background", func() bool { return groupsLanded() && counted() == under+10 })
	mu.Lock()
	n := calls
	mu.Unlock()
	if n > 10 {
		t.Errorf("%d counts for %d owners' figures, want a few groups' (at most 10)", n, under+10)
	}
	if recent := testutil.ToFloat64(b.adm.metrics.Decided.WithLabelValues("recent")); recent != float64(under+10-1) {
		t.Fatalf("%v starts decided on recent figures, want all but the first (%d)", recent, under+10-1)
	}
}

// Far from the tenant's limits but near an owner's, the tenant's recent figures still serve
// the start and only the owner's are counted, afresh for each start within the owner's margin:
// the owner's limit is reached exactly.
func TestFastOwnerCountedNearItsLimit(t *testing.T) {
	const limit = 30
	b := fastSetup(t, authz.Limits{RunningJobsPerOwner: limit, RunningJobsPerTenant: 10_000, EpisodesInFlightPerTenant: -1, StartsPerMinutePerOwner: -1})
	var mu sync.Mutex
	ownerCounts, tenantCounts := 0, 0
	b.store.OnCount = func(f jobstore.Filter) error {
		mu.Lock()
		defer mu.Unlock()
		if f.Owner != "" {
			ownerCounts++
		} else if f.IDs == nil {
			tenantCounts++
		}
		return nil
	}
	b.seed(t, "ann", 20)
	if err := b.start("ann", "first"); err != nil {
		t.Fatal(err)
	}
	admitted := 1
	for i := range 12 {
		mu.Lock()
		oc, tc := ownerCounts, tenantCounts
		mu.Unlock()
		err := b.start("ann", "k"+strconv.Itoa(i))
		mu.Lock()
		askedOwner, askedTenant := ownerCounts > oc, tenantCounts > tc
		mu.Unlock()
		if !askedOwner || askedTenant {
			t.Fatalf("start %d: owner counted %v, tenant counted %v; want the owner's counts only", i, askedOwner, askedTenant)
		}
		if err == nil {
			admitted++
			continue
		}
		if te, ok := toolError(err); !ok || te.Code != wire.CodeQuotaExceeded || !strings.HasPrefix(te.Message, "running_jobs_per_owner") {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if 20+admitted != limit {
		t.Fatalf("ann holds %d, want exactly the limit %d", 20+admitted, limit)
	}
}

// The tenant's start rate, from its last two checks (or its minute's average), widens the
// margin of its limits by the starts that rate may have brought over the figures' age.
func TestFastRateWidensMargin(t *testing.T) {
	var q quotas
	k := flightKey{"acme", ""}
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	epoch := t0.Add(-time.Minute)
	q.noteRecent(k, &flight{at: t0, seq: 1, res: &tenantSnap{sinceEpoch: 10, epoch: epoch, recent: 60, recentCounted: true}}, time.Second)
	if got := q.recent[k].rate; got != 1 {
		t.Fatalf("first check's rate %v, want the minute's average 1/s", got)
	}
	q.noteRecent(k, &flight{at: t0.Add(500 * time.Millisecond), seq: 2, res: &tenantSnap{sinceEpoch: 110, epoch: epoch, recent: 160, recentCounted: true}}, time.Second)
	if got := q.recent[k].rate; got != 200 {
		t.Fatalf("rate %v, want 100 starts in 0.5 s = 200/s", got)
	}
	b := fastSetup(t, authz.Limits{})
	l := authz.Limits{RunningJobsPerTenant: 1000, EpisodesInFlightPerTenant: 4096, RunningJobsPerOwner: 200, StartsPerMinutePerOwner: 600}
	far, ok := b.adm.farLimits(l, 300, 2)
	want := authz.Limits{RunningJobsPerTenant: 1000 - 100 - 300, EpisodesInFlightPerTenant: 4096 - 16*64 - 300*2,
		RunningJobsPerOwner: 200 - 20, StartsPerMinutePerOwner: 600 - 60}
	if !ok || far != want {
		t.Fatalf("farLimits = %+v (ok %v), want %+v", far, ok, want)
	}
	if _, ok := b.adm.farLimits(l, 900, 1); ok {
		t.Fatal("a rate that leaves no headroom still allows recent figures")
	}
}

// An owner's figures serve for ownerFreshFactor × QuotaFresh: a replica holding many keys
// sweeps only what is older than that, not an owner's figures a few seconds old.
func TestFastSweepKeepsOwnersFigures(t *testing.T) {
	b := fastSetup(t, authz.Limits{})
	q := &b.adm.quotas
	t0 := b.clock()
	ann := flightKey{"acme", "ann"}
	q.noteRecent(ann, &flight{at: t0, seq: 1, res: &ownerSnap{}}, b.adm.keepRecent())
	for i := range 300 {
		q.noteRecent(flightKey{"acme", "o" + strconv.Itoa(i)}, &flight{at: t0.Add(2 * time.Second), seq: uint64(2 + i), res: &ownerSnap{}}, b.adm.keepRecent())
	}
	if _, ok := q.recent[ann]; !ok {
		t.Fatal("ann's 2 s old figures were swept; they serve for 5 s")
	}
	q.noteRecent(flightKey{"acme", "late"}, &flight{at: t0.Add(6 * time.Second), seq: 400, res: &ownerSnap{}}, b.adm.keepRecent())
	if _, ok := q.recent[ann]; ok {
		t.Fatal("ann's 6 s old figures were kept")
	}
}

// An owner-groups flight halves each group whose count reaches a quarter of the owner limit's
// far value, down to single owners: a heavy owner ends with its own count, and every other
// owner's figures are its group's (each at least its own), in a few counts.
func TestOwnerGroupsSplitAHeavyOwner(t *testing.T) {
	l := authz.DefaultTenants().Defaults.Limits
	l.StartsPerMinutePerOwner = -1 // one measure: a count per group
	b := fastSetup(t, l)
	far, _ := b.adm.farLimits(l, 0, 1)
	target := far.RunningJobsPerOwner / ownersCountedFrom
	var owners []string
	for i := range 16 {
		o := "light" + strconv.Itoa(i)
		owners = append(owners, o)
		b.seed(t, o, 3)
	}
	owners = append(owners, "heavy")
	b.seed(t, "heavy", target+5)
	calls := b.counts()
	fl := &flight{owners: owners}
	g, err := b.adm.measureOwners(context.Background(), flightKey{"acme", ownersGroup}, b.adm.opts.Tenants.For("acme"), fl)
	if err != nil {
		t.Fatal(err)
	}
	if h := g.owners["heavy"]; h == nil || !h.runningCounted || h.running != target+5 {
		t.Fatalf("heavy owner's figures %+v, want its own count %d", h, target+5)
	}
	for _, o := range owners[:16] {
		if s := g.owners[o]; s == nil || !s.runningCounted || s.running < 3 || s.running >= target {
			t.Errorf("%s's figures %+v: want its group's count, at least its own 3 and under %d", o, s, target)
		}
	}
	// 17 owners, one group (no tenant figures to size them): halved on the heavy owner's side
	// down to it (17, 9, 5, 3, 2, 1), each half counted: 1 + 2×5.
	if n := b.counts() - calls; n != 11 {
		t.Errorf("%d counts for 17 owners, want 11", n)
	}
}
