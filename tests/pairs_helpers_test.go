package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/workflows"
)

// sessionVia connects the go-sdk client as p to url through rt (which adds the bearer token).
func sessionVia(b *testing.B, bundle *testBundle, p principal, url string, rt *recordingRT) *mcp.ClientSession {
	b.Helper()
	rt.token = bundle.token(p)
	c := mcp.NewClient(&mcp.Implementation{Name: "jobgate-bench", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt, Timeout: 30 * time.Second},
		DisableStandaloneSSE: true}, nil)
	must(b, err)
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}

// rawStart starts an eval workflow the way start_eval does (same options, same input shape).
func rawStart(b *testing.B, c client.Client, tq, key string) {
	id := jobID("acme", workflows.KindEval, "ana", key)
	now := time.Now().UTC()
	args := workflows.EvalArgs{Suite: "demo", Episodes: 1, Concurrency: 8, Params: map[string]any{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: tq,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.SAJobTenant.ValueSet("acme"), workflows.SAJobOwner.ValueSet("ana"),
			workflows.SAJobKind.ValueSet(workflows.KindEval), workflows.SAJobStatus.ValueSet(string(workflows.StatusQueued))),
		Memo: map[string]any{
			workflows.MemoInputHash: workflows.Digest(args),
			workflows.MemoCreatedAt: now,
			workflows.MemoProgress:  workflows.Progress{Total: 1, Unit: "episodes", Message: "queued", AsOf: now},
		},
		StaticSummary: "eval demo · 1 episodes · owner ana",
		StaticDetails: "**eval** of suite `demo`\n\n- owner: `ana` (tenant `acme`)\n- episodes: 1, concurrency: 8\n- idempotency key: `" + key + "`",
	}, workflows.EvalWorkflowName, workflows.EvalInput{Tenant: "acme", Owner: "ana", Args: args})
	if err != nil {
		b.Fatal(err)
	}
}

// jobID is the workflow ID start_* gives owner's job under key (frontend/jobs.go jobID, for
// owners that need no escaping).
func jobID(tenant, kind, owner, key string) string {
	return tenant + "/" + kind + "/" + owner + "/" + key
}

// sideRun is one side of a pair: calls per second, and the process CPU time (user + system,
// every goroutine: client, frontend, the embedded Temporal server, GC) per call.
type sideRun struct {
	rate       float64
	cpuPerCall time.Duration
}

// roundsCPU runs n calls of each side on c goroutines, in four rounds that each run every side
// once, in a rotated order (so drift of the shared server hits all sides alike).
func roundsCPU(n, c int, sides ...func(i int)) []sideRun {
	t, cpu := make([]time.Duration, len(sides)), make([]time.Duration, len(sides))
	per := max(n/4, 2*c)
	for r := range 4 {
		for k := range sides {
			i := (r + k) % len(sides)
			cpu0 := pairsCPU()
			t[i] += time.Duration(float64(time.Second) * float64(per) / parallel(per, c, sides[i]))
			cpu[i] += pairsCPU() - cpu0
		}
	}
	calls := float64(4 * per)
	runs := make([]sideRun, len(sides))
	for i := range sides {
		runs[i] = sideRun{rate: calls / t[i].Seconds(), cpuPerCall: time.Duration(float64(cpu[i]) / calls)}
	}
	return runs
}

// pairsCPU is the user + system CPU time this process has used.
func pairsCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parallel runs n calls of fn on c goroutines and returns calls per second.
func parallel(n, c int, fn func(i int)) float64 {
	n = max(n, 2*c)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

func reportPair(b *testing.B, name, unit string, mcpRate, rawRate float64) {
	b.ReportMetric(mcpRate, "mcp_"+unit)
	b.ReportMetric(rawRate, "raw_"+unit)
	b.ReportMetric(mcpRate/rawRate, "ratio")
	b.Logf("%s: MCP %.0f %s vs raw SDK %.0f %s: %.2fx", name, mcpRate, unit, rawRate, unit, mcpRate/rawRate)
}

func timed(fn func()) time.Duration {
	t := time.Now()
	fn()
	return time.Since(t)
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type layer struct{ bytes, allocs float64 }

func (l layer) minus(o ...layer) layer {
	for _, x := range o {
		l.bytes, l.allocs = l.bytes-x.bytes, l.allocs-x.allocs
	}
	return l
}

// allocsPer is the mean heap bytes and allocations per call of fn over n calls (process-wide:
// the embedded Temporal server's share of a Temporal call is included). The calls run under
// the pprof label layer=name, inherited by the goroutines they start (the SDK's), not by the
// embedded server's: with -cpuprofile, `go tool pprof -tags` gives each layer's CPU time.
func allocsPer(name string, n int, fn func()) layer {
	var l layer
	pprof.Do(context.Background(), pprof.Labels("layer", name), func(context.Context) {
		fn() // warm
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			fn()
		}
		runtime.ReadMemStats(&after)
		l = layer{bytes: float64(after.TotalAlloc-before.TotalAlloc) / float64(n), allocs: float64(after.Mallocs-before.Mallocs) / float64(n)}
	})
	return l
}

// recordedReq is a request as the client sent it.
type recordedReq struct {
	header http.Header
	body   []byte
}

// recordingRT adds a bearer token (if set) and keeps the last POST it sent.
type recordingRT struct {
	token string
	base  http.RoundTripper
	mu    sync.Mutex
	req   recordedReq
}

func (r *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if req.Method == http.MethodPost && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		r.mu.Lock()
		r.req = recordedReq{header: req.Header.Clone(), body: body}
		r.mu.Unlock()
	}
	return r.base.RoundTrip(req)
}

func (r *recordingRT) last() recordedReq {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.req
}

// serve replays rr into h in-process and checks the answer is a 200 without a JSON-RPC error.
func serve(b *testing.B, h http.Handler, rr recordedReq) {
	req := httptest.NewRequest(http.MethodPost, "http://localhost/mcp", bytes.NewReader(rr.body))
	req.Header = rr.header.Clone()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK || bytes.Contains(w.Body.Bytes(), []byte(`"error":`)) || bytes.Contains(w.Body.Bytes(), []byte(`"isError":true`)) {
		b.Fatalf("replay: %d %s", w.Code, w.Body.String())
	}
}

// bareSDKHandler is the go-sdk floor: one no-op tool on the same stateless Streamable HTTP
// handler with JSON responses, no auth, and the recorded request of one call to it. The tool is
// added as jobgate adds its tools (Server.AddTool with a raw handler: jobgate decodes and checks
// arguments itself), so the SDK does the same work per call for both.
func bareSDKHandler(b *testing.B) (http.Handler, recordedReq) {
	s := mcp.NewServer(&mcp.Implementation{Name: "bare", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "noop", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"status":"ok"}`}}, StructuredContent: map[string]any{"status": "ok"}}, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	rt := &recordingRT{base: http.DefaultTransport}
	c := mcp.NewClient(&mcp.Implementation{Name: "bare-client", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: rt}, DisableStandaloneSSE: true}, nil)
	must(b, err)
	b.Cleanup(func() { _ = cs.Close() })
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "noop", Arguments: map[string]any{"handle": "h"}}); err != nil {
		b.Fatal(err)
	}
	return h, rt.last()
}

// sdkFloor is a bare go-sdk server (stateless Streamable HTTP, JSON responses, no auth) whose
// one tool runs work and answers a one-field result, served over loopback HTTP, and a call of
// that tool by the go-sdk client as the benchmark's get_eval calls are made.
func sdkFloor(b *testing.B, work func(context.Context) error) func() {
	s := mcp.NewServer(&mcp.Implementation{Name: "floor", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "describe", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := work(ctx); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"status":"awaiting_input"}`}},
			StructuredContent: json.RawMessage(`{"status":"awaiting_input"}`)}, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	b.Cleanup(srv.Close)
	c := mcp.NewClient(&mcp.Implementation{Name: "floor-client", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL,
		HTTPClient:           &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * pairsConcurrency}, Timeout: 30 * time.Second},
		DisableStandaloneSSE: true}, nil)
	must(b, err)
	b.Cleanup(func() { _ = cs.Close() })
	args := map[string]any{"handle": "h"}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "describe", Arguments: args})
		if err != nil {
			b.Fatal(err)
		}
		if res.IsError || res.StructuredContent == nil {
			b.Fatalf("floor: %+v", res.Content)
		}
	}
}
