package frontend

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/workflows"
)

// The store suite: one set of expectations about List and Count of a jobstore.Filter, run against
// every jobstore.Store (as river runs one driver suite on every driver), so that the in-memory store
// the core's unit tests use answers as the Temporal store does. Each store seeds the same jobs
// its own way (storeHarness.seed).

// suiteJob is a job the suite seeds: its current run and, with continued, one earlier run that
// continued as new.
type suiteJob struct {
	tenant, id, owner, kind string
	// end is how the current run stands: runRunning (unfinished), runCompleted, runTerminated
	// or runCanceled.
	end jobstore.RunState
	// phase is an unfinished run's JobStatus; answerer its open request's (awaiting_input).
	phase    workflows.Status
	answerer string
	// slots is the JobSlots indexed at its start (0: none).
	slots int
	// continued: the job continued as new once before this run.
	continued bool
}

// storeHarness is a store under the suite.
type storeHarness struct {
	store jobstore.Store
	// seed makes jobs, each started after the one before, and returns once List and Count
	// see all of them.
	seed func(t *testing.T, jobs []suiteJob)
}

func TestStoreSuiteMem(t *testing.T) {
	storeSuite(t, memHarness())
}

// memHarness seeds a memStore directly, on a clock a second per start.
func memHarness() storeHarness {
	m := memstore.New()
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return storeHarness{store: m, seed: func(t *testing.T, jobs []suiteJob) {
		for _, s := range jobs {
			clock = clock.Add(time.Second)
			j := &jobstore.Job{ID: s.id, RunID: "run-" + s.id, Tenant: s.tenant, Owner: s.owner, Kind: s.kind, Exec: jobstore.RunRunning,
				SAStatus: s.phase, StartedAt: clock}
			if s.answerer != "" {
				j.NeedsInput = &workflows.NeedsInput{InputID: "in", Approver: authz.ApproverApprover,
					AllowSelf: s.answerer == workflows.AnswererApproverOrOwner}
				if s.answerer == workflows.AnswererOwner {
					j.NeedsInput.Approver = authz.ApproverOwner
				}
			}
			m.Mu.Lock()
			m.Jobs[s.id] = j
			if s.slots > 0 {
				m.JobSlots[j.RunID] = s.slots
			}
			m.Mu.Unlock()
			if s.continued {
				clock = clock.Add(time.Second)
				j = m.ContinueAsNew(s.id, clock)
			}
			if s.end != jobstore.RunRunning {
				clock = clock.Add(time.Second)
				m.Mu.Lock()
				j.Exec, j.ClosedAt = s.end, clock
				m.Mu.Unlock()
			}
		}
	}}
}

// storeSuite runs the suite on h. Its tenant is its own ("st-<test>"), so a shared store
// (Temporal's namespace) holds other tests' jobs besides.
func storeSuite(t *testing.T, h storeHarness) {
	ctx := t.Context()
	ten := "st" + time.Now().Format("150405000000")
	id := func(owner, kind, key string) string { return ten + "/" + kind + "/" + owner + "/" + key }
	running := func(owner, kind, key string, phase workflows.Status, slots int) suiteJob {
		return suiteJob{tenant: ten, id: id(owner, kind, key), owner: owner, kind: kind, end: jobstore.RunRunning, phase: phase, slots: slots}
	}
	closed := func(owner, kind, key string, end jobstore.RunState) suiteJob {
		return suiteJob{tenant: ten, id: id(owner, kind, key), owner: owner, kind: kind, end: end, phase: workflows.StatusRunning}
	}
	awaiting := func(owner, key, answerer string) suiteJob {
		j := running(owner, "export", key, workflows.StatusAwaitingInput, 0)
		j.answerer = answerer
		return j
	}
	can := running("ana", "eval", "can", workflows.StatusRunning, 8)
	can.continued = true
	first := []suiteJob{
		running("ana", "eval", "r4", workflows.StatusRunning, 4),
		running("ana", "eval", "q1", workflows.StatusQueued, 1),
		running("bo", "eval", "legacy", workflows.StatusRunning, 0),
		awaiting("ana", "w-appr", workflows.AnswererApprover),
		awaiting("bo", "w-self", workflows.AnswererApproverOrOwner),
		awaiting("bo", "w-appr", workflows.AnswererApprover),
		awaiting("bo", "w-own", workflows.AnswererOwner),
		closed("ana", "eval", "done", jobstore.RunCompleted),
		closed("bo", "eval", "term", jobstore.RunTerminated),
		closed("ana", "export", "cancelled", jobstore.RunCanceled),
		can,
		// Another tenant's: never selected.
		{tenant: ten + "x", id: ten + "x/eval/ana/r", owner: "ana", kind: "eval", end: jobstore.RunRunning, phase: workflows.StatusRunning, slots: 4},
	}
	h.seed(t, first)
	// since lies after every start of first and before every start of later.
	var latest time.Time
	for _, j := range page(t, h, jobstore.Filter{Tenant: ten}) {
		if j.StartedAt.After(latest) {
			latest = j.StartedAt
		}
	}
	since := latest.Add(time.Millisecond)
	time.Sleep(5 * time.Millisecond) // a clock a store reads (Temporal's) passes since
	later := []suiteJob{running("ana", "eval", "later", workflows.StatusRunning, 2), closed("bo", "export", "later", jobstore.RunCompleted)}
	h.seed(t, later)

	all := []string{}
	for _, j := range append(slices.Clone(first[:len(first)-1]), later...) {
		all = append(all, j.id)
	}
	for _, c := range []struct {
		name string
		f    jobstore.Filter
		want []string // job IDs, a run each (the continued job's twice with RunsAll)
	}{
		{"tenant, every run", jobstore.Filter{Tenant: ten}, append(slices.Clone(all), can.id)},
		{"latest runs", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsLatest}, all},
		{"owner", jobstore.Filter{Tenant: ten, Owner: "bo", Runs: jobstore.RunsLatest},
			[]string{id("bo", "eval", "legacy"), id("bo", "export", "w-self"), id("bo", "export", "w-appr"), id("bo", "export", "w-own"), id("bo", "eval", "term"), id("bo", "export", "later")}},
		{"kind", jobstore.Filter{Tenant: ten, Kinds: []string{"export"}, Runs: jobstore.RunsLatest, Owner: "ana"},
			[]string{id("ana", "export", "w-appr"), id("ana", "export", "cancelled")}},
		{"kinds", jobstore.Filter{Tenant: ten, Kinds: []string{"export", "eval"}, Owner: "ana", Runs: jobstore.RunsLatest, Status: workflows.StatusQueued},
			[]string{id("ana", "eval", "q1")}},
		{"status queued", jobstore.Filter{Tenant: ten, Status: workflows.StatusQueued}, []string{id("ana", "eval", "q1")}},
		{"status running", jobstore.Filter{Tenant: ten, Status: workflows.StatusRunning, Runs: jobstore.RunsLatest},
			[]string{id("ana", "eval", "r4"), id("bo", "eval", "legacy"), can.id, id("ana", "eval", "later")}},
		{"status awaiting_input", jobstore.Filter{Tenant: ten, Status: workflows.StatusAwaitingInput},
			[]string{id("ana", "export", "w-appr"), id("bo", "export", "w-self"), id("bo", "export", "w-appr"), id("bo", "export", "w-own")}},
		{"status succeeded", jobstore.Filter{Tenant: ten, Status: workflows.StatusSucceeded}, []string{id("ana", "eval", "done"), id("bo", "export", "later")}},
		{"status failed", jobstore.Filter{Tenant: ten, Status: workflows.StatusFailed}, []string{id("bo", "eval", "term")}},
		{"status cancelled", jobstore.Filter{Tenant: ten, Status: workflows.StatusCancelled}, []string{id("ana", "export", "cancelled")}},
		{"answerers", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsLatest, Answerers: []string{workflows.AnswererApproverOrOwner, workflows.AnswererApprover}},
			[]string{id("ana", "export", "w-appr"), id("bo", "export", "w-self"), id("bo", "export", "w-appr")}},
		{"answerers, not bo's own approver requests", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsLatest,
			Answerers: []string{workflows.AnswererApproverOrOwner, workflows.AnswererApprover}, ApproverNot: "bo"},
			[]string{id("ana", "export", "w-appr"), id("bo", "export", "w-self")}},
		{"one answerer", jobstore.Filter{Tenant: ten, Answerers: []string{workflows.AnswererOwner}}, []string{id("bo", "export", "w-own")}},
		{"unfinished", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, Owner: "ana"},
			[]string{id("ana", "eval", "r4"), id("ana", "eval", "q1"), id("ana", "export", "w-appr"), can.id, id("ana", "eval", "later")}},
		{"continued", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsContinued}, []string{can.id}},
		{"ids", jobstore.Filter{Tenant: ten, IDs: []string{id("ana", "eval", "r4"), can.id, "elsewhere/eval/ana/r4"}, Runs: jobstore.RunsLatest},
			[]string{id("ana", "eval", "r4"), can.id}},
		{"exclude ids", jobstore.Filter{Tenant: ten, Owner: "ana", Runs: jobstore.RunsUnfinished, ExcludeIDs: []string{id("ana", "eval", "r4"), can.id}},
			[]string{id("ana", "eval", "q1"), id("ana", "export", "w-appr"), id("ana", "eval", "later")}},
		// The quota counts: running evals by JobSlots ranges, those without, starts since.
		{"slots =", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, Kinds: []string{"eval"}, SlotsMin: 4, SlotsMax: 4}, []string{id("ana", "eval", "r4")}},
		{"slots between", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, Kinds: []string{"eval"}, SlotsMin: 1, SlotsMax: 4},
			[]string{id("ana", "eval", "r4"), id("ana", "eval", "q1"), id("ana", "eval", "later")}},
		{"slots at least", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, Kinds: []string{"eval"}, SlotsMin: 5}, []string{can.id}},
		{"slots at least, every run", jobstore.Filter{Tenant: ten, SlotsMin: 5}, []string{can.id, can.id}},
		{"slots at most", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, SlotsMax: 1}, []string{id("ana", "eval", "q1")}},
		{"no slots", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, Kinds: []string{"eval"}, NoSlots: true}, []string{id("bo", "eval", "legacy")}},
		{"started since", jobstore.Filter{Tenant: ten, StartedSince: since}, []string{id("ana", "eval", "later"), id("bo", "export", "later")}},
		{"created since (owner)", jobstore.Filter{Tenant: ten, Owner: "ana", Runs: jobstore.RunsLatest, StartedSince: since}, []string{id("ana", "eval", "later")}},
		{"started before, continued since", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsContinued, StartedBefore: since, ClosedSince: since.Add(-time.Hour)}, []string{can.id}},
		{"closed since", jobstore.Filter{Tenant: ten, ClosedSince: since}, []string{id("bo", "export", "later")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, j := range page(t, h, c.f) {
				got = append(got, j.ID)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(c.want))
			if !slices.Equal(got, want) {
				t.Errorf("listed\n %q\nwant\n %q", got, want)
			}
			n, err := h.store.Count(ctx, c.f)
			if err != nil || n != len(want) {
				t.Errorf("count %d, %v; want %d", n, err, len(want))
			}
		})
	}

	t.Run("order and paging", func(t *testing.T) {
		js := page(t, h, jobstore.Filter{Tenant: ten, Runs: jobstore.RunsLatest})
		for i := 1; i < len(js); i++ {
			a, b := js[i-1], js[i]
			aOpen, bOpen := a.Exec == jobstore.RunRunning, b.Exec == jobstore.RunRunning
			switch {
			case !aOpen && bOpen:
				t.Fatalf("closed %s before unfinished %s", a.ID, b.ID)
			case aOpen && bOpen && a.StartedAt.Before(b.StartedAt):
				t.Fatalf("unfinished %s (started %s) before newer %s (%s)", a.ID, a.StartedAt, b.ID, b.StartedAt)
			case !aOpen && !bOpen && a.ClosedAt.Before(b.ClosedAt):
				t.Fatalf("closed %s (closed %s) before later closed %s (%s)", a.ID, a.ClosedAt, b.ID, b.ClosedAt)
			}
		}
		if _, _, err := h.store.List(ctx, jobstore.Filter{Tenant: ten}, 2, []byte("not a token")); !errors.Is(err, jobstore.ErrPageToken) {
			t.Fatalf("a token the store never gave: %v, want errPageToken", err)
		}
	})

	t.Run("invalid filters", func(t *testing.T) {
		for _, f := range []jobstore.Filter{{}, {Tenant: ten, Owner: `a\b`}, {Tenant: ten, Kinds: []string{"nope"}}, {Tenant: ten, Status: "done"},
			{Tenant: ten, Answerers: []string{"anyone"}}, {Tenant: ten, NoSlots: true, SlotsMin: 1}, {Tenant: ten, IDs: []string{"a\nb"}}} {
			if _, err := h.store.Count(ctx, f); err == nil {
				t.Errorf("%+v: counted", f)
			}
			if _, _, err := h.store.List(ctx, f, 10, nil); err == nil {
				t.Errorf("%+v: listed", f)
			}
		}
	})
}

// page lists every run f selects, two a page to the end, and checks no run is listed twice.
func page(t *testing.T, h storeHarness, f jobstore.Filter) []*jobstore.Job {
	t.Helper()
	var out []*jobstore.Job
	seen := map[string]bool{}
	var token []byte
	for range 100 {
		js, next, err := h.store.List(t.Context(), f, 2, token)
		if err != nil {
			t.Fatalf("list %+v: %v", f, err)
		}
		if len(js) > 2 {
			t.Fatalf("a page of %d rows, asked 2", len(js))
		}
		for _, j := range js {
			if seen[j.RunID] {
				t.Fatalf("run %s (%s) listed twice", j.RunID, j.ID)
			}
			seen[j.RunID] = true
			out = append(out, j)
		}
		if token = next; len(token) == 0 {
			return out
		}
	}
	t.Fatal("more than 100 pages")
	return nil
}
