package tests

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// tsClientV2Dir holds the 2026-07-28 checks driven by the official TypeScript MCP client v2
// (@modelcontextprotocol/client) and the Tasks extension's requester (@modelcontextprotocol/ext-tasks).
const tsClientV2Dir = "tsclientv2"

// TestTypeScriptClientV2 runs tests/tsclientv2/contract.mjs against a real bundle with a worker:
// the v2 client pinned to 2026-07-28, with `auto` and `legacy` negotiation, MRTR (automatic and
// manual), the wire's 404/-32601 and 400/-32602 answers as the client surfaces them, and
// ext-tasks task sessions (a start_* as a task, input through tasks/update, cancel, an unknown
// taskId) and Client.listen with notifications/tasks.
func TestTypeScriptClientV2(t *testing.T) {
	testenv.Heavy(t, "runs the TypeScript MCP client v2 on Node.js")
	t.Parallel()
	node := tsNeed(t, "node")
	if _, err := os.Stat(filepath.Join(tsClientV2Dir, "node_modules", "@modelcontextprotocol", "ext-tasks", "package.json")); err != nil {
		npm := tsNeed(t, "npm")
		npmCI(t, npm, tsClientV2Dir, 5*time.Minute)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	list := exec.CommandContext(ctx, node, "contract.mjs", "--list")
	list.Dir = tsClientV2Dir
	out, err := list.Output()
	cancel()
	if err != nil {
		t.Fatalf("node contract.mjs --list: %v", err)
	}
	planned := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(planned) < 10 {
		t.Fatalf("contract.mjs plans only %d checks: %q", len(planned), planned)
	}

	b := setup(t)
	ctx, cancel = context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "contract.mjs")
	cmd.Dir = tsClientV2Dir
	cmd.Env = append(os.Environ(), "JOBGATE_URL="+b.url(0), "JOBGATE_TOKEN_ANA="+b.token(ana))
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
	if ctx.Err() != nil {
		t.Fatalf("node contract.mjs timed out: %v", ctx.Err())
	}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		t.Fatalf("node contract.mjs: %v", runErr)
	}

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
	if runErr != nil {
		t.Errorf("node contract.mjs exited with %v", runErr)
	}
	m := tsSummary.FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("no %q line in the output", "N passed, M failed")
	}
	passed, _ := strconv.Atoi(m[1])
	failed, _ := strconv.Atoi(m[2])
	if failed != 0 || passed != len(planned) || failed != fails {
		t.Errorf("summary %q: want %d passed, 0 failed (%d FAIL lines)", summary, len(planned), fails)
	}
	for _, name := range planned {
		if fails == 0 && !okNames[name] {
			t.Errorf("check %q reported no ok line", name)
		}
	}
}
