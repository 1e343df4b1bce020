package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// pairsConcurrency is the number of concurrent callers of the parallel pairs.
const pairsConcurrency = 32

// BenchmarkPairs measures the MCP layer side by side with what it wraps, in one process against
// the embedded Temporal server (tests/README.md "Performance"):
//
//	go test ./tests -run '^$' -bench Pairs -benchmem -count 3
//
// Start32: start_eval via MCP vs a raw SDK ExecuteWorkflow with the same options, 32 concurrent
// callers, starts/s and the ratio (no worker polls the queue: only the start is measured).
// GetSeq: get_eval via MCP vs a bare DescribeWorkflowExecution, interleaved one at a time, p50
// latency of each and the difference; also p50 of get_eval on a succeeded job (its result is
// read from the close event once, then from the closed-run cache). Get32: the same pair at 32
// concurrent callers, calls/s and the ratio, and each side's process CPU time per call.
// Allocs: bytes and allocations per get_eval by layer, measured in-process (the HTTP handler
// served directly, no client, no socket): the whole server-side call; the bare go-sdk
// Streamable HTTP handler (stateless, JSON responses, no auth) on a no-op tool; the Temporal
// Describe (client and the embedded server, which shares the process); and ours, the
// difference; then the whole call and ours for the succeeded job. TasksSeq, Tasks32 and
// TasksAllocs: the same for tasks/get of the Tasks extension (latency, throughput against a
// bare Describe, bytes and allocations of the whole server side). Solo32 (only when named in
// -bench) runs one side of Get32 alone, for a CPU profile of it.
//
// The frontend under test is built here (frontend.New) with the production-style JSON logger
// writing to io.Discard, not the harness's in-memory observer.
func BenchmarkPairs(b *testing.B) {
	bundle := setup(b)
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	newFrontend := func(taskQueue string) (*frontend.Frontend, string) {
		v, err := authz.NewHS256Verifier(testIssuer, bundle.resource(), bundle.secret, "")
		must(b, err)
		f, err := frontend.New(jobcore.Options{Temporal: bundle.temporal, Namespace: namespace, TaskQueue: taskQueue,
			Verifier: v, Keys: bundle.keys, ResumeKeys: bundle.resumeKeys, ResourceURI: bundle.resource(), UIBaseURL: "http://ui.test", Logger: log,
			Metrics: prometheus.NewRegistry()})
		must(b, err)
		srv := httptest.NewServer(f.Handler())
		b.Cleanup(srv.Close)
		return f, srv.URL + "/mcp"
	}
	fe, feURL := newFrontend(bundle.taskQueue)
	rec := &recordingRT{base: &http.Transport{MaxIdleConnsPerHost: 2 * pairsConcurrency}}
	cs := sessionVia(b, bundle, ana, feURL, rec)

	done := mustView(b, call(b, cs, "start_eval", startArgs("bench-"+randHex(4), 1, map[string]any{"episode_ms": 0})))
	waitStatus(b, cs, done.Handle, workflows.StatusSucceeded, 30*time.Second)
	waiting := mustView(b, call(b, cs, "start_eval", startArgs("bench-"+randHex(4), 101, nil)))
	waitStatus(b, cs, waiting.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	getArgs := map[string]any{"handle": waiting.Handle}
	ctx := context.Background()
	describe := func() {
		if _, err := bundle.temporal.DescribeWorkflowExecution(ctx, waiting.JobID, ""); err != nil {
			b.Fatal(err)
		}
	}
	// getEval is one get_eval as a client makes it: the go-sdk client sends it and decodes the
	// answer; a tool error or a result without structuredContent fails the benchmark. (The
	// harness's call also re-marshals and compares the result's two forms — a test's check,
	// about 0.15 ms of CPU per call that no client spends and the Describe side has no
	// counterpart of — so the timed calls leave it out.)
	getEval := func(args map[string]any) func() {
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_eval", Arguments: args})
			if err != nil {
				b.Fatal(err)
			}
			if res.IsError || res.StructuredContent == nil {
				b.Fatalf("get_eval: %+v", res.Content)
			}
		}
	}

	b.Run("Start32", func(b *testing.B) {
		// A queue no worker polls: both sides only start workflows.
		tq := "tq-idle-" + randHex(6)
		_, url := newFrontend(tq)
		scs := sessionVia(b, bundle, ana, url, &recordingRT{base: &http.Transport{MaxIdleConnsPerHost: 2 * pairsConcurrency}})
		run := "s" + randHex(4)
		var round atomic.Int64
		// The go-sdk floor of a start: a bare go-sdk tool making the same raw start.
		floor := sdkFloor(b, func(context.Context) error {
			rawStart(b, bundle.temporal, tq, fmt.Sprintf("%s-f%d", run, round.Add(1)))
			return nil
		})
		runs := roundsCPU(max(b.N, 512), pairsConcurrency, func(i int) {
			// As getEval: the client's call and an error check, not the harness's shape check.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := scs.CallTool(ctx, &mcp.CallToolParams{Name: "start_eval", Arguments: startArgs(fmt.Sprintf("%s-m%d-%d", run, round.Add(1), i), 1, nil)})
			if err != nil {
				b.Fatal(err)
			}
			if res.IsError || res.StructuredContent == nil {
				b.Fatalf("start_eval: %+v", res.Content)
			}
		}, func(i int) { rawStart(b, bundle.temporal, tq, fmt.Sprintf("%s-r%d-%d", run, round.Add(1), i)) }, func(int) { floor() })
		m, r, f := runs[0], runs[1], runs[2]
		reportPair(b, "start32", "starts/s", m.rate, r.rate)
		b.ReportMetric(f.rate/r.rate, "sdkfloor_ratio")
		b.ReportMetric(ms(m.cpuPerCall), "mcp_cpu_ms/call")
		b.ReportMetric(ms(r.cpuPerCall), "raw_cpu_ms/call")
		b.ReportMetric(ms(f.cpuPerCall), "sdkfloor_cpu_ms/call")
		b.Logf("start32 CPU per call: MCP %.3f ms vs raw %.3f ms (+%.3f ms); go-sdk floor %.3f ms (+%.3f ms), %.0f starts/s = %.2fx",
			ms(m.cpuPerCall), ms(r.cpuPerCall), ms(m.cpuPerCall-r.cpuPerCall), ms(f.cpuPerCall), ms(f.cpuPerCall-r.cpuPerCall), f.rate, f.rate/r.rate)
	})

	// The go-sdk floor of wrapping a Describe in MCP: a bare go-sdk server (stateless, JSON
	// responses, no auth) whose one tool makes the same Describe and answers a one-field result,
	// called by the same go-sdk client over loopback HTTP. What get_eval costs beyond it is
	// jobgate's (bearer, scope check, tasks layer, handle, policy, view, log, a larger result).
	floor := sdkFloor(b, func(ctx context.Context) error {
		_, err := bundle.temporal.DescribeWorkflowExecution(ctx, waiting.JobID, "")
		return err
	})

	b.Run("GetSeq", func(b *testing.B) {
		n := max(b.N, 50)
		mcpLat, rawLat, succLat, floorLat := make([]time.Duration, 0, n), make([]time.Duration, 0, n), make([]time.Duration, 0, n), make([]time.Duration, 0, n)
		get, getDone := getEval(getArgs), getEval(map[string]any{"handle": done.Handle})
		for range n {
			mcpLat = append(mcpLat, timed(get))
			rawLat = append(rawLat, timed(describe))
			succLat = append(succLat, timed(getDone))
			floorLat = append(floorLat, timed(floor))
		}
		m, r, s, f := p50(mcpLat), p50(rawLat), p50(succLat), p50(floorLat)
		b.ReportMetric(ms(m), "mcp_p50_ms")
		b.ReportMetric(ms(r), "describe_p50_ms")
		b.ReportMetric(ms(m-r), "delta_p50_ms")
		b.ReportMetric(ms(s), "succeeded_p50_ms")
		b.ReportMetric(ms(f-r), "sdkfloor_delta_p50_ms")
		b.Logf("get_eval p50 %.3f ms vs Describe %.3f ms: +%.3f ms (succeeded job: %.3f ms); go-sdk floor (bare server, same Describe): +%.3f ms",
			ms(m), ms(r), ms(m-r), ms(s), ms(f-r))
	})

	b.Run("Get32", func(b *testing.B) {
		get := getEval(getArgs)
		runs := roundsCPU(max(b.N, 2000), pairsConcurrency, func(int) { get() }, func(int) { describe() }, func(int) { floor() })
		m, r, f := runs[0], runs[1], runs[2]
		reportPair(b, "get32", "calls/s", m.rate, r.rate)
		// CPU per call of each side (the whole process: client, frontend, Temporal server, GC):
		// on a CPU-bound machine the throughput ratio is about the inverse of their ratio.
		b.ReportMetric(ms(m.cpuPerCall), "mcp_cpu_ms/call")
		b.ReportMetric(ms(r.cpuPerCall), "raw_cpu_ms/call")
		b.ReportMetric(f.rate/r.rate, "sdkfloor_ratio")
		b.ReportMetric(ms(f.cpuPerCall), "sdkfloor_cpu_ms/call")
		b.Logf("get32 CPU per call: MCP %.3f ms vs Describe %.3f ms (+%.3f ms); go-sdk floor %.3f ms (+%.3f ms), %.0f calls/s = %.2fx",
			ms(m.cpuPerCall), ms(r.cpuPerCall), ms(m.cpuPerCall-r.cpuPerCall), ms(f.cpuPerCall), ms(f.cpuPerCall-r.cpuPerCall), f.rate, f.rate/r.rate)
	})

	b.Run("Allocs", func(b *testing.B) {
		// Replay the exact request the go-sdk client sent for get_eval, straight into the handler.
		call(b, cs, "get_eval", getArgs)
		ours := rec.last()
		call(b, cs, "get_eval", map[string]any{"handle": done.Handle})
		oursDone := rec.last()
		h := fe.Handler()
		bare, bareReq := bareSDKHandler(b)
		n := max(b.N, 200)
		whole := allocsPer("whole", n, func() { serve(b, h, ours) })
		sdk := allocsPer("sdk", n, func() { serve(b, bare, bareReq) })
		desc := allocsPer("describe", n, describe)
		own := whole.minus(sdk, desc)
		// The succeeded job: the same layers, plus whatever reading its result costs (a second
		// Temporal call unless the result is served from the closed-run cache).
		wholeDone := allocsPer("succeeded_whole", n, func() { serve(b, h, oursDone) })
		ownDone := wholeDone.minus(sdk, desc)
		for _, l := range []struct {
			name string
			l    layer
		}{{"whole", whole}, {"sdk", sdk}, {"describe", desc}, {"ours", own}, {"succeeded_whole", wholeDone}, {"succeeded_ours", ownDone}} {
			b.ReportMetric(l.l.bytes, l.name+"_B/op")
			b.ReportMetric(l.l.allocs, l.name+"_allocs/op")
		}
		b.Logf("get_eval server side per call: whole %.0f B %.0f allocs = go-sdk (bare no-op tool) %.0f B %.0f allocs"+
			" + Temporal Describe %.0f B %.0f allocs + ours %.0f B %.0f allocs; succeeded job: whole %.0f B %.0f allocs, ours %.0f B %.0f allocs",
			whole.bytes, whole.allocs, sdk.bytes, sdk.allocs, desc.bytes, desc.allocs, own.bytes, own.allocs,
			wholeDone.bytes, wholeDone.allocs, ownDone.bytes, ownDone.allocs)
	})

	// Tasks: tasks/get (the Tasks extension, 2026-07-28, raw JSON-RPC as tests/tasks_test.go
	// sends it: the go-sdk client has no Tasks) of the same waiting job — its owner asks, so the
	// task carries the input request — and of the succeeded one. TasksSeq: p50 latency over
	// loopback HTTP interleaved with a bare Describe; Tasks32: the pair at 32 concurrent callers;
	// TasksAllocs: bytes and allocations per call served in-process (the whole server side).
	taskReq := func(taskID string) recordedReq {
		body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": map[string]any{
			"taskId": taskID, "_meta": map[string]any{
				"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
				"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "jobgate-bench", "version": "1"},
				"io.modelcontextprotocol/clientCapabilities": tkCaps(),
			}}})
		must(b, err)
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("Accept", "application/json, text/event-stream")
		h.Set("Authorization", "Bearer "+bundle.token(ana))
		h.Set("MCP-Protocol-Version", "2026-07-28")
		h.Set("Mcp-Method", "tasks/get")
		h.Set("Mcp-Name", taskID)
		return recordedReq{header: h, body: body}
	}
	taskWaiting, taskDone := taskReq(waiting.Handle), taskReq(done.Handle)
	taskClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * pairsConcurrency}}
	tasksGet := func(rr recordedReq, want string) func() {
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, feURL, bytes.NewReader(rr.body))
			if err != nil {
				b.Fatal(err)
			}
			req.Header = rr.header.Clone()
			resp, err := taskClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"status":"`+want+`"`)) {
				b.Fatalf("tasks/get: %d %s %v", resp.StatusCode, body, err)
			}
		}
	}
	b.Run("TasksSeq", func(b *testing.B) {
		n := max(b.N, 50)
		taskLat, rawLat, succLat := make([]time.Duration, 0, n), make([]time.Duration, 0, n), make([]time.Duration, 0, n)
		get, getDone := tasksGet(taskWaiting, "input_required"), tasksGet(taskDone, "completed")
		for range n {
			taskLat = append(taskLat, timed(get))
			rawLat = append(rawLat, timed(describe))
			succLat = append(succLat, timed(getDone))
		}
		t, r, s := p50(taskLat), p50(rawLat), p50(succLat)
		b.ReportMetric(ms(t), "tasks_p50_ms")
		b.ReportMetric(ms(r), "describe_p50_ms")
		b.ReportMetric(ms(t-r), "delta_p50_ms")
		b.ReportMetric(ms(s), "succeeded_p50_ms")
		b.Logf("tasks/get p50 %.3f ms vs Describe %.3f ms: +%.3f ms (succeeded job: %.3f ms)", ms(t), ms(r), ms(t-r), ms(s))
	})
	b.Run("Tasks32", func(b *testing.B) {
		get := tasksGet(taskWaiting, "input_required")
		runs := roundsCPU(max(b.N, 2000), pairsConcurrency, func(int) { get() }, func(int) { describe() })
		t, r := runs[0], runs[1]
		reportPair(b, "tasks32", "calls/s", t.rate, r.rate)
		b.ReportMetric(ms(t.cpuPerCall), "tasks_cpu_ms/call")
		b.ReportMetric(ms(r.cpuPerCall), "raw_cpu_ms/call")
		b.Logf("tasks32 CPU per call: tasks/get %.3f ms vs Describe %.3f ms (+%.3f ms)",
			ms(t.cpuPerCall), ms(r.cpuPerCall), ms(t.cpuPerCall-r.cpuPerCall))
	})
	b.Run("TasksAllocs", func(b *testing.B) {
		h := fe.Handler()
		n := max(b.N, 200)
		whole := allocsPer("tasks_whole", n, func() { serve(b, h, taskWaiting) })
		wholeDone := allocsPer("tasks_succeeded_whole", n, func() { serve(b, h, taskDone) })
		for _, l := range []struct {
			name string
			l    layer
		}{{"tasks_whole", whole}, {"tasks_succeeded_whole", wholeDone}} {
			b.ReportMetric(l.l.bytes, l.name+"_B/op")
			b.ReportMetric(l.l.allocs, l.name+"_allocs/op")
		}
		b.Logf("tasks/get server side per call: %.0f B %.0f allocs; succeeded job: %.0f B %.0f allocs",
			whole.bytes, whole.allocs, wholeDone.bytes, wholeDone.allocs)
	})

	// Solo32 runs each side of Get32 alone (no alternation), for a CPU profile of one side:
	//
	//	go test ./tests -run '^$' -bench 'Pairs/Solo32/MCP' -cpuprofile mcp.prof
	//
	// It runs only when -bench names it (it measures nothing Get32 does not).
	b.Run("Solo32", func(b *testing.B) {
		if !strings.Contains(flag.Lookup("test.bench").Value.String(), "Solo32") {
			b.Skip("profiling aid: select it with -bench 'Pairs/Solo32/...'")
		}
		solo := func(fn func()) func(*testing.B) {
			return func(b *testing.B) {
				n := max(b.N, 4000)
				cpu0 := pairsCPU()
				b.ReportMetric(parallel(n, pairsConcurrency, func(int) { fn() }), "calls/s")
				b.ReportMetric(ms((pairsCPU()-cpu0)/time.Duration(n)), "cpu_ms/call")
			}
		}
		b.Run("MCP", solo(getEval(getArgs)))
		b.Run("Describe", solo(describe))
	})
}
