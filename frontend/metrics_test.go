package frontend

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/telemetry"
)

func newMetricsFrontend(t *testing.T) (*Frontend, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return newStoreFrontend(t, memstore.New(), jobcore.Options{Metrics: reg}), reg
}

// metricValue is the value of the series name{labels}, 0 when absent.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if len(got) != len(labels) {
				continue
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// allLabelValues lists every label value in the registry.
func allLabelValues(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				out = append(out, lp.GetValue())
			}
		}
	}
	return out
}

func callTool(t *testing.T, f *Frontend, name string, p authz.Principal, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	var h mcp.ToolHandler
	for _, td := range f.Tools() {
		if td.Tool.Name == name {
			h = td.Handler
		}
	}
	if h == nil {
		t.Fatalf("no tool %s", name)
	}
	raw, _ := json.Marshal(args)
	res, err := h(context.Background(), &mcp.CallToolRequest{
		Params: &mcp.CallToolParamsRaw{Name: name, Arguments: raw},
		Extra:  &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{Extra: map[string]any{jobcore.PrincipalKey: p}}},
	})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func TestMetricsToolCalls(t *testing.T) {
	f, reg := newMetricsFrontend(t)
	p := authz.Principal{Tenant: "tenantsecretx", Subject: "subjectsecrety", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}

	if res := callTool(t, f, "list_jobs", p, nil); res.IsError {
		t.Fatalf("list_jobs: %v", res.Content)
	}
	if res := callTool(t, f, "start_eval", p, map[string]any{"idempotency_key": "keysecretz", "suite": "nosuchsuitew", "episodes": 1}); !res.IsError {
		t.Fatal("start_eval with an unknown suite succeeded")
	}
	if res := callTool(t, f, "get_eval", p, map[string]any{"handle": "jgh1.k1.handlesecretv.x"}); !res.IsError {
		t.Fatal("get_eval with a garbage handle succeeded")
	}

	if got := metricValue(t, reg, "jobgate_tool_calls_total", map[string]string{"tool": "list_jobs", "code": "ok"}); got != 1 {
		t.Errorf("list_jobs ok = %v, want 1", got)
	}
	if got := metricValue(t, reg, "jobgate_tool_calls_total", map[string]string{"tool": "start_eval", "code": jobcore.CodeInvalidArgument}); got != 1 {
		t.Errorf("start_eval invalid_argument = %v, want 1", got)
	}
	var getErrs float64
	for _, c := range []string{jobcore.CodeInvalidHandle, jobcore.CodeNotFound} {
		getErrs += metricValue(t, reg, "jobgate_tool_calls_total", map[string]string{"tool": "get_eval", "code": c})
	}
	if getErrs != 1 {
		t.Errorf("get_eval invalid_handle|not_found = %v, want 1", getErrs)
	}
	if got := metricValue(t, reg, "jobgate_tool_call_duration_seconds", map[string]string{"tool": "list_jobs"}); got != 1 {
		t.Errorf("list_jobs latency samples = %v, want 1", got)
	}
	assertNoSecrets(t, reg, "tenantsecretx", "subjectsecrety", "keysecretz", "nosuchsuitew", "handlesecretv")
}

func assertNoSecrets(t *testing.T, reg *prometheus.Registry, secrets ...string) {
	t.Helper()
	for _, v := range allLabelValues(t, reg) {
		for _, s := range secrets {
			if strings.Contains(v, s) {
				t.Errorf("label value %q carries caller string %q", v, s)
			}
		}
	}
}

func TestMetricsHTTPRefusals(t *testing.T) {
	f, reg := newMetricsFrontend(t)
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	mint := func(scopes ...authz.Scope) string {
		tok, err := authz.MintHS256(unitSecret, authz.MintOptions{Issuer: "iss", Audience: "http://localhost/mcp",
			Tenant: "tenantsecretx", Subject: "subjectsecrety", Scopes: scopes, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	post := func(auth, body string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_eval","arguments":{}}}`
	if c := post("", call); c != http.StatusUnauthorized {
		t.Fatalf("no token: %d", c)
	}
	if c := post("Basic dXNlcjpwYXNz", call); c != http.StatusUnauthorized {
		t.Fatalf("basic auth: %d", c)
	}
	if c := post("Bearer tokensecretq", call); c != http.StatusUnauthorized {
		t.Fatalf("garbage token: %d", c)
	}
	if c := post("Bearer "+mint(authz.ScopeRead), call); c != http.StatusForbidden {
		t.Fatalf("read-only start_eval: %d", c)
	}
	get := func(path, tok string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("/artifacts/linksecretu", mint(authz.ScopeRead)); c != http.StatusNotFound {
		t.Fatalf("garbage download link: %d", c)
	}

	for reason, want := range map[string]float64{"missing": 2, "invalid": 1} {
		if got := metricValue(t, reg, "jobgate_http_unauthorized_total", map[string]string{"reason": reason}); got != want {
			t.Errorf("401 %s = %v, want %v", reason, got, want)
		}
	}
	if got := metricValue(t, reg, "jobgate_http_insufficient_scope_total", map[string]string{"tool": "start_eval"}); got != 1 {
		t.Errorf("403 start_eval = %v, want 1", got)
	}
	if got := metricValue(t, reg, "jobgate_downloads_total", map[string]string{"code": "404"}); got != 1 {
		t.Errorf("downloads 404 = %v, want 1", got)
	}
	assertNoSecrets(t, reg, "tenantsecretx", "subjectsecrety", "tokensecretq", "linksecretu", "dXNlcjpwYXNz")
}

func TestMetricsOffByDefault(t *testing.T) {
	// Without Options.Metrics the collectors exist but nothing is registered, and calls still work.
	f := newListFrontend(t, memstore.New())
	p := authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}}
	if res := callTool(t, f, "list_jobs", p, nil); res.IsError {
		t.Fatalf("list_jobs: %v", res.Content)
	}
}

func TestMetricsSharedRegistry(t *testing.T) {
	// Two frontends in one process on one registry share the series instead of failing.
	reg := prometheus.NewRegistry()
	for range 2 {
		if _, err := telemetry.NewMetrics(reg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQuotaRejectionLabels: the tenant label is bounded by the tenants file; a caller's tenant
// that the file does not name is "other", never its own series.
func TestQuotaRejectionLabels(t *testing.T) {
	f, reg := newMetricsFrontend(t)
	cfg := authz.Tenants{Tenants: map[string]authz.TenantPolicy{"acme": {}}}
	f.Metrics.QuotaRejected(cfg, "acme", "running_jobs_per_owner")
	f.Metrics.QuotaRejected(cfg, "made-up-by-a-token", "running_jobs_per_owner")
	f.Metrics.QuotaRejected(cfg, "another-one", "running_jobs_per_owner")
	for tenant, want := range map[string]float64{"acme": 1, "other": 2, "made-up-by-a-token": 0} {
		got := metricValue(t, reg, "jobgate_quota_rejections_total", map[string]string{"tenant": tenant, "limit": "running_jobs_per_owner"})
		if got != want {
			t.Errorf("tenant %s: %v rejections, want %v", tenant, got, want)
		}
	}
}
