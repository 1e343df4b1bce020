package tests

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// Task queue fairness (frontend/README.md "Fairness"): every job's tasks carry its tenant as fairness key
// and the tenant's configured weight, and the embedded server dispatches backlogged tasks by
// weighted round robin over the keys. These tests measure it against the real stack: MCP
// frontends, the real worker wiring with few episode slots, the embedded server; and compare
// with the server's one task queue without fairness (unfairTaskQueue).
//
// They are not parallel: they time dispatch, and running alone in the package's sequential
// phase keeps other tests' load out of the figures. Each uses tenants of its own ("fa-<hex>").

const (
	// fairSlots is the worker's episode slots: far fewer than the loaded tenant's demand.
	fairSlots = 16
	// fairEpisodeMS is every episode's duration: long enough that the worker's slots, not the
	// server, bound throughput on two loaded cores (16 slots / 400 ms = 40 episodes/s), and
	// that the latency a backlog adds to each dispatch (a persisted task instead of a sync
	// match, ~50-100 ms) stays small next to an episode; short enough for the file to run in
	// about a minute.
	fairEpisodeMS = 400
	// The heavy tenant: fairHeavyEvals evals of 2,000 episodes at concurrency 64 keep about
	// 3 × 64 episode tasks outstanding, so a backlog of ~170 waits behind 16 slots.
	fairHeavyEvals       = 3
	fairHeavyEpisodes    = 2000
	fairHeavyConcurrency = 64
	// The small job: 40 episodes, 4 at a time (10 rounds). Its demand (4 of 16 slots) is below
	// its fair share (half of them, at equal weights), so fairness lets it run as if alone.
	fairSmallEpisodes    = 40
	fairSmallConcurrency = 4
	// fairStarvedAfter bounds the wait for the small job on the task queue without fairness, in
	// multiples of its idle time: there it would take about 10 × 11 episode durations.
	fairStarvedAfter = 5
)

// fairSuites has a demo suite without approval (the demo suite asks above 100 episodes).
const fairSuites = `{"suites":[{"name":"bulk","kind":"demo","approval_threshold":0}]}`

// episodeCounter counts the episodes the worker finished, per tenant (the job ID's first
// segment), and records the fairness each episode task reached the worker with. It is a client
// interceptor that the SDK also applies to workers created from the client.
type episodeCounter struct {
	interceptor.InterceptorBase
	mu      sync.Mutex
	done    map[string]int
	weights map[string]map[float32]bool // tenant → fairness weights its tasks carried
	foreign []string                    // tasks whose fairness key was not their tenant
}

// weightsOf is the set of fairness weights tenant's episode tasks carried.
func (c *episodeCounter) weightsOf(tenant string) map[float32]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.weights[tenant])
}

// check fails t if an episode task carried another fairness key than its tenant's.
func (c *episodeCounter) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.foreign) > 0 {
		t.Errorf("%d episode tasks carried a fairness key other than their tenant, e.g. %s", len(c.foreign), c.foreign[0])
	}
}

func (c *episodeCounter) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &countingActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, c: c}
}

func (c *episodeCounter) count(tenant string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done[tenant]
}

type countingActivity struct {
	interceptor.ActivityInboundInterceptorBase
	c *episodeCounter
}

func (a *countingActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	info := activity.GetInfo(ctx)
	if info.ActivityType.Name == "RunEpisode" && err == nil {
		tenant, _, _ := strings.Cut(info.WorkflowExecution.ID, "/")
		a.c.mu.Lock()
		if a.c.done == nil {
			a.c.done, a.c.weights = map[string]int{}, map[string]map[float32]bool{}
		}
		a.c.done[tenant]++
		if info.Priority.FairnessKey != tenant {
			a.c.foreign = append(a.c.foreign, fmt.Sprintf("%s#%s: key %q", info.WorkflowExecution.ID, info.ActivityID, info.Priority.FairnessKey))
		}
		if a.c.weights[tenant] == nil {
			a.c.weights[tenant] = map[float32]bool{}
		}
		a.c.weights[tenant][info.Priority.FairnessWeight] = true
		a.c.mu.Unlock()
	}
	return res, err
}

// fairWorker starts the real worker wiring on b's task queue (b set up with noWorker) with
// fairSlots episode slots, through a client that counts finished episodes per tenant.
func fairWorker(t *testing.T, b *testBundle) *episodeCounter {
	t.Helper()
	counter := &episodeCounter{}
	copts := client.Options{HostPort: temporalAddr, Namespace: namespace,
		Logger:       sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		Interceptors: []interceptor.ClientInterceptor{counter}}
	if b.dc != nil { // the bundle's payload keys, as its own worker's client has them
		copts.DataConverter, copts.FailureConverter = b.dc, payloadcrypt.NewFailureConverter(b.dc)
	}
	c, err := client.Dial(copts)
	must(t, err)
	t.Cleanup(c.Close)
	w := &app.WorkerMain{Client: c, Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr,
		Namespace: namespace, TaskQueue: b.taskQueue, Payloads: b.payloads()}, SuitesFile: b.suites, MaxConcurrentEpisodes: fairSlots}, ResumeKeys: b.resumeKeys,
		SigningKeys: b.signingKeys}
	must(t, w.Run(context.Background()))
	t.Cleanup(func() { _ = w.Close() })
	t.Cleanup(func() { counter.check(t) })
	return counter
}

func fairTenant(role string) principal {
	return principal{"fa-" + randHex(4), role, []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
}

// startBulk starts an eval of suite bulk with fairEpisodeMS episodes and no failures; it
// returns the job's ID and handle.
func startBulk(t *testing.T, b *testBundle, p principal, episodes, concurrency int) (string, string) {
	t.Helper()
	a := map[string]any{"idempotency_key": "fair-" + randHex(4), "suite": "bulk", "episodes": episodes,
		"concurrency": concurrency, "params": map[string]any{"episode_ms": fairEpisodeMS, "fail_rate": 0}}
	v := mustView(t, call(t, b.session(p, 0, ""), "start_eval", a))
	return v.JobID, v.Handle
}

// runSmall runs the small job as p and returns how long it ran: its workflow's start to
// close as the server recorded them. If it is not finished within limit (0: 90s) it returns
// limit and false, and the job is cancelled at the end of the test.
func runSmall(t *testing.T, b *testBundle, p principal, limit time.Duration) (time.Duration, bool) {
	t.Helper()
	mustFinish := limit == 0
	if mustFinish {
		limit = 90 * time.Second
	}
	id, h := startBulk(t, b, p, fairSmallEpisodes, fairSmallConcurrency)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var res workflows.EvalResult
	for {
		err := b.temporal.GetWorkflow(ctx, id, "").Get(ctx, &res)
		if err == nil {
			break
		}
		if mustFinish {
			t.Fatalf("small job %s: %v", id, err)
		}
		// The server ends a long poll a little before the caller's deadline, so near the
		// limit the wait ends with a cancelled stream rather than ctx's own error: both mean
		// the job was not finished in time. Earlier, a poll cut short is polled again while the
		// job still runs; any other failure is the test's.
		if ctx.Err() != nil || time.Since(start) >= limit-time.Second {
			t.Cleanup(func() { cancelAll(t, b, p, []string{id}, []string{h}) })
			return time.Since(start), false
		}
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, derr := b.temporal.DescribeWorkflowExecution(dctx, id, "")
		dcancel()
		if derr != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("small job %s: %v (describe: %v)", id, err, derr)
		}
	}
	if res.Scored != fairSmallEpisodes {
		t.Fatalf("small job scored %d of %d episodes", res.Scored, fairSmallEpisodes)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := b.temporal.DescribeWorkflowExecution(ctx, id, "")
	must(t, err)
	info := d.GetWorkflowExecutionInfo()
	return info.GetCloseTime().AsTime().Sub(info.GetStartTime().AsTime()), true
}

// activityBacklog is the approximate number of activity tasks waiting in b's task queue.
func activityBacklog(t *testing.T, b *testBundle) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.temporal.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
		Namespace: namespace, TaskQueue: &taskqueuepb.TaskQueue{Name: b.taskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		TaskQueueType: enumspb.TASK_QUEUE_TYPE_ACTIVITY, ReportStats: true})
	must(t, err)
	return resp.GetStats().GetApproximateBacklogCount()
}

// startLoad starts evals big evals as p (fairHeavyEpisodes at fairHeavyConcurrency each); they
// are cancelled, and awaited, when the test ends.
func startLoad(t *testing.T, b *testBundle, p principal, evals int) {
	t.Helper()
	ids, handles := make([]string, 0, evals), make([]string, 0, evals)
	for range evals {
		id, h := startBulk(t, b, p, fairHeavyEpisodes, fairHeavyConcurrency)
		ids, handles = append(ids, id), append(handles, h)
	}
	t.Cleanup(func() { cancelAll(t, b, p, ids, handles) })
}

// waitBacklog waits until each tenant has run a round of episodes and at least backlog
// activity tasks wait for a slot.
func waitBacklog(t *testing.T, b *testBundle, counter *episodeCounter, backlog int64, tenants ...principal) {
	t.Helper()
	eventually(t, 60*time.Second, "the loaded tenants' backlog", func() bool {
		for _, p := range tenants {
			if counter.count(p.tenant) < fairSlots {
				return false
			}
		}
		return activityBacklog(t, b) >= backlog
	})
}

// cancelAll cancels p's jobs and waits until they are finished, so no task of theirs is left
// in the task queue (the unfair one is shared by every run of the test).
func cancelAll(t *testing.T, b *testBundle, p principal, ids, handles []string) {
	t.Helper()
	cs := b.session(p, 0, "")
	for _, h := range handles {
		mustView(t, call(t, cs, "cancel_eval", map[string]any{"handle": h}))
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_ = b.temporal.GetWorkflow(ctx, id, "").Get(ctx, nil)
		cancel()
	}
}

// One tenant's big evals must not starve another tenant's small job: with fairness the small
// job runs about as fast as on an idle system; on the task queue without fairness it waits
// behind the big evals' backlog (the control: it shows the mechanism, not the weather).
func TestFairness_SmallJobNotStarved(t *testing.T) {
	testenv.Heavy(t, "fairness timing test")
	t.Run("Fair", func(t *testing.T) {
		b := setup(t, setupOpts{noWorker: true, suitesJSON: fairSuites})
		counter := fairWorker(t, b)
		big, small := fairTenant("big"), fairTenant("small")
		idle, _ := runSmall(t, b, small, 0)
		startLoad(t, b, big, fairHeavyEvals)
		waitBacklog(t, b, counter, fairHeavyEvals*fairHeavyConcurrency/2, big)
		before := counter.count(big.tenant)
		loaded, _ := runSmall(t, b, small, 0)
		ran := counter.count(big.tenant) - before
		backlog := activityBacklog(t, b)
		t.Logf("fairness on: the small job (%d episodes, %d at a time) took %v alone, %v next to %d evals × %d episodes of another tenant (%.2f×); meanwhile the other tenant ran %d episodes and still had %d waiting",
			fairSmallEpisodes, fairSmallConcurrency, idle.Round(time.Millisecond), loaded.Round(time.Millisecond),
			fairHeavyEvals, fairHeavyEpisodes, float64(loaded)/float64(idle), ran, backlog)
		if ran < fairSlots || backlog < fairSlots {
			t.Fatalf("the other tenant did not keep the worker busy (%d episodes run, %d waiting): nothing was measured", ran, backlog)
		}
		if loaded > 2*idle {
			t.Errorf("with fairness the small job took %v, more than twice its %v alone", loaded, idle)
		}
	})
	t.Run("Unfair", func(t *testing.T) {
		b := setup(t, setupOpts{noWorker: true, suitesJSON: fairSuites, taskQueue: unfairTaskQueue})
		counter := fairWorker(t, b)
		big, small := fairTenant("big"), fairTenant("small")
		idle, _ := runSmall(t, b, small, 0)
		startLoad(t, b, big, fairHeavyEvals)
		waitBacklog(t, b, counter, fairHeavyEvals*fairHeavyConcurrency/2, big)
		loaded, finished := runSmall(t, b, small, fairStarvedAfter*idle)
		verb := "took"
		if !finished {
			verb = "was not finished after"
		}
		t.Logf("fairness off: the small job took %v alone, and %s %v next to the other tenant's evals (%.2f×)",
			idle.Round(time.Millisecond), verb, loaded.Round(time.Millisecond), float64(loaded)/float64(idle))
		if loaded <= 3*idle {
			t.Errorf("without fairness the small job took %v, not clearly starved (alone %v): the control shows nothing", loaded, idle)
		}
	})
}

// Under contention a tenant of weight 2 gets about twice the episode throughput of a tenant of
// weight 1 (weights from the frontend's tenants config).
func TestFairness_WeightsShareSlots(t *testing.T) {
	testenv.Heavy(t, "fairness timing test")
	double, single := fairTenant("double"), fairTenant("single")
	tenants := authz.Unlimited()
	tenants.Tenants = map[string]authz.TenantPolicy{double.tenant: {FairnessWeight: 2}}
	b := setup(t, setupOpts{noWorker: true, suitesJSON: fairSuites, tenants: &tenants})
	counter := fairWorker(t, b)
	// Each tenant keeps 2 × 64 episodes outstanding, far more than the 16 slots: both have a
	// backlog throughout.
	startLoad(t, b, double, 2)
	startLoad(t, b, single, 2)
	waitBacklog(t, b, counter, 2*2*fairHeavyConcurrency-2*fairSlots, double, single)
	d0, s0 := counter.count(double.tenant), counter.count(single.tenant)
	start := time.Now()
	const window = 400 // episodes of both tenants
	eventually(t, 60*time.Second, fmt.Sprintf("%d episodes", window), func() bool {
		return counter.count(double.tenant)-d0+counter.count(single.tenant)-s0 >= window
	})
	d, s := counter.count(double.tenant)-d0, counter.count(single.tenant)-s0
	backlog := activityBacklog(t, b)
	ratio := float64(d) / float64(max(s, 1))
	t.Logf("weights 2:1: in %v the weight-2 tenant ran %d episodes, the weight-1 tenant %d: ratio %.2f (%d tasks still waiting)",
		time.Since(start).Round(time.Millisecond), d, s, ratio, backlog)
	if backlog < 2*fairSlots {
		t.Fatalf("the backlog ran out (%d tasks): the tenants did not contend", backlog)
	}
	if ratio < 1.5 || ratio > 2.7 {
		t.Errorf("throughput ratio %.2f, want about 2 (1.5-2.7)", ratio)
	}
	// The weights the worker saw on the tasks are the configured ones.
	if w := counter.weightsOf(double.tenant); !maps.Equal(w, map[float32]bool{2: true}) {
		t.Errorf("the weight-2 tenant's tasks carried weights %v", w)
	}
	if w := counter.weightsOf(single.tenant); !maps.Equal(w, map[float32]bool{1: true}) {
		t.Errorf("the weight-1 tenant's tasks carried weights %v", w)
	}
}

// The fairness key and weight are on the job's workflow and on every episode activity in
// history: that is what the Temporal Web UI shows on each of them.
func TestFairness_PriorityInHistory(t *testing.T) {
	p := fairTenant("hist")
	tenants := authz.Unlimited()
	tenants.Tenants = map[string]authz.TenantPolicy{p.tenant: {FairnessWeight: 3}}
	b := setup(t, setupOpts{tenants: &tenants})
	cs := b.session(p, 0, "")
	v := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 3, map[string]any{"episode_ms": 0, "fail_rate": 0})))
	waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second)

	started, scheduled := 0, 0
	for _, e := range acHistory(t, b, v.JobID) {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			started++
			pr := e.GetWorkflowExecutionStartedEventAttributes().GetPriority()
			if pr.GetFairnessKey() != p.tenant || pr.GetFairnessWeight() != 3 {
				t.Errorf("workflow started with priority %v, want fairness key %s weight 3", pr, p.tenant)
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := e.GetActivityTaskScheduledEventAttributes()
			if a.GetActivityType().GetName() != "RunEpisode" {
				continue
			}
			scheduled++
			pr := a.GetPriority()
			if pr.GetFairnessKey() != p.tenant || pr.GetFairnessWeight() != 3 {
				t.Errorf("episode %s scheduled with priority %v, want fairness key %s weight 3", a.GetActivityId(), pr, p.tenant)
			}
		}
	}
	if started != 1 || scheduled != 3 {
		t.Fatalf("history has %d starts and %d scheduled episodes, want 1 and 3", started, scheduled)
	}
}
