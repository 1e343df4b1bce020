package tests

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// tsClientDir holds the contract checks driven by the official TypeScript MCP SDK client.
const tsClientDir = "tsclient"

var tsSummary = regexp.MustCompile(`^(\d+) passed, (\d+) failed$`)

// TestTypeScriptClient runs tests/tsclient/contract.mjs, the contract as seen through
// @modelcontextprotocol/sdk's Client (whose callTool validates structuredContent against the
// tool's outputSchema, error results included), against a real bundle with a worker and the
// customers export dataset. Artifact downloads go to replica 0: download_url names the bundle's
// resource URI (a load-balancer name), so the script keeps only its path.
func TestTypeScriptClient(t *testing.T) {
	testenv.Heavy(t, "runs the TypeScript MCP client on Node.js")
	t.Parallel()
	node := tsNeed(t, "node")
	if _, err := os.Stat(filepath.Join(tsClientDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		npm := tsNeed(t, "npm")
		npmCI(t, npm, tsClientDir, 5*time.Minute)
	}

	// The plan: every check the script will run, by name.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	list := exec.CommandContext(ctx, node, "contract.mjs", "--list")
	list.Dir = tsClientDir
	list.Env = append(os.Environ(), "JOBGATE_KINDS=") // every kind, as below
	out, err := list.Output()
	cancel()
	if err != nil {
		t.Fatalf("node contract.mjs --list: %v", err)
	}
	planned := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(planned) < 10 {
		t.Fatalf("contract.mjs plans only %d checks: %q", len(planned), planned)
	}

	// The export checks need the dev stack's customers dataset (5,000 acme rows).
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	unknown := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/no-such-job", Kind: "eval", Expiry: time.Now().Add(time.Hour)})
	env := append(os.Environ(),
		"JOBGATE_URL="+b.url(0),
		"JOBGATE_URL_ALT="+b.url(1),
		"JOBGATE_TOKEN_ANA="+b.token(ana),
		"JOBGATE_TOKEN_BO="+b.token(bo),
		"JOBGATE_TOKEN_STEWARD="+b.token(steward),
		"JOBGATE_TOKEN_OPS="+b.token(ops),
		"JOBGATE_TOKEN_GUS="+b.token(gus),
		"JOBGATE_UNKNOWN_HANDLE="+unknown,
		"JOBGATE_KINDS=",
	)

	runContractScript(t, node, tsClientDir, env, planned)
}

// tsNeed finds a tool on PATH: missing is a failure in CI and a skip elsewhere.
func tsNeed(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := name + " not found on PATH: the TypeScript MCP SDK client checks (tests/" + tsClientDir + ") need Node.js 20+ with npm"
	testenv.Missing(t, msg)
	return ""
}

// runContractScript runs `node contract.mjs` in dir with env (at most 4 minutes), logs its
// output, and fails t unless it printed an ok line for every planned check, no FAIL line, and
// the "N passed, M failed" summary to match: the TypeScript clients' contract runs (both eras).
func runContractScript(t *testing.T, node, dir string, env, planned []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "contract.mjs")
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	stderr, err := cmd.StderrPipe()
	must(t, err)
	must(t, cmd.Start())

	var (
		mu      sync.Mutex
		lines   []string
		readers sync.WaitGroup
	)
	stream := func(r io.Reader, prefix string, keep bool) {
		defer readers.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			t.Log(prefix + sc.Text())
			if keep {
				mu.Lock()
				lines = append(lines, sc.Text())
				mu.Unlock()
			}
		}
	}
	readers.Add(2)
	go stream(stdout, "", true)
	go stream(stderr, "stderr: ", false)
	readers.Wait()
	runErr := cmd.Wait()

	okNames := map[string]bool{}
	fails := 0
	summary := ""
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "FAIL "):
			t.Errorf("%s", l)
			fails++
		case strings.HasPrefix(l, "ok "):
			okNames[strings.TrimPrefix(l, "ok ")] = true
		case tsSummary.MatchString(l):
			summary = l
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("node contract.mjs timed out: %v", ctx.Err())
	}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		t.Fatalf("node contract.mjs: %v", runErr)
	}
	if runErr != nil {
		t.Errorf("node contract.mjs exited with %v", runErr)
	}
	m := tsSummary.FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("no %q line in the output", "N passed, M failed")
	}
	passed, _ := strconv.Atoi(m[1])
	failed, _ := strconv.Atoi(m[2])
	if failed != 0 || passed != len(planned) {
		t.Errorf("summary %q: want %d passed, 0 failed", summary, len(planned))
	}
	if failed != fails {
		t.Errorf("summary counts %d failed, the output has %d FAIL lines", failed, fails)
	}
	if fails == 0 {
		// Every planned check must have reported ok: none may be skipped silently.
		for _, name := range planned {
			if !okNames[name] {
				t.Errorf("check %q reported no ok line", name)
			}
		}
	}
}
