package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// jsonDoc decodes r's stdout as one JSON value (--json of a single result); a stdout that is not
// exactly one JSON value fails the test.
func (r cliResult) jsonDoc(t *testing.T, what string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s --json: stdout is not a JSON object: %v\n%s", what, err, r.stdout)
	}
	if dec.More() {
		t.Fatalf("%s --json: more than one JSON value on stdout:\n%s", what, r.stdout)
	}
	return v
}

// jsonLines decodes r's stdout as JSON Lines.
func (r cliResult) jsonLines(t *testing.T, what string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("%s --json: line %q is not a JSON object: %v", what, l, err)
		}
		out = append(out, v)
	}
	return out
}

// TestCLIEveryCommandBothModes (issue 35 §1): against a real `jobgate dev` stack, every client
// command runs in both output modes. Text is for people; --json prints the tool's structured
// result unchanged (the same fields the MCP tool answers) and nothing else on stdout. Job IDs
// work wherever a handle is asked; an unknown job ID, another tenant's and another owner's are
// the same not_found with exit 1, in both modes. Exit codes: 0 ok, 1 refused or failed, 2 usage.
func TestCLIEveryCommandBothModes(t *testing.T) {
	testenv.Heavy(t, "runs `jobgate dev` and the jobgate CLI binary")
	t.Parallel()
	m := &app.DevMain{Config: app.DevConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", UIPort: -1, TokenTTL: time.Hour}, Out: &bytes.Buffer{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	must(t, m.Run(ctx))
	t.Cleanup(func() { _ = m.Close() })
	jobgateBinary(t)
	url := "http://localhost:" + m.Addr()[strings.LastIndex(m.Addr(), ":")+1:] + "/mcp"
	tok := func(p principal) string {
		s, err := m.MintDevToken(p.tenant, p.sub, p.scopes, time.Hour)
		must(t, err)
		return s
	}
	anaTok, boTok, gusTok := tok(ana), tok(bo), tok(gus)
	stewardTok := tok(principal{"acme", "steward", []authz.Scope{authz.ScopeRead, authz.ScopeApprove}})
	cli := func(tk string, args ...string) cliResult { return runCLIAt(t, url, tk, args...) }
	ok := func(tk string, args ...string) cliResult {
		t.Helper()
		r := cli(tk, args...)
		r.mustSucceed(t, strings.Join(args, " "))
		return r
	}

	cs := devSession(t, m)
	key := uniqueKey(t)
	ev := mustView(t, call(t, cs, "start_eval", startArgs(key, 30, map[string]any{"episode_ms": 20, "fail_rate": 0.2})))
	exports := map[string]*jobcore.JobView{}
	for _, k := range []string{"a", "b"} {
		exports[k] = cliStartExport(t, cs, key+"-"+k, "CLI modes "+k)
	}

	// whoami
	if r := ok(anaTok, "whoami"); !strings.Contains(r.stdout, "acme") {
		t.Errorf("whoami: %s", r.stdout)
	}
	if v := ok(anaTok, "whoami", "--json").jsonDoc(t, "whoami"); v["subject"] != "ana" || v["tenant"] != "acme" {
		t.Errorf("whoami --json: %v", v)
	}

	// jobs watch: by job ID, to the end; --json is JSON Lines of get_eval results.
	w := ok(anaTok, "jobs", "watch", ev.JobID, "--interval", "100ms")
	if !regexp.MustCompile(`(?m)^succeeded \d+/30 episodes`).MatchString(w.stdout) {
		t.Errorf("jobs watch by job ID: %s", w.stdout)
	}
	lines := ok(anaTok, "jobs", "watch", ev.JobID, "--json").jsonLines(t, "jobs watch")
	if last := lines[len(lines)-1]; last["job_id"] != ev.JobID || last["status"] != "succeeded" || last["result"] == nil {
		t.Errorf("jobs watch --json: last line %v", last)
	}

	// jobs list: the table leads with job IDs; --wide adds handles; --json is list_jobs' result.
	if r := ok(anaTok, "jobs", "list"); !strings.Contains(r.stdout, ev.JobID) || strings.Contains(r.stdout, "HANDLE") {
		t.Errorf("jobs list: %s", r.stdout)
	}
	if r := ok(anaTok, "jobs", "list", "--wide"); !strings.Contains(r.stdout, "HANDLE") || !strings.Contains(r.stdout, "jgh1.") {
		t.Errorf("jobs list --wide: want a HANDLE column with handles: %s", r.stdout)
	}
	page := ok(anaTok, "jobs", "list", "--json", "--kind", "eval").jsonDoc(t, "jobs list")
	rows, _ := page["jobs"].([]any)
	if len(rows) != 1 || rows[0].(map[string]any)["job_id"] != ev.JobID || rows[0].(map[string]any)["handle"] == "" {
		t.Errorf("jobs list --json: %v", page)
	}

	// jobs get: text with the score sparkline; --json is get_eval's result.
	g := ok(anaTok, "jobs", "get", ev.JobID)
	spark := regexp.MustCompile(`(?m)^scores: +▕[ ▁▂▃▄▅▆▇█]{10}▏ 0…1, (\d+) scored, mean [0-9.]+$`).FindStringSubmatch(g.stdout)
	if spark == nil || !strings.Contains(g.stdout, "episodes: ") {
		t.Errorf("jobs get of a finished eval: want a sparkline line:\n%s", g.stdout)
	}
	gj := ok(anaTok, "jobs", "get", ev.JobID, "--json").jsonDoc(t, "jobs get")
	direct := mustView(t, call(t, cs, "get_eval", map[string]any{"handle": ev.Handle}))
	res, _ := gj["result"].(map[string]any)
	if gj["job_id"] != direct.JobID || gj["status"] != string(direct.Status) || res == nil || spark == nil || fmt.Sprint(res["scored"]) != spark[1] {
		t.Errorf("jobs get --json: %v; want get_eval's %s %s with scored = the sparkline's count", gj, direct.JobID, direct.Status)
	}

	// describe and episodes.
	if r := ok(anaTok, "jobs", "describe", ev.JobID); !strings.Contains(r.stdout, "started by ana") {
		t.Errorf("jobs describe: %s", r.stdout)
	}
	if d := ok(anaTok, "jobs", "describe", ev.JobID, "--json").jsonDoc(t, "jobs describe"); d["job_id"] != ev.JobID || d["lines"] == nil {
		t.Errorf("jobs describe --json: %v", d)
	}
	if r := ok(anaTok, "jobs", "episodes", ev.JobID); strings.Count(r.stdout, "\n") != 31 {
		t.Errorf("jobs episodes: want a header and 30 rows:\n%s", r.stdout)
	}
	if eps := ok(anaTok, "jobs", "episodes", ev.JobID, "--json").jsonLines(t, "jobs episodes"); len(eps) != 30 {
		t.Errorf("jobs episodes --json: %d lines, want 30", len(eps))
	}

	// approvals: list in both modes; approve by job ID with --json (the resume_export result),
	// reject in text.
	if r := ok(stewardTok, "approvals", "list"); !strings.Contains(r.stdout, exports["a"].JobID) {
		t.Errorf("approvals list: %s", r.stdout)
	}
	var appr []map[string]any
	must(t, json.Unmarshal([]byte(ok(stewardTok, "approvals", "list", "--json").stdout), &appr))
	if len(appr) != 2 {
		t.Errorf("approvals list --json: %d rows, want 2", len(appr))
	}
	ap := ok(stewardTok, "approvals", "approve", exports["a"].JobID, "--comment", "ok", "--json")
	if v := ap.jsonDoc(t, "approvals approve"); v["job_id"] != exports["a"].JobID || !strings.Contains(ap.stderr, "approving the open input request") {
		t.Errorf("approvals approve --json: %v\nstderr: %s", v, ap.stderr)
	}
	if r := ok(stewardTok, "approvals", "reject", exports["b"].JobID, "--comment", "no"); !strings.Contains(r.stdout, "rejected: export job "+exports["b"].JobID) {
		t.Errorf("approvals reject: %s", r.stdout)
	}

	// download in both modes; --json prints get_export's result alone.
	ok(anaTok, "jobs", "watch", exports["a"].JobID, "--interval", "200ms")
	dir := t.TempDir()
	if r := ok(anaTok, "jobs", "download", exports["a"].JobID, "-o", filepath.Join(dir, "a.csv.gz")); !strings.Contains(r.stdout, "sha256 verified") {
		t.Errorf("jobs download: %s", r.stdout)
	}
	dl := ok(anaTok, "jobs", "download", exports["a"].JobID, "-o", filepath.Join(dir, "b.csv.gz"), "--json")
	if v := dl.jsonDoc(t, "jobs download"); v["job_id"] != exports["a"].JobID || !strings.Contains(dl.stderr, "sha256 verified") {
		t.Errorf("jobs download --json: %v\nstderr: %s", v, dl.stderr)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a.csv.gz"))
	b, _ := os.ReadFile(filepath.Join(dir, "b.csv.gz"))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("the two downloads differ or are empty: %d and %d bytes", len(a), len(b))
	}

	// Not yours, another tenant's, unknown: one answer, exit 1, in both modes.
	want := cli(anaTok, "jobs", "get", "acme/eval/ana/no-such-job")
	if want.code != 1 || !strings.Contains(want.stderr, "not_found") {
		t.Fatalf("unknown job ID: exit %d %s", want.code, want.stderr)
	}
	for _, c := range []struct {
		who, tok string
		args     []string
	}{
		{"bo (acme, not the owner)", boTok, []string{"jobs", "get", ev.JobID}},
		{"gus (globex)", gusTok, []string{"jobs", "get", ev.JobID}},
		{"ana, unknown, --json", anaTok, []string{"jobs", "get", "acme/eval/ana/no-such-job", "--json"}},
		{"bo, --json", boTok, []string{"jobs", "get", ev.JobID, "--json"}},
	} {
		if r := cli(c.tok, c.args...); r.code != want.code || r.stderr != want.stderr || r.stdout != "" {
			t.Errorf("%s: exit %d stdout %q stderr %q, want exactly the unknown job's exit %d %q", c.who, r.code, r.stdout, r.stderr, want.code, want.stderr)
		}
	}
	// Usage errors exit 2.
	if r := cli(anaTok, "jobs", "get"); r.code != 2 {
		t.Errorf("jobs get without a job: exit %d, want 2", r.code)
	}
	// version in both modes.
	if r := ok(anaTok, "version"); !strings.HasPrefix(r.stdout, "jobgate ") {
		t.Errorf("version: %s", r.stdout)
	}
	if v := ok(anaTok, "version", "--json").jsonDoc(t, "version"); v["module_path"] != "github.com/jobgate/jobgate" || v["go_version"] == nil {
		t.Errorf("version --json: %v", v)
	}
}
