package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// TestDevStackRestartKeepsJobs runs the real `jobgate dev` wiring twice on one data dir.
func TestDevStackRestartKeepsJobs(t *testing.T) {
	testenv.Heavy(t, "starts the dev stack (a Temporal server of its own and the Web UI) twice")
	t.Parallel()
	dir := t.TempDir()
	start := func() (*app.DevMain, *bytes.Buffer) {
		var out bytes.Buffer
		m := &app.DevMain{Config: app.DevConfig{DataDir: dir, Listen: "127.0.0.1:0", TemporalPort: 0, UIPort: 0, TokenTTL: time.Hour}, Out: &out}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		must(t, m.Run(ctx))
		return m, &out
	}
	m, out := start()
	for _, want := range []string{"MCP endpoint", "Identity provider " + m.IdPIssuer() + " (dev only)", "Temporal Web UI", "acme    ana", "acme    steward", "globex  gus", `"mcpServers"`} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("banner lacks %q:\n%s", want, out)
		}
	}
	cs := devSession(t, m)
	key := uniqueKey(t)
	v := mustView(t, call(t, cs, "start_eval", startArgs(key, 101, map[string]any{"episode_ms": 10})))
	w := waitStatus(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	if !strings.Contains(v.UIURL, "/namespaces/default/workflows/acme%2Feval%2Fana%2F"+key+"/") {
		t.Fatalf("ui_url %s", v.UIURL)
	}
	resp, err := http.Get(strings.SplitN(v.UIURL, "/namespaces", 2)[0] + "/")
	must(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ToLower(string(page)), "<html") {
		t.Fatalf("web UI: %d", resp.StatusCode)
	}
	must(t, cs.Close())
	must(t, m.Close())

	// Same data dir: the job, its open approval, the token secret and handle keys all survive.
	m2, _ := start()
	t.Cleanup(func() { _ = m2.Close() })
	cs2 := devSession(t, m2)
	again := mustView(t, call(t, cs2, "get_eval", map[string]any{"handle": v.Handle}))
	if again.Status != workflows.StatusAwaitingInput || again.NeedsInput == nil || again.NeedsInput.InputID != w.NeedsInput.InputID {
		t.Fatalf("after restart: %+v", again)
	}
	mustView(t, call(t, cs2, "resume_eval", map[string]any{"handle": v.Handle, "input_id": w.NeedsInput.InputID,
		"scope_digest": w.NeedsInput.ScopeDigest, "decision": "approve"}))
	done := waitStatus(t, cs2, v.Handle, workflows.StatusSucceeded, 60*time.Second)
	if done.Progress.Done+done.Progress.Failed != 101 {
		t.Fatalf("progress %+v", done.Progress)
	}
}

// TestDevProcessNamesIdP: the real `jobgate dev` binary prints its identity provider's issuer,
// and the MCP endpoint's RFC 9728 metadata names that issuer, whose RFC 8414 metadata answers
// where MCP clients look first.
func TestDevProcessNamesIdP(t *testing.T) {
	testenv.Heavy(t, "spawns `jobgate dev`")
	t.Parallel()
	p := startProc(t, exec.Command(jobgateBinary(t), "dev", "--ephemeral", "--listen", "127.0.0.1:0", "--temporal-port", "0", "--ui-port", "-1"), true)
	eventually(t, 90*time.Second, "dev banner", func() bool { return strings.Contains(p.logs(), "Ctrl-C stops") })
	banner := p.logs()
	mcpURL := regexp.MustCompile(`MCP endpoint +(http://localhost:[0-9]+)/mcp\n`).FindStringSubmatch(banner)
	iss := regexp.MustCompile(`Identity provider (http://localhost:[0-9]+/oidc) \(dev only\)\n`).FindStringSubmatch(banner)
	if mcpURL == nil || iss == nil || iss[1] != mcpURL[1]+"/oidc" ||
		!strings.Contains(banner, "claude mcp add --transport http jobgate "+mcpURL[1]+"/mcp\n") {
		t.Fatalf("banner:\n%s", banner)
	}
	getJSON := func(u string) map[string]any {
		resp, err := http.Get(u)
		must(t, err)
		defer resp.Body.Close()
		var v map[string]any
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
			t.Fatalf("GET %s: %s", u, resp.Status)
		}
		return v
	}
	prm := getJSON(mcpURL[1] + "/.well-known/oauth-protected-resource/mcp")
	if as, _ := prm["authorization_servers"].([]any); len(as) != 1 || as[0] != iss[1] {
		t.Fatalf("RFC 9728 metadata: %v, want authorization_servers [%s]", prm, iss[1])
	}
	md := getJSON(mcpURL[1] + "/.well-known/oauth-authorization-server/oidc")
	if md["issuer"] != iss[1] || md["registration_endpoint"] != iss[1]+"/register" {
		t.Fatalf("RFC 8414 metadata: %v", md)
	}
}

func devSession(t *testing.T, m *app.DevMain) *mcp.ClientSession {
	t.Helper()
	tok, err := m.MintDevToken("acme", "ana", []authz.Scope{authz.ScopeRead, authz.ScopeWrite}, time.Hour)
	must(t, err)
	hc := &http.Client{Transport: bearerRT{token: tok, base: http.DefaultTransport}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The resource URI says localhost; connect the same way a local client would.
	url := "http://localhost:" + m.Addr()[strings.LastIndex(m.Addr(), ":")+1:] + "/mcp"
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "dev-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	must(t, err)
	return cs
}

// TestTwoThousandEpisodes runs one 2,000-episode job through continue-as-new (1,000 episodes a
// run) and checks nothing is lost or counted twice across runs.
func TestTwoThousandEpisodes(t *testing.T) {
	testenv.Heavy(t, "runs 2,000 episodes")
	t.Parallel()
	b := setup(t, setupOpts{suitesJSON: `{"suites":[{"name":"bulk","kind":"demo","approval_threshold":0}]}`})
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", map[string]any{"idempotency_key": uniqueKey(t), "suite": "bulk",
		"episodes": 2000, "concurrency": 64, "params": map[string]any{"episode_ms": 0, "fail_rate": 0.1}}))
	var f = v
	eventually(t, 4*time.Minute, "2,000 episodes", func() bool {
		f = mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v.Handle}))
		return f.Status.Terminal()
	})
	if f.Status != workflows.StatusSucceeded {
		t.Fatalf("status %s %+v", f.Status, f.Error)
	}
	res := f.Result.(map[string]any)
	scored, failed := int(res["scored"].(float64)), int(res["failed"].(float64))
	if scored+failed != 2000 || failed < 120 || failed > 280 {
		t.Fatalf("scored %d failed %d", scored, failed)
	}
	if n := runsOf(t, b, v.JobID); n < 2 {
		t.Fatalf("%d runs: expected continue-as-new", n)
	}
}
