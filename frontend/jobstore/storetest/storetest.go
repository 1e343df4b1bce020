// Package storetest is the job store suite: one set of expectations about List and Count of a
// jobstore.Filter, run against every jobstore.Store (as river runs one driver suite on every
// driver), so that the in-memory store the core's unit tests use answers as the Temporal store
// does. Each store seeds the same jobs its own way (Harness.Seed): the in-memory store
// directly (frontend/jobstore/memstore's test), the Temporal store with real workflows on the
// embedded server (tests/store_suite_test.go).
package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// The store suite: one set of expectations about List and Count of a jobstore.Filter, run against
// every jobstore.Store (as river runs one driver suite on every driver), so that the in-memory store
// the core's unit tests use answers as the Temporal store does. Each store seeds the same jobs
// its own way (Harness.seed).

// Job is a job the suite seeds: its current run and, with continued, one earlier run that
// continued as new.
type Job struct {
	Tenant, ID, Owner, Kind string
	// End is how the current run stands: RunRunning (unfinished), RunCompleted, RunTerminated
	// or RunCanceled.
	End jobstore.RunState
	// Phase is an unfinished run's JobStatus; Answerer its open request's (awaiting_input).
	Phase    workflows.Status
	Answerer string
	// Slots is the JobSlots indexed at its start (0: none).
	Slots int
	// Continued: the job continued as new once before this run.
	Continued bool
}

// Harness is a store under the suite.
type Harness struct {
	Store jobstore.Store
	// Seed makes jobs, each started after the one before, and returns once List and Count
	// see all of them.
	Seed func(t *testing.T, jobs []Job)
}

// Run runs the suite on h. Its tenant is its own ("st-<test>"), so a shared store
// (Temporal's namespace) holds other tests' jobs besides.
func Run(t *testing.T, h Harness) {
	ctx := t.Context()
	// A tenant of its own per run, to the microsecond: -count=N runs the suite N times in one
	// process against the same namespace (the layout "150405000000" had whole seconds only).
	ten := fmt.Sprintf("st%012d", time.Now().UnixMicro()%1e12)
	id := func(owner, kind, key string) string { return ten + "/" + kind + "/" + owner + "/" + key }
	running := func(owner, kind, key string, phase workflows.Status, slots int) Job {
		return Job{Tenant: ten, ID: id(owner, kind, key), Owner: owner, Kind: kind, End: jobstore.RunRunning, Phase: phase, Slots: slots}
	}
	closed := func(owner, kind, key string, end jobstore.RunState) Job {
		return Job{Tenant: ten, ID: id(owner, kind, key), Owner: owner, Kind: kind, End: end, Phase: workflows.StatusRunning}
	}
	awaiting := func(owner, key, answerer string) Job {
		j := running(owner, "export", key, workflows.StatusAwaitingInput, 0)
		j.Answerer = answerer
		return j
	}
	can := running("ana", "eval", "can", workflows.StatusRunning, 8)
	can.Continued = true
	first := []Job{
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
		{Tenant: ten + "x", ID: ten + "x/eval/ana/r", Owner: "ana", Kind: "eval", End: jobstore.RunRunning, Phase: workflows.StatusRunning, Slots: 4},
	}
	h.Seed(t, first)
	// since lies after every start of first and before every start of later.
	var latest time.Time
	for _, j := range page(t, h, jobstore.Filter{Tenant: ten}) {
		if j.StartedAt.After(latest) {
			latest = j.StartedAt
		}
	}
	since := latest.Add(time.Millisecond)
	time.Sleep(5 * time.Millisecond) // a clock a store reads (Temporal's) passes since
	later := []Job{running("ana", "eval", "later", workflows.StatusRunning, 2), closed("bo", "export", "later", jobstore.RunCompleted)}
	h.Seed(t, later)

	all := []string{}
	for _, j := range append(slices.Clone(first[:len(first)-1]), later...) {
		all = append(all, j.ID)
	}
	for _, c := range []struct {
		name string
		f    jobstore.Filter
		want []string // job IDs, a run each (the continued job's twice with RunsAll)
	}{
		{"tenant, every run", jobstore.Filter{Tenant: ten}, append(slices.Clone(all), can.ID)},
		{"latest runs", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsLatest}, all},
		{"owner", jobstore.Filter{Tenant: ten, Owner: "bo", Runs: jobstore.RunsLatest},
			[]string{id("bo", "eval", "legacy"), id("bo", "export", "w-self"), id("bo", "export", "w-appr"), id("bo", "export", "w-own"), id("bo", "eval", "term"), id("bo", "export", "later")}},
		{"owners (one of them without jobs)", jobstore.Filter{Tenant: ten, Owners: []string{"bo", "cy"}, Runs: jobstore.RunsLatest},
			[]string{id("bo", "eval", "legacy"), id("bo", "export", "w-self"), id("bo", "export", "w-appr"), id("bo", "export", "w-own"), id("bo", "eval", "term"), id("bo", "export", "later")}},
		{"owners and owner", jobstore.Filter{Tenant: ten, Owner: "ana", Owners: []string{"ana", "bo"}, Runs: jobstore.RunsUnfinished},
			[]string{id("ana", "eval", "r4"), id("ana", "eval", "q1"), id("ana", "export", "w-appr"), can.ID, id("ana", "eval", "later")}},
		{"kind", jobstore.Filter{Tenant: ten, Kinds: []string{"export"}, Runs: jobstore.RunsLatest, Owner: "ana"},
			[]string{id("ana", "export", "w-appr"), id("ana", "export", "cancelled")}},
		{"kinds", jobstore.Filter{Tenant: ten, Kinds: []string{"export", "eval"}, Owner: "ana", Runs: jobstore.RunsLatest, Status: workflows.StatusQueued},
			[]string{id("ana", "eval", "q1")}},
		{"status queued", jobstore.Filter{Tenant: ten, Status: workflows.StatusQueued}, []string{id("ana", "eval", "q1")}},
		{"status running", jobstore.Filter{Tenant: ten, Status: workflows.StatusRunning, Runs: jobstore.RunsLatest},
			[]string{id("ana", "eval", "r4"), id("bo", "eval", "legacy"), can.ID, id("ana", "eval", "later")}},
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
			[]string{id("ana", "eval", "r4"), id("ana", "eval", "q1"), id("ana", "export", "w-appr"), can.ID, id("ana", "eval", "later")}},
		{"continued", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsContinued}, []string{can.ID}},
		{"ids", jobstore.Filter{Tenant: ten, IDs: []string{id("ana", "eval", "r4"), can.ID, "elsewhere/eval/ana/r4"}, Runs: jobstore.RunsLatest},
			[]string{id("ana", "eval", "r4"), can.ID}},
		{"exclude ids", jobstore.Filter{Tenant: ten, Owner: "ana", Runs: jobstore.RunsUnfinished, ExcludeIDs: []string{id("ana", "eval", "r4"), can.ID}},
			[]string{id("ana", "eval", "q1"), id("ana", "export", "w-appr"), id("ana", "eval", "later")}},
		// The quota counts: running evals by JobSlots ranges, those without, starts since.
		{"slots =", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, Kinds: []string{"eval"}, SlotsMin: 4, SlotsMax: 4}, []string{id("ana", "eval", "r4")}},
		{"slots between", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, Kinds: []string{"eval"}, SlotsMin: 1, SlotsMax: 4},
			[]string{id("ana", "eval", "r4"), id("ana", "eval", "q1"), id("ana", "eval", "later")}},
		{"slots at least", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, Kinds: []string{"eval"}, SlotsMin: 5}, []string{can.ID}},
		{"slots at least, every run", jobstore.Filter{Tenant: ten, SlotsMin: 5}, []string{can.ID, can.ID}},
		{"slots at most", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, SlotsMax: 1}, []string{id("ana", "eval", "q1")}},
		{"no slots", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsUnfinished, Kinds: []string{"eval"}, NoSlots: true}, []string{id("bo", "eval", "legacy")}},
		{"started since", jobstore.Filter{Tenant: ten, StartedSince: since}, []string{id("ana", "eval", "later"), id("bo", "export", "later")}},
		{"created since (owner)", jobstore.Filter{Tenant: ten, Owner: "ana", Runs: jobstore.RunsLatest, StartedSince: since}, []string{id("ana", "eval", "later")}},
		{"started before, continued since", jobstore.Filter{Tenant: ten, Runs: jobstore.RunsContinued, StartedBefore: since, ClosedSince: since.Add(-time.Hour)}, []string{can.ID}},
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
			n, err := h.Store.Count(ctx, c.f)
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
		if _, _, err := h.Store.List(ctx, jobstore.Filter{Tenant: ten}, 2, []byte("not a token")); !errors.Is(err, jobstore.ErrPageToken) {
			t.Fatalf("a token the store never gave: %v, want errPageToken", err)
		}
	})

	t.Run("invalid filters", func(t *testing.T) {
		for _, f := range []jobstore.Filter{{}, {Tenant: ten, Owner: `a\b`}, {Tenant: ten, Kinds: []string{"nope"}}, {Tenant: ten, Status: "done"},
			{Tenant: ten, Answerers: []string{"anyone"}}, {Tenant: ten, NoSlots: true, SlotsMin: 1}, {Tenant: ten, IDs: []string{"a\nb"}},
			{Tenant: ten, Owners: []string{"ana", `a\b`}}} {
			if _, err := h.Store.Count(ctx, f); err == nil {
				t.Errorf("%+v: counted", f)
			}
			if _, _, err := h.Store.List(ctx, f, 10, nil); err == nil {
				t.Errorf("%+v: listed", f)
			}
		}
	})
}

// page lists every run f selects, two a page to the end, and checks no run is listed twice.
func page(t *testing.T, h Harness, f jobstore.Filter) []*jobstore.Job {
	t.Helper()
	var out []*jobstore.Job
	seen := map[string]bool{}
	var token []byte
	for range 100 {
		js, next, err := h.Store.List(t.Context(), f, 2, token)
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
