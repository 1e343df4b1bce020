package tests

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// cliResult is one run of the jobgate binary as a client.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the built jobgate binary against replica 0 of b with tok as JOBGATE_TOKEN.
// Its stdout is a pipe, not a terminal: commands print plain lines, no progress bars.
func runCLI(t *testing.T, b *testBundle, tok string, args ...string) cliResult {
	t.Helper()
	return runCLIAt(t, b.url(0), tok, args...)
}

// runCLIAt runs the built jobgate binary against the MCP endpoint url with tok as JOBGATE_TOKEN.
func runCLIAt(t *testing.T, url, tok string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, jobgateBinary(t), args...)
	cmd.Env = append(os.Environ(), "JOBGATE_URL="+url, "JOBGATE_TOKEN="+tok)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("jobgate %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("jobgate %s: did not finish in time\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.stdout, r.stderr)
	}
	t.Logf("$ jobgate %s → exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

func (r cliResult) mustSucceed(t *testing.T, what string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", what, r.code, r.stdout, r.stderr)
	}
}

// cliStartExport starts an export of customers (id, name, email: email is sensitive) as cs's
// principal and waits until it asks for an approver.
func cliStartExport(t *testing.T, cs *mcp.ClientSession, key, purpose string) *jobcore.JobView {
	t.Helper()
	v := mustView(t, call(t, cs, "start_export", map[string]any{"idempotency_key": key, "dataset": "customers",
		"format": "csv", "columns": []string{"id", "name", "email"}, "purpose": purpose}))
	eventually(t, time.Minute, "export "+key+" awaiting_input", func() bool {
		v = mustView(t, call(t, cs, "get_export", map[string]any{"handle": v.Handle}))
		if v.Status.Terminal() {
			t.Fatalf("export %s ended %s before approval: %+v", key, v.Status, v.Error)
		}
		return v.Status == workflows.StatusAwaitingInput
	})
	if v.NeedsInput == nil || v.NeedsInput.Approver != authz.ApproverApprover {
		t.Fatalf("export %s: want needs_input for an approver, got %+v", key, v.NeedsInput)
	}
	return v
}

// listedHandle finds job id's block in `approvals list` output and returns its handle line.
func listedHandle(t *testing.T, out, id string) (handle, block string) {
	t.Helper()
	for _, blk := range strings.Split(out, "\n\n") {
		if !strings.Contains(blk, id+" (export)") {
			continue
		}
		m := regexp.MustCompile(`(?m)^\s*handle:\s+(\S+)$`).FindStringSubmatch(blk)
		if m == nil {
			t.Fatalf("block of %s has no handle line:\n%s", id, blk)
		}
		return m[1], blk
	}
	t.Fatalf("approvals list does not show %s:\n%s", id, out)
	return "", ""
}

// TestCLIApprovalFlow: the humans' side through the real binary — a steward lists and approves
// an export through `jobgate approvals`, its owner watches it finish and downloads the verified
// file; the owner cannot approve their own export (four eyes), and an export awaiting approval
// has nothing to download.
func TestCLIApprovalFlow(t *testing.T) {
	testenv.Heavy(t, "runs the jobgate CLI binary")
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	jobgateBinary(t) // build while the exports start
	cs := b.session(ana, 0, "")
	const purpose = "churn model for the CLI test"
	v1 := cliStartExport(t, cs, uniqueKey(t)+"-a", purpose)
	v2 := cliStartExport(t, cs, uniqueKey(t)+"-b", "second export, left waiting")
	stewardTok, anaTok := b.token(steward), b.token(ana)

	// The steward sees who asks for what.
	list := runCLI(t, b, stewardTok, "approvals", "list")
	list.mustSucceed(t, "approvals list")
	h1, blk := listedHandle(t, list.stdout, v1.JobID)
	for _, want := range []string{"asked by:", "ana", purpose, "email", "sensitive:", "customers", "csv", "rows:", "up to ", "expires:", " (in "} {
		if !strings.Contains(blk, want) {
			t.Errorf("approvals list block of %s lacks %q:\n%s", v1.JobID, want, blk)
		}
	}
	listedHandle(t, list.stdout, v2.JobID)
	js := runCLI(t, b, stewardTok, "approvals", "list", "--kind", "export", "--json")
	js.mustSucceed(t, "approvals list --json")
	var rows []jobcore.JobSummary
	must(t, json.Unmarshal([]byte(js.stdout), &rows))
	// Other tests of tenant acme run alongside in the same namespace: count this test's jobs.
	mine := 0
	for _, r := range rows {
		if r.JobID == v1.JobID || r.JobID == v2.JobID {
			mine++
		}
	}
	if mine != 2 {
		t.Errorf("approvals list --json: want this test's 2 jobs among %d rows, got %d", len(rows), mine)
	}

	// Four eyes: the owner cannot approve — neither with her ordinary token nor with one that
	// also carries jobs:approve.
	anaApprover := principal{"acme", "ana", []authz.Scope{authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove}}
	for _, tok := range []string{anaTok, b.token(anaApprover)} {
		r := runCLI(t, b, tok, "approvals", "approve", v2.Handle, "--comment", "self")
		if r.code == 0 || !strings.Contains(r.stderr, "forbidden: ") {
			t.Errorf("owner approving her own export: want a non-zero exit and a forbidden error, got exit %d\n%s", r.code, r.stderr)
		}
	}
	if v := mustView(t, call(t, cs, "get_export", map[string]any{"handle": v2.Handle})); v.Status != workflows.StatusAwaitingInput {
		t.Fatalf("after the owner's refused approvals the export is %s, want still awaiting_input", v.Status)
	}

	// Nothing to download while the export awaits approval.
	dir := t.TempDir()
	r := runCLI(t, b, anaTok, "jobs", "download", v2.Handle, "-o", filepath.Join(dir, "early.csv.gz"))
	if r.code == 0 || !strings.Contains(r.stderr, "awaiting_input") || !strings.Contains(r.stderr, "no file until it has succeeded") {
		t.Errorf("download of an awaiting export: want a non-zero exit saying it awaits approval, got exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "early.csv.gz")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused download left a file: %v", err)
	}

	// The steward approves, with the handle the list gave.
	ap := runCLI(t, b, stewardTok, "approvals", "approve", h1, "--comment", "ok")
	ap.mustSucceed(t, "approvals approve")
	if !strings.Contains(ap.stdout, "approved: export job "+v1.JobID+" is now ") || !strings.Contains(ap.stdout, purpose) {
		t.Errorf("approvals approve output lacks the scope or the resulting status:\n%s", ap.stdout)
	}

	// The owner watches it to the end: plain lines (stdout is no terminal), exit 0.
	w := runCLI(t, b, anaTok, "jobs", "watch", v1.Handle, "--interval", "200ms")
	w.mustSucceed(t, "jobs watch")
	if !regexp.MustCompile(`(?m)^succeeded 5000/5000 rows`).MatchString(w.stdout) {
		t.Errorf("jobs watch: want a final line 'succeeded 5000/5000 rows …', got:\n%s", w.stdout)
	}
	lines := strings.Split(strings.TrimSpace(w.stdout), "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i] == lines[i-1] {
			t.Errorf("jobs watch repeated an unchanged line %q", lines[i])
		}
	}

	g := runCLI(t, b, anaTok, "jobs", "get", v1.Handle)
	g.mustSucceed(t, "jobs get")
	for _, want := range []string{"status:", "succeeded", "approved by:", "steward", "sha256:"} {
		if !strings.Contains(g.stdout, want) {
			t.Errorf("jobs get lacks %q:\n%s", want, g.stdout)
		}
	}

	// Download: verified, complete.
	out := filepath.Join(dir, "out.csv.gz")
	d := runCLI(t, b, anaTok, "jobs", "download", v1.Handle, "-o", out)
	d.mustSucceed(t, "jobs download")
	if !strings.Contains(d.stdout, "sha256 verified") || !strings.Contains(d.stdout, "Repr-Digest") {
		t.Errorf("jobs download does not report the verified sha256:\n%s", d.stdout)
	}
	f, err := os.Open(out)
	must(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	must(t, err)
	sc := bufio.NewScanner(zr)
	n, header := 0, ""
	for sc.Scan() {
		if n == 0 {
			header = strings.TrimSuffix(sc.Text(), "\r")
		}
		n++
	}
	must(t, sc.Err())
	if header != "id,name,email" || n != 5001 {
		t.Errorf("downloaded file: header %q and %d lines, want id,name,email and 5001 (header + 5000 acme rows)", header, n)
	}
	entries, err := os.ReadDir(dir)
	must(t, err)
	for _, e := range entries {
		if e.Name() != "out.csv.gz" {
			t.Errorf("download left %s behind", e.Name())
		}
	}
	// Downloading again over the file needs --force.
	if r := runCLI(t, b, anaTok, "jobs", "download", v1.Handle, "-o", out); r.code == 0 || !strings.Contains(r.stderr, "--force") {
		t.Errorf("download over an existing file: want a refusal naming --force, got exit %d\n%s", r.code, r.stderr)
	}
}

// TestCLIWatchEval: `jobs watch` follows an eval (the CLI finds its kind from the handle alone)
// with one plain line per change up to exit 0, and exits 1 naming the error for a cancelled one.
func TestCLIWatchEval(t *testing.T) {
	testenv.Heavy(t, "runs the jobgate CLI binary")
	t.Parallel()
	b := setup(t)
	jobgateBinary(t)
	cs := b.session(ana, 0, "")
	tok := b.token(ana)

	args := startArgs(uniqueKey(t), 12, map[string]any{"episode_ms": 300, "fail_rate": 0})
	args["concurrency"] = 2 // about two seconds: the watch sees it running
	v := mustView(t, call(t, cs, "start_eval", args))
	w := runCLI(t, b, tok, "jobs", "watch", v.Handle, "--interval", "100ms")
	w.mustSucceed(t, "jobs watch (eval)")
	lines := strings.Split(strings.TrimSpace(w.stdout), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "succeeded 12/12 episodes") {
		t.Errorf("jobs watch: last line %q, want 'succeeded 12/12 episodes …'", last)
	}
	if len(lines) < 2 {
		t.Errorf("jobs watch of a running eval printed no progress before the end:\n%s", w.stdout)
	}
	for i := 1; i < len(lines); i++ {
		if lines[i] == lines[i-1] {
			t.Errorf("jobs watch repeated an unchanged line %q", lines[i])
		}
	}
	g := runCLI(t, b, tok, "jobs", "get", v.Handle, "--json")
	g.mustSucceed(t, "jobs get --json (eval)")
	var view jobcore.JobView
	must(t, json.Unmarshal([]byte(g.stdout), &view))
	if view.Kind != "eval" || view.Status != workflows.StatusSucceeded || view.JobID != v.JobID {
		t.Errorf("jobs get --json: got kind %s status %s job %s", view.Kind, view.Status, view.JobID)
	}

	c := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 4, map[string]any{"episode_ms": 60000, "fail_rate": 0})))
	mustView(t, call(t, cs, "cancel_eval", map[string]any{"handle": c.Handle, "reason": "wrong model"}))
	r := runCLI(t, b, tok, "jobs", "watch", c.Handle, "--interval", "100ms")
	if r.code != 1 || !strings.Contains(r.stderr, "cancelled") {
		t.Errorf("jobs watch of a cancelled eval: want exit 1 naming the cancellation, got exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, b, tok, "jobs", "download", v.Handle); r.code != 1 || !strings.Contains(r.stderr, "only exports") {
		t.Errorf("jobs download of an eval: want exit 1 saying only exports have files, got exit %d\n%s", r.code, r.stderr)
	}
}
