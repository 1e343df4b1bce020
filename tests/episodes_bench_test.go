package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

const (
	// episodesBenchDefault is BenchmarkEpisodes' eval size; JOBGATE_BENCH_EPISODES overrides it.
	episodesBenchDefault = 20_000
	// episodesBenchConcurrency is the eval's concurrency and the raw side's in-flight bound.
	episodesBenchConcurrency = 64
	// episodesBenchSlots is the worker's MaxConcurrentEpisodes: the `jobgate worker` flag default.
	episodesBenchSlots = 200

	rawEpisodesWorkflowName = "bench.RawEpisodes"
	rawNoopActivityName     = "bench.Noop"
)

// episodesRound alternates which side goes first across iterations and -count repetitions;
// episodesProfiles numbers the CPU profiles.
var episodesRound, episodesProfiles int

// BenchmarkEpisodes measures the eval workflow's own overhead on episode throughput (tests/README.md
// "Performance"), side by side in one process against the embedded Temporal server:
//
//	go test ./tests -run '^$' -bench Episodes -benchtime 1x -count 3
//	JOBGATE_BENCH_EPISODES=2000 go test ./tests -run '^$' -bench Episodes -benchtime 1x   # quick
//
// eval: a real eval through the real stack, 20,000 episodes (JOBGATE_BENCH_EPISODES) of suite
// demo with episode_ms=1 fail_rate=0 at concurrency 64: start_eval via MCP, the owner's approval
// via resume_eval (the demo suite asks for one above 100 episodes), run by the real worker
// wiring (app.WorkerMain with the `jobgate worker` defaults: 200 episode slots, 1 s heartbeat
// throttle); timed from start_eval to the close of the last run.
// raw: a plain SDK workflow defined here on its own task queue and its own worker with the same
// worker options, running as many no-op activities with at most 64 in flight, draining and
// continuing as new every workflows.EpisodesPerRunDefault activities like the eval, with the
// episode activity's timeouts and retry policy; timed from ExecuteWorkflow to the close of the
// last run.
//
// Each iteration runs each side twice, eval-raw-raw-eval (the next iteration or -count
// repetition raw-eval-eval-raw), so drift of the shared server — its database grows with every
// run — hits both sides alike; a 20,000-episode iteration takes about three minutes on 2 cores.
// Reported: eval_eps and raw_eps (episodes or activities per second over both runs of a side),
// ratio (eval/raw), the largest history of any run of each side (eval_/raw_max_events_per_run,
// from DescribeWorkflowExecution of every run of each chain; the byte size is logged), and the
// process CPU time and heap allocations per episode of each side (eval_/raw_cpu_us/ep,
// _allocs/ep, _B/ep: the whole process, embedded server included; steadier than the rates when
// something else loads the machine, the allocations nearly deterministic).
func BenchmarkEpisodes(b *testing.B) {
	n := episodesBenchDefault
	if s := os.Getenv("JOBGATE_BENCH_EPISODES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > contract.MaxEpisodesDefault {
			b.Fatalf("JOBGATE_BENCH_EPISODES=%q: want 1..%d", s, contract.MaxEpisodesDefault)
		}
		n = v
	}
	bundle := setup(b, setupOpts{noWorker: true})
	hb := app.HeartbeatThrottleDefault
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace,
		TaskQueue: bundle.taskQueue, Payloads: bundle.payloads()}, MaxConcurrentEpisodes: episodesBenchSlots, HeartbeatThrottle: hb, ArtifactsURL: bundle.artifacts}, ResumeKeys: bundle.resumeKeys,
		SigningKeys: bundle.signingKeys}
	must(b, w.Run(context.Background()))
	b.Cleanup(func() { _ = w.Close() })

	// The raw side: its own client (dialed like the worker's: default converter, silent logger),
	// its own queue, the same worker options as app.WorkerMain sets.
	rawTQ := "tq-raw-" + randHex(6)
	rc, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	must(b, err)
	b.Cleanup(rc.Close)
	rw := worker.New(rc, rawTQ, worker.Options{
		MaxConcurrentActivityExecutionSize: episodesBenchSlots,
		MaxHeartbeatThrottleInterval:       hb,
		DefaultHeartbeatThrottleInterval:   hb,
	})
	rw.RegisterWorkflowWithOptions(rawEpisodes, workflow.RegisterOptions{Name: rawEpisodesWorkflowName})
	rw.RegisterActivityWithOptions(rawNoop, activity.RegisterOptions{Name: rawNoopActivityName})
	must(b, rw.Start())
	b.Cleanup(rw.Stop)

	cs := bundle.session(ana, 0, "")
	ctx := context.Background()
	evalSide := func() (time.Duration, int) {
		t0 := time.Now()
		v := mustView(b, call(b, cs, "start_eval", map[string]any{"idempotency_key": "bench-" + randHex(4), "suite": "demo",
			"episodes": n, "concurrency": episodesBenchConcurrency, "params": map[string]any{"episode_ms": 1, "fail_rate": 0}}))
		first := firstRunID(b, bundle.temporal, v.JobID)
		var wv *jobcore.JobView
		for wv = v; wv.Status != workflows.StatusAwaitingInput; {
			if time.Since(t0) > 30*time.Second {
				b.Fatalf("eval %s: no approval request after 30 s (status %s)", v.JobID, wv.Status)
			}
			time.Sleep(2 * time.Millisecond)
			wv = mustView(b, call(b, cs, "get_eval", map[string]any{"handle": v.Handle}))
		}
		mustView(b, call(b, cs, "resume_eval", acResumeArgs(wv, "approve", nil)))
		approved := time.Since(t0)
		var res workflows.EvalResult
		must(b, bundle.temporal.GetWorkflow(ctx, v.JobID, "").Get(ctx, &res))
		d := time.Since(t0)
		if res.Scored != n || res.Failed != 0 {
			b.Fatalf("eval %s: scored %d failed %d of %d", v.JobID, res.Scored, res.Failed, n)
		}
		if got := mustView(b, call(b, cs, "get_eval", map[string]any{"handle": v.Handle})); got.Status != workflows.StatusSucceeded {
			b.Fatalf("eval %s: status %s after the workflow closed", v.JobID, got.Status)
		}
		b.Logf("eval: %d episodes in %s (approval answered after %s)", n, d.Round(time.Millisecond), approved.Round(time.Millisecond))
		return d, maxEventsPerRun(b, bundle.temporal, v.JobID, first)
	}
	rawSide := func() (time.Duration, int) {
		id := "raw-episodes-" + randHex(6)
		t0 := time.Now()
		run, err := rc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: rawTQ}, rawEpisodesWorkflowName,
			rawEpisodesIn{Total: n, Concurrency: episodesBenchConcurrency, PerRun: workflows.EpisodesPerRunDefault})
		must(b, err)
		var done int
		must(b, rc.GetWorkflow(ctx, id, "").Get(ctx, &done))
		d := time.Since(t0)
		if done != n {
			b.Fatalf("raw %s: %d of %d activities", id, done, n)
		}
		b.Logf("raw:  %d activities in %s", n, d.Round(time.Millisecond))
		return d, maxEventsPerRun(b, rc, id, run.GetRunID())
	}

	var eval, raw sideStats
	for b.Loop() {
		evalRun := func() { eval.add(measured(b, "eval", evalSide)) }
		rawRun := func() { raw.add(measured(b, "raw", rawSide)) }
		order := []func(){evalRun, rawRun, rawRun, evalRun}
		if episodesRound%2 == 1 {
			order = []func(){rawRun, evalRun, evalRun, rawRun}
		}
		episodesRound++
		for _, side := range order {
			side()
		}
	}
	total := float64(2 * n * b.N) // each iteration ran each side twice
	evalEPS, rawEPS := total/eval.wall.Seconds(), total/raw.wall.Seconds()
	b.ReportMetric(evalEPS, "eval_eps")
	b.ReportMetric(rawEPS, "raw_eps")
	b.ReportMetric(evalEPS/rawEPS, "ratio")
	b.ReportMetric(float64(eval.maxEvents), "eval_max_events_per_run")
	b.ReportMetric(float64(raw.maxEvents), "raw_max_events_per_run")
	for _, x := range []struct {
		name string
		s    sideStats
	}{{"eval", eval}, {"raw", raw}} {
		b.ReportMetric(float64(x.s.cpu.Microseconds())/total, x.name+"_cpu_us/ep")
		b.ReportMetric(float64(x.s.allocs)/total, x.name+"_allocs/ep")
		b.ReportMetric(float64(x.s.bytes)/total, x.name+"_B/ep")
	}
	b.Logf("episodes %d at concurrency %d: eval %.0f eps vs raw SDK %.0f eps: %.2fx; max events per run: eval %d, raw %d;"+
		" process CPU per episode: eval %.0f µs, raw %.0f µs; allocations per episode: eval %.0f (%.0f B), raw %.0f (%.0f B)",
		n, episodesBenchConcurrency, evalEPS, rawEPS, evalEPS/rawEPS, eval.maxEvents, raw.maxEvents,
		float64(eval.cpu.Microseconds())/total, float64(raw.cpu.Microseconds())/total,
		float64(eval.allocs)/total, float64(eval.bytes)/total, float64(raw.allocs)/total, float64(raw.bytes)/total)
}

// sideStats sums one side's runs: wall time, process CPU time, heap allocations (count and
// bytes), and the largest history of any workflow run.
type sideStats struct {
	wall, cpu     time.Duration
	allocs, bytes uint64
	maxEvents     int
}

func (s *sideStats) add(r sideStats) {
	s.wall += r.wall
	s.cpu += r.cpu
	s.allocs += r.allocs
	s.bytes += r.bytes
	s.maxEvents = max(s.maxEvents, r.maxEvents)
}

// measured runs side and returns its wall time, what the whole process (client, workers,
// embedded server) spent meanwhile in CPU time and heap allocations — both less sensitive than
// wall time to other load on the machine — and its max events per run. With
// $JOBGATE_BENCH_CPUPROFILE set to a directory, the side runs under a CPU profile written to
// <dir>/<name>-<k>.pprof (k counts the profiles); compare the sides with
// go tool pprof -diff_base raw-2.pprof eval-1.pprof.
func measured(b *testing.B, name string, side func() (time.Duration, int)) sideStats {
	if dir := os.Getenv("JOBGATE_BENCH_CPUPROFILE"); dir != "" {
		episodesProfiles++
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, episodesProfiles)))
		must(b, err)
		defer f.Close()
		must(b, pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := processCPU()
	d, most := side()
	c1 := processCPU()
	runtime.ReadMemStats(&m1)
	return sideStats{wall: d, cpu: c1 - c0, allocs: m1.Mallocs - m0.Mallocs, bytes: m1.TotalAlloc - m0.TotalAlloc, maxEvents: most}
}

// processCPU is the user plus system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// firstRunID is the run ID of the job's current (just started) run.
func firstRunID(b *testing.B, c client.Client, id string) string {
	b.Helper()
	d, err := c.DescribeWorkflowExecution(context.Background(), id, "")
	must(b, err)
	return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// maxEventsPerRun follows the continue-as-new chain from runID and returns the largest
// HistoryLength of any run; every run but the last must have continued as new. It logs the
// number of runs and the largest history size in bytes.
func maxEventsPerRun(b *testing.B, c client.Client, id, runID string) int {
	b.Helper()
	ctx := context.Background()
	most, bytes := 0, int64(0)
	for runs := 1; ; runs++ {
		d, err := c.DescribeWorkflowExecution(ctx, id, runID)
		must(b, err)
		most = max(most, int(d.GetWorkflowExecutionInfo().GetHistoryLength()))
		bytes = max(bytes, d.GetWorkflowExecutionInfo().GetHistorySizeBytes())
		it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
		ev, err := it.Next()
		must(b, err)
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			runID = ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
			b.Logf("%s: %d runs, at most %d events and %d bytes of history per run", id, runs, most, bytes)
			return most
		default:
			b.Fatalf("%s run %d (%s) closed with %s", id, runs, runID, ev.GetEventType())
		}
	}
}

// rawEpisodesIn is the raw baseline's input; Next carries across continue-as-new.
type rawEpisodesIn struct {
	Total       int `json:"total"`
	Concurrency int `json:"concurrency"`
	PerRun      int `json:"per_run"`
	Next        int `json:"next"`
}

// rawEpisodes is the baseline: the eval's episode loop without jobgate — Total no-op
// activities, at most Concurrency in flight, a drain and a continue-as-new every PerRun, with
// the episode activity's timeouts and retry policy.
func rawEpisodes(ctx workflow.Context, in rawEpisodesIn) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: contract.EpisodeTimeoutDefault,
		HeartbeatTimeout:    contract.HeartbeatTimeoutDefault,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 30 * time.Second, MaximumAttempts: contract.MaxAttemptsDefault},
	})
	runEnd := min(in.Total, in.Next+in.PerRun)
	sel := workflow.NewSelector(ctx)
	inflight, failed := 0, 0
	for {
		for inflight < in.Concurrency && in.Next < runEnd {
			f := workflow.ExecuteActivity(ctx, rawNoopActivityName, in.Next)
			in.Next++
			inflight++
			sel.AddFuture(f, func(f workflow.Future) {
				inflight--
				if f.Get(ctx, nil) != nil {
					failed++
				}
			})
		}
		if inflight == 0 {
			break
		}
		sel.Select(ctx)
	}
	if failed > 0 {
		return 0, errors.New(fmt.Sprint(failed, " activities failed"))
	}
	if in.Next < in.Total {
		return 0, workflow.NewContinueAsNewError(ctx, rawEpisodesWorkflowName, in)
	}
	return in.Next, nil
}

func rawNoop(context.Context, int) error { return nil }
