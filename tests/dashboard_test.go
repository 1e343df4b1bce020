package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/workflows"
)

// dashboardFile is the Grafana dashboard shipped beside the compose deployment's files.
const dashboardFile = "../cmd/deploy/grafana/jobgate-dashboard.json"

// grafanaMacros are the Grafana variables the dashboard's expressions use, as the values Grafana
// would put in their place, so the expressions parse as PromQL.
var grafanaMacros = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// dashboardExprs reads every PromQL expression of the dashboard's panels (rows' panels too),
// keyed "panel title / refId".
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	must(t, err)
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	must(t, json.Unmarshal(b, &d))
	out := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			must(t, json.Unmarshal(raw, &p))
			for _, tg := range p.Targets {
				out[p.Title+" / "+tg.RefID] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(out) == 0 {
		t.Fatal("the dashboard has no expressions")
	}
	return out
}

// dashboardMetrics parses every expression with Prometheus' own PromQL parser and returns the
// metric names their selectors name, each with the panels using it.
func dashboardMetrics(t *testing.T) map[string][]string {
	t.Helper()
	names := map[string][]string{}
	for where, expr := range dashboardExprs(t) {
		e, err := parser.ParseExpr(grafanaMacros.Replace(expr))
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, expr, err)
			continue
		}
		found := 0
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				if vs.Name == "" {
					t.Errorf("%s: a selector without a metric name: %s", where, vs)
				}
				names[vs.Name] = append(names[vs.Name], where)
				found++
			}
			return nil
		})
		if found == 0 {
			t.Errorf("%s: %q selects no metric", where, expr)
		}
	}
	return names
}

// TestDashboardPromQL: every expression of the Grafana dashboard parses as PromQL and selects
// metrics by name; the dashboard covers what issue 35 asks of it.
func TestDashboardPromQL(t *testing.T) {
	names := dashboardMetrics(t)
	for _, want := range []string{"jobgate_jobs_started_total", "jobgate_tool_calls_total", "jobgate_quota_decisions_total",
		"temporal_workflow_endtoend_latency_seconds_bucket", "jobgate_notify_deliveries_total", "jobgate_event_streams"} {
		if names[want] == nil {
			t.Errorf("the dashboard has no panel on %s", want)
		}
	}
}

// TestDashboardMetricsExist runs serve and worker with --metrics-listen, a tenants file with a
// quota and a notification endpoint (a real receiver), and a public URL, and drives them the way
// a day does: an eval that asks for approval (a notification), starts, a repeated start, a start
// over quota, a refused call, a 401 and a 403, an event stream. Then every metric the dashboard
// selects must be one the two /metrics export: no panel on a metric that does not exist.
func TestDashboardMetricsExist(t *testing.T) {
	names := dashboardMetrics(t)
	// A tenant of its own: starts_per_minute_per_owner counts every start of the owner in the
	// shared namespace, and other tests start acme/ana jobs meanwhile (CI once saw this test's
	// first starts refused by theirs).
	tenant := "dash" + randHex(4)
	me := principal{tenant, "ana", []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	f := newNotifyFixture(t)
	f.receiver(t)
	tenants := filepath.Join(t.TempDir(), "tenants.json")
	must(t, os.WriteFile(tenants, []byte(fmt.Sprintf(`{"defaults":{},"tenants":{%q:{"starts_per_minute_per_owner":4}},
		"notify":{%q:[{"name":"recv","url":"http://%s/hooks","secret_file":%q,"events":["approval.requested","job.finished"],"allow_private":true}]}}`,
		tenant, tenant, f.addr, f.secretFile)), 0o600))
	b := setup(t, setupOpts{noWorker: true})
	tc := app.TemporalConfig{Address: temporalAddr, Namespace: namespace, TaskQueue: b.taskQueue, Payloads: b.payloads()}
	v, err := authz.NewHS256Verifier(testIssuer, b.resource(), b.secret, "")
	must(t, err)
	s := &app.ServeMain{Config: app.ServeConfig{Temporal: tc, Listen: "127.0.0.1:0", ResourceURI: b.resource(),
		Issuer: testIssuer, MetricsListen: "127.0.0.1:0", TenantsFile: tenants}, Verifier: v, Keys: b.keys, ResumeKeys: b.resumeKeys, SigningKeys: b.signingKeys}
	must(t, s.Run(context.Background()))
	t.Cleanup(func() { _ = s.Close() })
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: tc, MaxConcurrentEpisodes: 10, MetricsListen: "127.0.0.1:0",
		TenantsFile: tenants, PublicURL: "https://jobgate.test"}, ResumeKeys: b.resumeKeys, SigningKeys: b.signingKeys}
	must(t, w.Run(context.Background()))
	t.Cleanup(func() { _ = w.Close() })

	url := "http://" + s.Addr() + "/mcp"
	cs := b.sessionAt(me, url, "")
	asking := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t)+"-ask", 101, nil)))
	key := uniqueKey(t)
	ev := mustView(t, call(t, cs, "start_eval", startArgs(key, 3, map[string]any{"episode_ms": 50})))
	mustView(t, call(t, cs, "start_eval", startArgs(key, 3, map[string]any{"episode_ms": 50}))) // existing
	refused := false
	for i := 0; i < 6 && !refused; i++ {
		o := call(t, cs, "start_eval", startArgs(fmt.Sprintf("%s-q%d", key, i), 1, nil))
		refused = o.Err != nil && o.Err.Code == "quota_exceeded"
	}
	if !refused {
		t.Fatal("no start was refused over the tenant's 4 starts a minute")
	}
	mustErr(t, call(t, cs, "get_eval", map[string]any{"handle": tenant + "/eval/ana/no-such-job"}), "not_found")
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	must(t, err)
	resp.Body.Close()
	ro := b.sessionAt(principal{tenant, "ana", []authz.Scope{authz.ScopeRead}}, url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, _ = ro.CallTool(ctx, &mcp.CallToolParams{Name: "start_eval", Arguments: startArgs(uniqueKey(t)+"-ro", 1, nil)})
	cancel()
	st := jobEvents(t, jobEventsURL(url, ev.Handle), b.token(me), "")
	st.next(t, 30*time.Second)
	st.close()
	waitStatus(t, cs, ev.Handle, workflows.StatusSucceeded, time.Minute)
	waitStatus(t, cs, asking.Handle, workflows.StatusAwaitingInput, time.Minute)
	eventually(t, time.Minute, "the approval notification delivered", func() bool { return len(f.events(t)) >= 1 })

	metrics := scrape(t, s.MetricsAddr()) + scrape(t, w.MetricsAddr())
	eventually(t, 30*time.Second, "the worker's workflow metrics", func() bool {
		metrics = scrape(t, s.MetricsAddr()) + scrape(t, w.MetricsAddr())
		return strings.Contains(metrics, "temporal_workflow_completed_total{")
	})
	var missing []string
	for name, where := range names {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `[{ ]`).MatchString(metrics) {
			slices.Sort(where)
			missing = append(missing, name+" ("+strings.Join(where, "; ")+")")
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		t.Errorf("the dashboard selects %s, which neither /metrics exports after the run", m)
	}
	if len(missing) == 0 {
		t.Logf("%d metrics of the dashboard, all exported", len(names))
	}
}
