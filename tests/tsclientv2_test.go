package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	runContractScript(t, node, tsClientV2Dir, append(os.Environ(), "JOBGATE_URL="+b.url(0), "JOBGATE_TOKEN_ANA="+b.token(ana)), planned)
}
