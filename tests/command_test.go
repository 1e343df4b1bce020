package tests

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobgate/jobgate/workflows"
)

// acCommandSuite writes script to a temp dir and returns a suites file running it with sh,
// and the dir (the script sees it as $D).
func acCommandSuite(t *testing.T, script string) (suitesJSON, dir string) {
	t.Helper()
	dir = t.TempDir()
	path := filepath.Join(dir, "episode.sh")
	must(t, os.WriteFile(path, []byte("#!/bin/sh\nD='"+dir+"'\n"+script), 0o700))
	return fmt.Sprintf(`{"suites":[{"name":"cmd","kind":"command","command":["sh",%q],"heartbeat_timeout":"5s"}]}`, path), dir
}

// acProcGone reports whether pid no longer runs. A zombie counts as gone: it is dead and only
// waits to be reaped by its parent (an orphan's parent is PID 1, outside the test's control).
func acProcGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if rerr != nil {
		return os.IsNotExist(rerr)
	}
	// /proc/<pid>/stat: "pid (comm) S ..."; comm may hold spaces or parens, so split at the last ')'.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z' || stat[i+2] == 'X'
	}
	return false
}

func TestCommandSuiteScores(t *testing.T) {
	t.Parallel()
	suites, dir := acCommandSuite(t, `set -e
echo "$JOBGATE_OPERATION_ID" >> "$D/ops"
awk -v i="$JOBGATE_EPISODE_INDEX" 'BEGIN { printf "some log line\n{\"score\": %g}\n", i / 10 }'
`)
	b := setup(t, setupOpts{suitesJSON: suites})
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", acStartArgs(uniqueKey(t), "cmd", 4, 2, nil)))
	done := waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 30*time.Second)

	res := acResult(t, done)
	if res.Episodes != 4 || res.Scored != 4 || res.Failed != 0 || res.Passed != 0 {
		t.Errorf("result = %+v", res)
	}
	if !acNear(res.MeanScore, 0.15) {
		t.Errorf("mean_score = %v, want 0.15", res.MeanScore)
	}
	// scores 0, .1, .2, .3: sample variance 0.05/3, std_err sqrt(variance/4).
	if want := math.Sqrt(0.05 / 3 / 4); math.Abs(res.StdErr-want) > 1e-9 {
		t.Errorf("std_err = %v, want %v", res.StdErr, want)
	}

	raw, err := os.ReadFile(filepath.Join(dir, "ops"))
	must(t, err)
	lines := strings.Fields(string(raw))
	sort.Strings(lines)
	var want []string
	for i := range 4 {
		want = append(want, operationID(t, b.temporal, v.JobID, i))
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("operation IDs seen by the command:\n%s\nwant one run each of:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestCommandSuiteKilledOnCancel(t *testing.T) {
	t.Parallel()
	// Each episode leaves a background child and then becomes a long sleep itself; both PIDs are
	// published atomically (write, then rename) so a reader never sees half a number.
	suites, dir := acCommandSuite(t, `i="$JOBGATE_EPISODE_INDEX"
sleep 300 >/dev/null 2>&1 &
echo $! > "$D/.child-$i" && mv "$D/.child-$i" "$D/child-$i"
echo $$ > "$D/.pid-$i" && mv "$D/.pid-$i" "$D/pid-$i"
exec sleep 300
`)
	b := setup(t, setupOpts{suitesJSON: suites})
	cs := b.session(ana, 0, "")
	const episodes = 3
	v := mustView(t, call(t, cs, "start_eval", acStartArgs(uniqueKey(t), "cmd", episodes, episodes, nil)))

	var pids []int
	eventually(t, 30*time.Second, "every episode to publish its PIDs", func() bool {
		pids = pids[:0]
		for i := 0; i < episodes; i++ {
			for _, name := range []string{"pid", "child"} {
				data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-%d", name, i)))
				if err != nil {
					return false
				}
				pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
				must(t, err)
				pids = append(pids, pid)
			}
		}
		return true
	})
	t.Cleanup(func() {
		if t.Failed() { // don't leave sleeps behind a failed run
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	for _, pid := range pids {
		if acProcGone(pid) {
			t.Fatalf("episode process %d is not running before the cancel", pid)
		}
	}
	eventually(t, 20*time.Second, "3 started episodes", func() bool { return acStartedEpisodes(t, b, v.JobID) == episodes })

	mustView(t, call(t, b.session(ana, 1, ""), "cancel_eval", map[string]any{"handle": v.Handle, "reason": "stop the commands"}))
	done := waitStatus(t, cs, v.Handle, workflows.StatusCancelled, 30*time.Second)
	if done.Error == nil || done.Error.Code != workflows.ErrCodeCancelled {
		t.Fatalf("error = %+v, want code cancelled", done.Error)
	}
	// WaitForCancellation: the job only reports cancelled once each episode has stopped, so the
	// process groups are already killed; allow a moment for the kernel to tear them down.
	eventually(t, 10*time.Second, "every episode process and child to be gone", func() bool {
		for _, pid := range pids {
			if !acProcGone(pid) {
				return false
			}
		}
		return true
	})
	acCheckCancelledHistory(t, b, v.JobID, episodes)
}
