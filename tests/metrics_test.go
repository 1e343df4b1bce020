package tests

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/workflows"
)

// TestMetricsEndToEnd runs serve and worker with --metrics-listen, drives an eval through MCP,
// and scrapes both /metrics: jobgate_* tool, auth and job counters, the Temporal SDK's own
// metrics through the bridge, and no caller string (token, handle, tenant, subject, key).
func TestMetricsEndToEnd(t *testing.T) {
	b := setup(t, setupOpts{noWorker: true})
	tc := app.TemporalConfig{Address: temporalAddr, Namespace: namespace, TaskQueue: b.taskQueue, Payloads: b.payloads()}
	v, err := authz.NewHS256Verifier(testIssuer, b.resource(), b.secret, "")
	must(t, err)
	s := &app.ServeMain{Config: app.ServeConfig{Temporal: tc, Listen: "127.0.0.1:0", ResourceURI: b.resource(),
		Issuer: testIssuer, MetricsListen: "127.0.0.1:0"}, Verifier: v, Keys: b.keys, ResumeKeys: b.resumeKeys, SigningKeys: b.signingKeys}
	must(t, s.Run(context.Background()))
	t.Cleanup(func() { _ = s.Close() })
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: tc, MaxConcurrentEpisodes: 10, MetricsListen: "127.0.0.1:0"}, ResumeKeys: b.resumeKeys,
		SigningKeys: b.signingKeys}
	must(t, w.Run(context.Background()))
	t.Cleanup(func() { _ = w.Close() })
	if s.MetricsAddr() == "" || w.MetricsAddr() == "" {
		t.Fatal("metrics are not listening")
	}

	tenant, sub := "mtenant"+randHex(4), "msub"+randHex(4)
	p := principal{tenant, sub, []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	url := "http://" + s.Addr() + "/mcp"
	cs := b.sessionAt(p, url, "")
	key := "mkey" + randHex(4)
	v1 := mustView(t, call(t, cs, "start_eval", startArgs(key, 2, nil)))
	v2 := mustView(t, call(t, cs, "start_eval", startArgs(key, 2, nil))) // same key: the same job
	if v1.JobID != v2.JobID {
		t.Fatalf("idempotent start gave %s and %s", v1.JobID, v2.JobID)
	}
	waitStatus(t, cs, v1.Handle, workflows.StatusSucceeded, 60*time.Second)

	// A 401 (no token) and a 403 (read-only token calling start_eval).
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	ro := b.sessionAt(principal{tenant, sub, []authz.Scope{authz.ScopeRead}}, url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = ro.CallTool(ctx, &mcp.CallToolParams{Name: "start_eval", Arguments: startArgs("mro"+randHex(3), 1, nil)})
	cancel()
	if err == nil {
		t.Fatal("read-only start_eval was not refused")
	}

	serve := scrape(t, s.MetricsAddr())
	for _, want := range []string{
		`jobgate_tool_calls_total{code="ok",tool="start_eval"} 2`,
		`jobgate_tool_calls_total{code="ok",tool="get_eval"}`,
		`jobgate_tool_call_duration_seconds_bucket{tool="start_eval",le="+Inf"} 2`,
		`jobgate_jobs_started_total{kind="eval",result="created"} 1`,
		`jobgate_jobs_started_total{kind="eval",result="existing"} 1`,
		`jobgate_http_unauthorized_total{reason="missing"} 1`,
		`jobgate_http_insufficient_scope_total{tool="start_eval"} 1`,
		`temporal_request_total{`,
		`operation="StartWorkflowExecution"`,
		`temporal_request_latency_seconds_bucket{`,
	} {
		if !strings.Contains(serve, want) {
			t.Errorf("serve /metrics lacks %s", want)
		}
	}
	worker := scrape(t, w.MetricsAddr())
	for _, want := range []string{`temporal_workflow_completed_total{`, `temporal_activity_execution_latency_seconds_bucket{`,
		`temporal_request_total{`, `workflow_type="` + workflows.EvalWorkflowName + `"`} {
		if !strings.Contains(worker, want) {
			t.Errorf("worker /metrics lacks %s", want)
		}
	}
	h := v1.Handle
	for _, secret := range []string{tenant, sub, key, h, h[strings.LastIndex(h, ".")+1:], b.token(p), "eyJ"} {
		if strings.Contains(serve, secret) || strings.Contains(worker, secret) {
			t.Errorf("/metrics carries a caller string %q", secret)
		}
	}
	if testing.Verbose() {
		for _, l := range strings.Split(serve, "\n") {
			if strings.HasPrefix(l, "jobgate_tool_calls_total") || strings.HasPrefix(l, "jobgate_jobs_started_total") ||
				strings.HasPrefix(l, "jobgate_http_") || strings.HasPrefix(l, "temporal_request_total") {
				t.Log("serve: " + l)
			}
		}
		for _, l := range strings.Split(worker, "\n") {
			if strings.HasPrefix(l, "temporal_workflow_completed_total") || strings.HasPrefix(l, "temporal_activity_execution_latency_seconds_count") {
				t.Log("worker: " + l)
			}
		}
	}
}

func scrape(t testing.TB, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	return string(body)
}
