package tests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// quotaBundle is a deployment (two replicas, no worker: jobs stay unfinished) whose tenant
// "q-<hex>" is its own, with limits l and everything else unlimited. Its quota checks may take
// up to a minute: these tests assert exact counts, and on a loaded machine a visibility count
// past the default 2 s budget would hand the start to --quota-degraded, which admits within an
// overshoot (the likeliest reading of TestQuotas/EpisodesInFlightPerTenant admitting an
// over-limit start once in a full run at load 18). The degraded policy has its own tests
// (frontend/quota).
func quotaBundle(t *testing.T, l authz.Limits) (*testBundle, string) {
	t.Helper()
	tenant := "q-" + randHex(4)
	un := authz.Unlimited()
	for _, v := range []*int{&l.RunningJobsPerOwner, &l.RunningJobsPerTenant, &l.EpisodesInFlightPerTenant, &l.StartsPerMinutePerOwner} {
		if *v == 0 {
			*v = -1
		}
	}
	un.Tenants = map[string]authz.TenantPolicy{tenant: {Limits: l}}
	return setup(t, setupOpts{noWorker: true, tenants: &un, quotaBudget: time.Minute}), tenant
}

func quotaWriter(tenant, sub string) principal {
	return principal{tenant, sub, []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
}

// wantQuota checks o is quota_exceeded for limit, retryable, and that no job exists for key.
func wantQuota(t *testing.T, b *testBundle, o outcome, tenant, owner, key, limit string) *jobcore.ToolError {
	t.Helper()
	if o.Err == nil || o.Err.Code != jobcore.CodeQuotaExceeded {
		t.Fatalf("start %s: want quota_exceeded (%s), got %+v %s", key, limit, o.Err, o.Raw)
	}
	if !o.Err.Retryable || !strings.HasPrefix(o.Err.Message, limit+":") {
		t.Fatalf("quota_exceeded: want retryable and naming %s, got %+v", limit, o.Err)
	}
	_, err := b.temporal.DescribeWorkflowExecution(context.Background(), jobID(tenant, workflows.KindEval, owner, key), "")
	var nf *serviceerror.NotFound
	if !errors.As(err, &nf) {
		t.Fatalf("a workflow exists for refused key %s (describe: %v)", key, err)
	}
	return o.Err
}

// terminate ends a job's workflow as an operator would, freeing its quota.
func terminate(t *testing.T, b *testBundle, id string) {
	t.Helper()
	must(t, b.temporal.TerminateWorkflow(context.Background(), id, "", "test frees quota"))
}

func TestQuotas(t *testing.T) {
	t.Parallel()

	t.Run("RunningJobsPerOwner", func(t *testing.T) {
		t.Parallel()
		b, tenant := quotaBundle(t, authz.Limits{RunningJobsPerOwner: 2})
		cs := b.session(quotaWriter(tenant, "ann"), 0, "")
		v1 := mustView(t, call(t, cs, "start_eval", startArgs("k1", 1, nil)))
		mustView(t, call(t, cs, "start_eval", startArgs("k2", 1, nil)))
		wantQuota(t, b, call(t, cs, "start_eval", startArgs("k3", 1, nil)), tenant, "ann", "k3", "running_jobs_per_owner")

		// An idempotent retry of a job that exists is answered with it, quota or not.
		again := mustView(t, call(t, cs, "start_eval", startArgs("k1", 1, nil)))
		if again.JobID != v1.JobID || again.Created == nil || *again.Created {
			t.Fatalf("retry of k1 over quota: want the same job, created false; got %+v", again)
		}
		// The limit is the owner's: another owner of the tenant still starts.
		other := b.session(quotaWriter(tenant, "ben"), 1, "")
		mustView(t, call(t, other, "start_eval", startArgs("k4", 1, nil)))

		// Once a job finishes, the same call passes (no per-process counter to reset).
		terminate(t, b, v1.JobID)
		eventually(t, 10*time.Second, "k3 admitted after a job finished", func() bool {
			return call(t, cs, "start_eval", startArgs("k3", 1, nil)).Err == nil
		})
	})

	t.Run("RunningJobsPerTenant", func(t *testing.T) {
		t.Parallel()
		b, tenant := quotaBundle(t, authz.Limits{RunningJobsPerTenant: 2})
		ann := b.session(quotaWriter(tenant, "ann"), 0, "")
		ben := b.session(quotaWriter(tenant, "ben"), 1, "")
		mustView(t, call(t, ann, "start_eval", startArgs("a1", 1, nil)))
		waitVisible(t, b, tenant, 1) // ann started on the other replica (see TwoReplicasSequential)
		mustView(t, call(t, ben, "start_eval", startArgs("b1", 1, nil)))
		te := wantQuota(t, b, call(t, ben, "start_eval", startArgs("b2", 1, nil)), tenant, "ben", "b2", "running_jobs_per_tenant")
		if te.RetryAfterMS != 0 {
			t.Fatalf("running jobs: when one finishes is unknown, want no retry_after_ms; got %d", te.RetryAfterMS)
		}
		// Awaiting approval counts as running: another tenant is not affected.
		otherTenant := b.session(quotaWriter("q-"+randHex(4), "cy"), 0, "")
		mustView(t, call(t, otherTenant, "start_eval", startArgs("c1", 1, nil)))
	})

	t.Run("AwaitingInputCounts", func(t *testing.T) {
		t.Parallel()
		b, tenant := quotaBundle(t, authz.Limits{RunningJobsPerOwner: 1})
		b.startWorker()
		cs := b.session(quotaWriter(tenant, "ann"), 0, "")
		v := mustView(t, call(t, cs, "start_eval", startArgs("big", 101, nil)))
		waitStatus(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
		wantQuota(t, b, call(t, cs, "start_eval", startArgs("next", 1, nil)), tenant, "ann", "next", "running_jobs_per_owner")
	})

	t.Run("EpisodesInFlightPerTenant", func(t *testing.T) {
		t.Parallel()
		b, tenant := quotaBundle(t, authz.Limits{EpisodesInFlightPerTenant: 10})
		cs := b.session(quotaWriter(tenant, "ann"), 0, "")
		args := func(key string, conc int) map[string]any {
			a := startArgs(key, 50, nil)
			a["concurrency"] = conc
			return a
		}
		mustView(t, call(t, cs, "start_eval", args("e6", 6)))
		te := wantQuota(t, b, call(t, cs, "start_eval", args("e6b", 6)), tenant, "ann", "e6b", "episodes_in_flight_per_tenant")
		if !strings.Contains(te.Message, "at most 4") {
			t.Fatalf("want the message to say how much is left (4), got %q", te.Message)
		}
		mustView(t, call(t, cs, "start_eval", args("e4", 4)))
		wantQuota(t, b, call(t, cs, "start_eval", args("e1", 1)), tenant, "ann", "e1", "episodes_in_flight_per_tenant")
	})

	// The slots running evals hold are summed by visibility counts of JobSlots (set at every
	// eval's start), exactly where the limit needs it, with evals that carry no JobSlots (started
	// before it existed) read from their memo: a start that fits exactly is admitted, one slot
	// more is refused, whoever's evals they are.
	t.Run("EpisodesByJobSlots", func(t *testing.T) {
		t.Parallel()
		b, tenant := quotaBundle(t, authz.Limits{EpisodesInFlightPerTenant: 100})
		args := func(key string, conc int) map[string]any {
			a := startArgs(key, 50, nil)
			a["concurrency"] = conc
			return a
		}
		ann, ben := b.session(quotaWriter(tenant, "ann"), 0, ""), b.session(quotaWriter(tenant, "ben"), 1, "")
		mustView(t, call(t, ann, "start_eval", args("a30", 30)))
		mustView(t, call(t, ben, "start_eval", args("b30", 30)))
		mustView(t, call(t, ann, "start_eval", args("a17", 17)))
		fillJobs(t, b, tenant, "cy", 2, 5, false) // 2 running evals of 5 slots without JobSlots: 87 held
		for q, want := range map[string]int64{"JobSlots = 30": 2, "JobSlots = 17": 1, "JobSlots IS NULL": 2} {
			resp, err := b.temporal.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
				Namespace: namespace, Query: "JobTenant = '" + tenant + "' AND " + q})
			must(t, err)
			if resp.GetCount() != want {
				t.Fatalf("%s: %d evals, want %d", q, resp.GetCount(), want)
			}
		}
		waitVisible(t, b, tenant, 5)
		mustView(t, call(t, ben, "start_eval", args("b13", 13))) // 87 + 13 = 100: fits exactly
		// ann's check runs on the other replica, which counts b13 once visibility shows it (the
		// documented cross-replica lag; within one replica a reservation would count it).
		waitVisible(t, b, tenant, 6)
		te := wantQuota(t, b, call(t, ann, "start_eval", args("a1", 1)), tenant, "ann", "a1", "episodes_in_flight_per_tenant")
		if !strings.Contains(te.Message, "hold 100 episode slots") {
			t.Fatalf("want the message to say the tenant holds 100, got %q", te.Message)
		}
	})

	t.Run("StartsPerMinutePerOwner", func(t *testing.T) {
		t.Parallel()
		b, tenant := quotaBundle(t, authz.Limits{StartsPerMinutePerOwner: 2})
		cs := b.session(quotaWriter(tenant, "ann"), 0, "")
		for _, k := range []string{"s1", "s2"} {
			v := mustView(t, call(t, cs, "start_eval", startArgs(k, 1, nil)))
			terminate(t, b, v.JobID) // finished jobs still count as starts
		}
		var te *jobcore.ToolError
		eventually(t, 10*time.Second, "both starts visible", func() bool {
			o := call(t, cs, "start_eval", startArgs("s3", 1, nil))
			if o.Err == nil {
				t.Fatalf("third start in a minute admitted")
			}
			te = wantQuota(t, b, o, tenant, "ann", "s3", "starts_per_minute_per_owner")
			return te.RetryAfterMS > 0 // known once visibility shows both starts
		})
		if te.RetryAfterMS > 60_000 {
			t.Fatalf("retry_after_ms %d exceeds the one-minute window", te.RetryAfterMS)
		}
		// Another owner has a window of its own.
		mustView(t, call(t, b.session(quotaWriter(tenant, "ben"), 1, ""), "start_eval", startArgs("s4", 1, nil)))
	})

	t.Run("TwoReplicasSequential", func(t *testing.T) {
		t.Parallel()
		// Starts alternate between the replicas: a per-process counter would admit 2 per
		// replica; the shared count admits exactly the limit.
		startAlternating(t, 3, 8, "r")
	})

	t.Run("TwoReplicasSequentialFar", func(t *testing.T) {
		t.Parallel()
		// A limit large enough for starts to be decided on recent figures (quota/fast.go):
		// far from it, a replica admits on its last check's figures; within the margin each
		// start waits for a check made after it arrived, so alternating replicas still admit
		// exactly the limit, and a tenant at its limit is refused on both.
		startAlternating(t, 40, 48, "f")
	})

	t.Run("TwoReplicasConcurrent", func(t *testing.T) {
		t.Parallel()
		// Both replicas take a burst at once. Within a replica, reservations keep the count
		// exact; across replicas, a start the other replica admitted in the same instant may
		// not be visible yet. The bound (frontend/README.md "Fairness and quotas"): at most the limit per replica, i.e. the
		// overshoot is at most the starts in flight on the other replica.
		const limit, perReplica = 3, 6
		b, tenant := quotaBundle(t, authz.Limits{RunningJobsPerTenant: limit})
		var mu sync.Mutex
		admitted := map[int]int{}
		var wg sync.WaitGroup
		for r := range 2 {
			cs := b.session(quotaWriter(tenant, "ann"), r, "")
			for i := range perReplica {
				wg.Go(func() {
					o := call(t, cs, "start_eval", startArgs(fmt.Sprintf("c%d-%d", r, i), 1, nil))
					if o.Err != nil && o.Err.Code != jobcore.CodeQuotaExceeded {
						t.Errorf("start: %+v", o.Err)
					}
					if o.Err == nil {
						mu.Lock()
						admitted[r]++
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		total := admitted[0] + admitted[1]
		t.Logf("limit %d, %d concurrent starts on each of 2 replicas: admitted %d (%d + %d), overshoot %d",
			limit, perReplica, total, admitted[0], admitted[1], max(total-limit, 0))
		if admitted[0] > limit || admitted[1] > limit {
			t.Fatalf("one replica admitted more than the limit: %v", admitted)
		}
		if total < limit {
			t.Fatalf("admitted %d < limit %d: quotas refused starts that fit", total, limit)
		}
	})
}

// fillJobs starts n eval workflows of tenant/owner the way start_eval does (search attributes,
// memo created_at and slots) straight through the Temporal client, on a task queue no worker
// serves (they stay unfinished; finished ones are terminated at once: they still count as
// starts), and waits until visibility shows them all.
func fillJobs(t testing.TB, b *testBundle, tenant, owner string, n, slots int, finished bool) {
	t.Helper()
	run := randHex(3)
	tq := "tq-fill-" + run
	q := "JobTenant = '" + tenant + "' AND JobOwner = '" + owner + "'"
	if finished {
		q += " AND ExecutionStatus = 'Terminated'"
	}
	count := func() int64 {
		resp, err := b.temporal.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: q})
		must(t, err)
		return resp.GetCount()
	}
	before := count()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			now := time.Now().UTC()
			args := workflows.EvalArgs{Suite: "demo", Episodes: slots, Concurrency: slots, Params: map[string]any{}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := b.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: fmt.Sprintf("%s/%s/fill-%s-%d", tenant, workflows.KindEval, run, i), TaskQueue: tq,
				TypedSearchAttributes: temporal.NewSearchAttributes(
					workflows.SAJobTenant.ValueSet(tenant), workflows.SAJobOwner.ValueSet(owner),
					workflows.SAJobKind.ValueSet(workflows.KindEval), workflows.SAJobStatus.ValueSet(string(workflows.StatusQueued))),
				Memo: map[string]any{workflows.MemoInputHash: workflows.Digest(args), workflows.MemoCreatedAt: now,
					workflows.MemoSlots: slots, workflows.MemoProgress: workflows.Progress{Total: slots, Unit: "episodes", Message: "queued", AsOf: now}},
			}, workflows.EvalWorkflowName, workflows.EvalInput{Tenant: tenant, Owner: owner, Args: args})
			if err == nil && finished {
				err = b.temporal.TerminateWorkflow(ctx, fmt.Sprintf("%s/%s/fill-%s-%d", tenant, workflows.KindEval, run, i), "", "fill")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	eventually(t, 30*time.Second, "filled jobs visible", func() bool {
		return count() >= before+int64(n)
	})
}

// A burst of starts against a tenant at a limit, which takes many rows to reach (so listing
// them per start is what made it an outage): every start is answered quota_exceeded, quickly,
// on both replicas; none times out into `unavailable`; nothing is started.
func TestQuotaBurstNearLimit(t *testing.T) {
	t.Parallel()
	const held, burst = 300, 24
	// Generous for a loaded 2-core machine; the check itself answers within milliseconds.
	const within = 3 * time.Second
	run := func(t *testing.T, l authz.Limits, args map[string]any, limit string, retryAfter bool) {
		b, tenant := quotaBundle(t, l)
		fillJobs(t, b, tenant, "ann", held, 1, false)
		cs := []*mcp.ClientSession{b.session(quotaWriter(tenant, "ann"), 0, ""), b.session(quotaWriter(tenant, "ann"), 1, "")}
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		for i := range burst {
			wg.Go(func() {
				a := maps.Clone(args)
				a["idempotency_key"] = fmt.Sprintf("burst-%d", i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				t0 := time.Now()
				res, err := cs[i%2].CallTool(ctx, &mcp.CallToolParams{Name: "start_eval", Arguments: a})
				d := time.Since(t0)
				if err != nil {
					t.Errorf("start %d: %v", i, err)
					return
				}
				var v jobcore.JobView
				te, err := jobcore.ParseResult(res, &v)
				switch {
				case err != nil:
					t.Errorf("start %d: %v", i, err)
				case te == nil:
					t.Errorf("start %d over the limit admitted: %s", i, v.JobID)
				case te.Code != jobcore.CodeQuotaExceeded || !strings.HasPrefix(te.Message, limit+":"):
					t.Errorf("start %d: want quota_exceeded (%s), got %+v after %s", i, limit, te, d)
				case retryAfter && (te.RetryAfterMS <= 0 || te.RetryAfterMS > 60_000):
					t.Errorf("start %d: want retry_after_ms within the minute, got %d", i, te.RetryAfterMS)
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(lat)
		t.Logf("%d concurrent starts at %s with %d jobs held: answered in p50 %s, max %s", burst, limit, held, lat[len(lat)/2], lat[len(lat)-1])
		if lat[len(lat)-1] > within {
			t.Errorf("slowest refusal took %s, want within %s", lat[len(lat)-1], within)
		}
		resp, err := b.temporal.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: namespace, Query: "JobTenant = '" + tenant + "'"})
		must(t, err)
		if resp.GetCount() != held {
			t.Fatalf("the tenant has %d jobs after the refused burst, want %d", resp.GetCount(), held)
		}
	}
	t.Run("StartsPerMinutePerOwner", func(t *testing.T) {
		t.Parallel()
		run(t, authz.Limits{StartsPerMinutePerOwner: held}, startArgs("", 1, nil), "starts_per_minute_per_owner", true)
	})
	t.Run("EpisodesInFlightPerTenant", func(t *testing.T) {
		t.Parallel()
		// The running evals hold one slot each: held+4 are free-ish, the burst asks for 10 each.
		a := startArgs("", 50, nil)
		a["concurrency"] = 10
		run(t, authz.Limits{EpisodesInFlightPerTenant: held + 4}, a, "episodes_in_flight_per_tenant", false)
	})
}

// waitVisible waits until visibility shows at least n jobs of tenant: what another replica's
// quota check can count.
func waitVisible(t testing.TB, b *testBundle, tenant string, n int) {
	t.Helper()
	q := "JobTenant = '" + tenant + "'"
	eventually(t, 30*time.Second, fmt.Sprintf("%d jobs of %s in visibility", n, tenant), func() bool {
		resp, err := b.temporal.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: q})
		must(t, err)
		return resp.GetCount() >= int64(n)
	})
}

// startAlternating starts n evals of one owner of a tenant limited to limit running jobs,
// alternately on the two replicas, each after the previous admitted one is visible, and fails
// t unless exactly limit are admitted and none is refused before that.
func startAlternating(t *testing.T, limit, n int, prefix string) {
	b, tenant := quotaBundle(t, authz.Limits{RunningJobsPerTenant: limit})
	cs := []*mcp.ClientSession{b.session(quotaWriter(tenant, "ann"), 0, ""), b.session(quotaWriter(tenant, "ann"), 1, "")}
	admitted := 0
	for i := range n {
		o := call(t, cs[i%2], "start_eval", startArgs(fmt.Sprintf("%s%d", prefix, i), 1, nil))
		switch {
		case o.Err == nil:
			admitted++
			// Sequential means: the other replica's next start comes after this one is in
			// visibility, the only state the replicas share. Visibility lags a start by
			// milliseconds, more on a loaded machine; a start inside that lag is the
			// concurrent case, with its documented bound.
			waitVisible(t, b, tenant, admitted)
		case o.Err.Code != jobcore.CodeQuotaExceeded:
			t.Fatalf("start %s%d: %+v", prefix, i, o.Err)
		case admitted < limit:
			t.Fatalf("start %s%d refused at %d of %d: %s", prefix, i, admitted, limit, o.Err.Message)
		}
	}
	if admitted != limit {
		t.Fatalf("alternating replicas admitted %d jobs, want exactly %d", admitted, limit)
	}
}
