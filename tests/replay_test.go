package tests

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/workflows"
)

// runReplay runs `<bin> replay` against the package's Temporal, limited to the bundle's task
// queue (its jobs and their children), and returns its output and exit status.
func runReplay(t *testing.T, bin string, b *testBundle, extra ...string) (string, int) {
	t.Helper()
	args := append([]string{"replay", "--temporal-address", temporalAddr, "--namespace", namespace,
		"--query", "TaskQueue = '" + b.taskQueue + "'"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), b.payloadEnv()...) // the histories are sealed with the bundle's keys
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("replay: %v\n%s", err, out)
	return "", -1
}

// TestReplayCommand runs jobs of each kind (an eval, an export approved by a steward, whose
// retention child then sleeps, and an export still awaiting approval), then `jobgate replay`:
// built from this code it replays every history (exit 0); built with the deliberately
// incompatible change (-tags jobgate_breaking_change) it exits 1 with one FAIL line per job
// naming its workflow ID and the event where it diverged.
func TestReplayCommand(t *testing.T) {
	t.Parallel()
	bins := buildGo(t, jobgateTarget, jobgateBreakingTarget)
	b, csAna, exp, waiting := exAwaiting(t, "csv", "id", "name", "email")
	mustView(t, exResume(t, b.session(steward, 1, ""), waiting, "approve"))
	exWait(t, csAna, exp.Handle, workflows.StatusSucceeded, 60*time.Second)
	ev := mustView(t, call(t, csAna, "start_eval", startArgs(uniqueKey(t), 3, map[string]any{"episode_ms": 10, "fail_rate": 0})))
	waitStatus(t, csAna, ev.Handle, workflows.StatusSucceeded, 60*time.Second)
	open := mustView(t, exStart(t, csAna, uniqueKey(t)+"-open", "csv", []string{"id", "email"}))
	exWait(t, csAna, open.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	jobs := []string{exp.JobID, ev.JobID, open.JobID}

	out, code := runReplay(t, bins[0], b)
	t.Logf("jobgate replay:\n%s", out)
	if code != 0 {
		t.Fatalf("replay of this build's own histories: exit %d, want 0", code)
	}
	for _, id := range jobs {
		if !regexp.MustCompile(`(?m)^ok +jobgate\.\w+ ` + regexp.QuoteMeta(id) + ` run `).MatchString(out) {
			t.Errorf("no ok line for %s", id)
		}
	}
	if !regexp.MustCompile(`(?m)^ok +jobgate\.ExportRetention ` + regexp.QuoteMeta(exp.JobID) + `/retention/`).MatchString(out) {
		t.Errorf("the export's retention child was not replayed")
	}
	if !strings.Contains(out, "(open, ") {
		t.Errorf("no open execution replayed")
	}
	if !regexp.MustCompile(`(?m)^replay: \d+ executions of namespace default: \d+ ok, 0 failed, 0 not fetched$`).MatchString(out) {
		t.Errorf("summary line missing or wrong")
	}

	out, code = runReplay(t, bins[1], b)
	t.Logf("jobgate replay (built with -tags jobgate_breaking_change):\n%s", out)
	if code != 1 {
		t.Fatalf("replay with an incompatible change: exit %d, want 1", code)
	}
	for _, id := range jobs {
		re := regexp.MustCompile(`(?m)^FAIL +jobgate\.\w+ ` + regexp.QuoteMeta(id) + ` run [0-9a-f-]+ \((open|closed)\): diverged at event \d+ \w+: .*TMPRL1100`)
		if !re.MatchString(out) {
			t.Errorf("no FAIL line naming %s and the diverging event", id)
		}
	}

	// Usage errors exit 2.
	if _, code := runReplay(t, bins[0], b, "--sample", "0"); code != 2 {
		t.Errorf("--sample 0: exit %d, want 2", code)
	}
	if _, code := runReplay(t, bins[0], b, "--query", "NoSuchAttribute = 'x'"); code != 2 {
		t.Errorf("a query the server refuses: exit %d, want 2", code)
	}
}
