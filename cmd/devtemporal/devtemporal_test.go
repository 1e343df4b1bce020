package devtemporal

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

var jobAttrs = map[string]enumspb.IndexedValueType{
	"JobTenant": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	"JobOwner":  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	"JobKind":   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	"JobStatus": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

var jobTenant = temporal.NewSearchAttributeKeyKeyword("JobTenant")

func echoWorkflow(_ workflow.Context, in string) (string, error) { return "echo:" + in, nil }

func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	begin := time.Now()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start(DataDir=%q) took %v", opts.DataDir, time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		begin := time.Now()
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		t.Logf("Stop took %v", time.Since(begin).Round(time.Millisecond))
	})
	return s
}

func dial(t *testing.T, s *Server) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  s.FrontendHostPort(),
		Namespace: s.Namespace(),
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	})
	if err != nil {
		t.Fatalf("dial %s: %v", s.FrontendHostPort(), err)
	}
	t.Cleanup(c.Close)
	return c
}

// runEcho runs echoWorkflow to completion on a fresh worker and returns its workflow ID.
func runEcho(t *testing.T, c client.Client, id string, attrs temporal.SearchAttributes) {
	t.Helper()
	tq := "tq-" + id
	w := worker.New(c, tq, worker.Options{})
	w.RegisterWorkflow(echoWorkflow)
	if err := w.Start(); err != nil {
		t.Fatalf("worker start: %v", err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: tq, TypedSearchAttributes: attrs,
	}, echoWorkflow, "hi")
	if err != nil {
		t.Fatalf("ExecuteWorkflow: %v", err)
	}
	var out string
	if err := run.Get(ctx, &out); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	if out != "echo:hi" {
		t.Fatalf("workflow result = %q", out)
	}
}

// waitListed polls visibility until query returns workflow id.
func waitListed(t *testing.T, c client.Client, ns, query, id string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: ns, Query: query,
		})
		if err == nil {
			for _, e := range resp.GetExecutions() {
				if e.GetExecution().GetWorkflowId() == id {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("query %q did not find %s before deadline (last error: %v)", query, id, err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval, bounded by the deadline above
	}
}

func TestEphemeralWorkflowVisibilityAndUI(t *testing.T) {
	s := startServer(t, Options{SearchAttributes: jobAttrs})
	if s.Namespace() != "default" {
		t.Fatalf("Namespace() = %q", s.Namespace())
	}
	if !strings.HasPrefix(s.FrontendHostPort(), "127.0.0.1:") || !strings.HasPrefix(s.UIURL(), "http://127.0.0.1:") {
		t.Fatalf("addresses: frontend %q, UI %q", s.FrontendHostPort(), s.UIURL())
	}
	c := dial(t, s)
	runEcho(t, c, "wf-acme", temporal.NewSearchAttributes(jobTenant.ValueSet("acme")))
	waitListed(t, c, s.Namespace(), "JobTenant = 'acme'", "wf-acme")

	// Another tenant must not match.
	resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: s.Namespace(), Query: "JobTenant = 'other'",
	})
	if err != nil || len(resp.GetExecutions()) != 0 {
		t.Fatalf("JobTenant = 'other': %v, %d executions", err, len(resp.GetExecutions()))
	}

	// Web UI: the app shell and the JSON API proxied to the frontend.
	body, ctype := httpGet(t, s.UIURL()+"/")
	if !strings.Contains(ctype, "text/html") || !strings.Contains(strings.ToLower(body), "<html") {
		t.Fatalf("GET / = %s: %.200s", ctype, body)
	}
	body, ctype = httpGet(t, s.UIURL()+"/api/v1/namespaces/default/workflows")
	var list struct {
		Executions []struct {
			Execution struct {
				WorkflowID string `json:"workflowId"`
			} `json:"execution"`
		} `json:"executions"`
	}
	if !strings.Contains(ctype, "application/json") || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("GET /api/v1/namespaces/default/workflows = %s: %.300s", ctype, body)
	}
	if len(list.Executions) == 0 || list.Executions[0].Execution.WorkflowID != "wf-acme" {
		t.Fatalf("UI workflow list: %.300s", body)
	}
	// A workflow page: the SPA shell for its route, and the describe call it makes.
	body, ctype = httpGet(t, s.UIURL()+"/namespaces/default/workflows/wf-acme")
	if !strings.Contains(ctype, "text/html") {
		t.Fatalf("workflow page = %s: %.200s", ctype, body)
	}
	body, ctype = httpGet(t, s.UIURL()+"/api/v1/namespaces/default/workflows/wf-acme")
	if !strings.Contains(ctype, "application/json") || !strings.Contains(body, "WORKFLOW_EXECUTION_STATUS_COMPLETED") {
		t.Fatalf("UI describe workflow = %s: %.300s", ctype, body)
	}

	// The frontend's HTTP API answers too.
	body, _ = httpGet(t, "http://"+s.FrontendHTTPHostPort()+"/api/v1/namespaces/default")
	if !strings.Contains(body, `"name":"default"`) {
		t.Fatalf("frontend HTTP API: %.300s", body)
	}

	// Stop releases the ports and is idempotent.
	uiAddr := strings.TrimPrefix(s.UIURL(), "http://")
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if s.releaseErr != nil {
		t.Fatalf("SQLite connection not released: %v", s.releaseErr)
	}
	for _, addr := range []string{s.FrontendHostPort(), s.FrontendHTTPHostPort(), uiAddr} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("port %s still bound after Stop: %v", addr, err)
		}
		_ = l.Close()
	}
}

func httpGet(t *testing.T, url string) (body, contentType string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %.300s", url, resp.Status, b)
	}
	return string(b), resp.Header.Get("Content-Type")
}

func TestFileModeSurvivesRestart(t *testing.T) {
	testenv.Heavy(t, "starts two Temporal servers on one data directory")
	dir := t.TempDir()
	opts := Options{DataDir: dir, Namespace: "jobs", SearchAttributes: jobAttrs, UIPort: UIDisabled}

	s1 := startServer(t, opts)
	if s1.UIURL() != "" {
		t.Fatalf("UIURL() = %q with UI disabled", s1.UIURL())
	}
	c1 := dial(t, s1)
	runEcho(t, c1, "wf-persist", temporal.NewSearchAttributes(jobTenant.ValueSet("acme")))
	waitListed(t, c1, "jobs", "JobTenant = 'acme'", "wf-persist")
	walFile := filepath.Join(dir, DBFileName+"-wal")
	if _, err := os.Stat(walFile); err != nil {
		t.Fatalf("database not in WAL mode: %v", err)
	}

	// A second server on the same DataDir is refused while the first runs.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := Start(ctx, opts); err == nil {
		_ = s.Stop()
		t.Fatal("second Start on a busy DataDir succeeded")
	} else if !strings.Contains(err.Error(), "DataDir") {
		t.Fatalf("busy DataDir error does not name the field: %v", err)
	}

	c1.Close()
	if err := s1.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if s1.releaseErr != nil {
		t.Fatalf("SQLite connection not released: %v", s1.releaseErr)
	}
	// Closing the last connection checkpoints and removes the WAL: the file was released.
	if _, err := os.Stat(walFile); !os.IsNotExist(err) {
		t.Fatalf("WAL file still there after Stop (connection not closed?): %v", err)
	}

	s2 := startServer(t, opts)
	c2 := dial(t, s2)
	desc, err := c2.DescribeWorkflowExecution(context.Background(), "wf-persist", "")
	if err != nil {
		t.Fatalf("workflow lost across restart: %v", err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("status after restart = %v", st)
	}
	sa, err := c2.OperatorService().ListSearchAttributes(context.Background(),
		&operatorservice.ListSearchAttributesRequest{Namespace: "jobs"})
	if err != nil {
		t.Fatalf("ListSearchAttributes: %v", err)
	}
	for name, typ := range jobAttrs {
		if sa.GetCustomAttributes()[name] != typ {
			t.Fatalf("search attribute %s after restart = %v, want %v", name, sa.GetCustomAttributes()[name], typ)
		}
	}
	waitListed(t, c2, "jobs", "JobTenant = 'acme'", "wf-persist")
}

func TestTwoServersInParallel(t *testing.T) {
	testenv.Heavy(t, "starts two Temporal servers")
	var wg sync.WaitGroup
	servers := make([]*Server, 2)
	errs := make([]error, 2)
	for i := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			servers[i], errs[i] = Start(ctx, Options{SearchAttributes: jobAttrs, UIPort: UIDisabled})
		}()
	}
	wg.Wait()
	for i, s := range servers {
		if errs[i] != nil {
			t.Fatalf("server %d: %v", i, errs[i])
		}
		t.Cleanup(func() { _ = s.Stop() })
	}
	if servers[0].FrontendHostPort() == servers[1].FrontendHostPort() {
		t.Fatalf("both servers on %s", servers[0].FrontendHostPort())
	}
	for i, s := range servers {
		t.Run(fmt.Sprint("server", i), func(t *testing.T) {
			t.Parallel()
			c := dial(t, s)
			id := fmt.Sprint("wf-par-", i)
			runEcho(t, c, id, temporal.NewSearchAttributes(jobTenant.ValueSet("acme")))
			waitListed(t, c, s.Namespace(), "JobTenant = 'acme'", id)
			// Isolation: the other server's workflow is not visible here.
			other := fmt.Sprint("wf-par-", 1-i)
			if _, err := c.DescribeWorkflowExecution(context.Background(), other, ""); err == nil {
				t.Fatalf("server %d sees %s", i, other)
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		opts  Options
		field string
	}{
		{Options{IP: "not-an-ip"}, "Options.IP"},
		{Options{FrontendPort: 70000}, "Options.FrontendPort"},
		{Options{UIPort: -2}, "Options.UIPort"},
		{Options{Retention: time.Minute}, "Options.Retention"},
		{Options{SearchAttributes: map[string]enumspb.IndexedValueType{"X": 99}}, "Options.SearchAttributes"},
		{Options{SearchAttributes: map[string]enumspb.IndexedValueType{"": enumspb.INDEXED_VALUE_TYPE_KEYWORD}}, "Options.SearchAttributes"},
		{Options{UIPort: UIDisabled, UIAuth: &UIAuth{ProviderURL: "http://127.0.0.1:1", ClientID: "ui"}}, "Options.UIAuth"},
		{Options{UIAuth: &UIAuth{ProviderURL: "ftp://idp.example", ClientID: "ui"}}, "Options.UIAuth.ProviderURL"},
		{Options{UIAuth: &UIAuth{ProviderURL: "http://127.0.0.1:1"}}, "Options.UIAuth.ClientID"},
		// The UI passes no token to an http codec: refused rather than silently tokenless.
		{Options{UIAuth: &UIAuth{ProviderURL: "http://127.0.0.1:1", ClientID: "ui"}, UICodecEndpoint: "http://127.0.0.1:8080/codec"}, "Options.UICodecEndpoint"},
	}
	for _, tc := range cases {
		s, err := Start(ctx, tc.opts)
		if err == nil {
			_ = s.Stop()
			t.Fatalf("Start(%+v) succeeded", tc.opts)
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Start(%+v) error %q does not name %s", tc.opts, err, tc.field)
		}
	}
	// A taken explicit port is reported, not fatal.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	for _, opts := range []Options{{FrontendPort: port}, {UIPort: port}} {
		if s, err := Start(ctx, opts); err == nil {
			_ = s.Stop()
			t.Fatalf("Start(%+v) on a taken port succeeded", opts)
		} else if !strings.Contains(err.Error(), "Port") {
			t.Errorf("taken port error does not name the field: %v", err)
		}
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(ctx, Options{DataDir: file}); err == nil || !strings.Contains(err.Error(), "Options.DataDir") {
		t.Errorf("DataDir pointing to a file: %v", err)
	}
}

// TestUIAuthBadProvider: a provider whose discovery names another issuer fails Start with an
// error naming the field, where ui-server itself would have ended the process (log.Fatal).
func TestUIAuthBadProvider(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"https://someone-else.example"}`))
	}))
	defer idp.Close()
	for _, provider := range []string{idp.URL, idp.URL + "/nothing-here"} {
		s, err := Start(context.Background(), Options{UIPort: 0, UIAuth: &UIAuth{ProviderURL: provider, ClientID: "ui"}})
		if err == nil {
			_ = s.Stop()
			t.Fatalf("Start with provider %s succeeded", provider)
		}
		if !strings.Contains(err.Error(), "Options.UIAuth.ProviderURL") {
			t.Errorf("provider %s: error %q does not name Options.UIAuth.ProviderURL", provider, err)
		}
	}
}
