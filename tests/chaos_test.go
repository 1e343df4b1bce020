package tests

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// TestChaosWorkerSIGKILL: a worker dies mid-run; a new one finishes the job. Every episode is
// counted exactly once, and every attempt of an episode carries the same operation ID.
func TestChaosWorkerSIGKILL(t *testing.T) {
	testenv.Heavy(t, "spawns jobgate worker processes and SIGKILLs one")
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "episode.sh")
	must(t, os.WriteFile(script, []byte("#!/bin/sh\necho \"$JOBGATE_OPERATION_ID $JOBGATE_ATTEMPT\" >> "+dir+"/ops\nsleep 1\necho '{\"score\": 0.5}'\n"), 0o755))
	b := setup(t, setupOpts{noWorker: true, suitesJSON: `{"suites":[{"name":"cmd","kind":"command","command":["` + script +
		`"],"approval_threshold":0,"heartbeat_timeout":"2s","max_attempts":5}]}`})
	cs := b.session(ana, 0, "")
	w1 := b.spawn(t, "worker", "--suites", b.suites)
	v := mustView(t, call(t, cs, "start_eval", map[string]any{"idempotency_key": uniqueKey(t), "suite": "cmd", "episodes": 24, "concurrency": 4}))
	eventually(t, 60*time.Second, "some episodes done", func() bool {
		return mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v.Handle})).Progress.Done >= 4
	})
	w1.kill(t)
	b.spawn(t, "worker", "--suites", b.suites)
	f := waitStatus(t, b.session(ana, 1, ""), v.Handle, workflows.StatusSucceeded, 2*time.Minute)
	if f.Progress.Done != 24 || f.Progress.Failed != 0 {
		t.Fatalf("progress after worker death: %+v", f.Progress)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "ops"))
	must(t, err)
	ids := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		id := strings.Fields(line)[0]
		if !strings.HasPrefix(id, v.JobID+"#") {
			t.Fatalf("operation id %q is not derived from the job", id)
		}
		ids[id]++
	}
	if len(ids) != 24 {
		t.Fatalf("%d distinct operation ids, want 24", len(ids))
	}
	t.Logf("%d attempts for 24 episodes across a worker SIGKILL", len(strings.Split(strings.TrimSpace(string(raw)), "\n")))
}

// TestChaosFrontendSIGKILL: the replica that issued a handle dies; the other resolves it, and
// a replica restarted from scratch resolves it too.
func TestChaosFrontendSIGKILL(t *testing.T) {
	testenv.Heavy(t, "spawns jobgate serve processes and SIGKILLs one")
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	secret, keys := filepath.Join(dir, "hs256"), filepath.Join(dir, "handle-keys")
	must(t, os.WriteFile(secret, b.secret, 0o600))
	must(t, os.WriteFile(keys, []byte(b.keySpec), 0o600))
	serve := func() (*proc, string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		addr := ln.Addr().String()
		ln.Close()
		p := b.spawn(t, "serve", "--listen", addr, "--resource-uri", b.resource(), "--issuer", testIssuer,
			"--hs256-secret-file", secret, "--handle-keys-file", keys)
		eventually(t, 30*time.Second, "serve on "+addr, func() bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
		return p, addr
	}
	pa, addrA := serve()
	_, addrB := serve()
	csA := b.sessionAt(ana, "http://"+addrA+"/mcp", "")
	v := mustView(t, call(t, csA, "start_eval", startArgs(uniqueKey(t), 3, map[string]any{"episode_ms": 200})))
	pa.kill(t)
	if strings.Contains(pa.logs(), "eyJ") {
		t.Fatal("serve logged a token")
	}
	csB := b.sessionAt(ana, "http://"+addrB+"/mcp", "2025-06-18")
	waitStatus(t, csB, v.Handle, workflows.StatusSucceeded, 30*time.Second)
	_, addrC := serve()
	g := mustView(t, call(t, b.sessionAt(ana, "http://"+addrC+"/mcp", ""), "get_eval", map[string]any{"handle": v.Handle}))
	if g.Status != workflows.StatusSucceeded || g.JobID != v.JobID {
		t.Fatalf("fresh replica: %+v", g)
	}
}

// TestDevStopsOnSIGINT: `jobgate dev` with a file-backed store and the Web UI stops cleanly and
// promptly on SIGINT, also when started with SIGINT ignored (Go's Notify re-enables it), as
// background jobs of non-interactive shells are.
func TestDevStopsOnSIGINT(t *testing.T) {
	testenv.Heavy(t, "spawns `jobgate dev`")
	t.Parallel()
	bin := jobgateBinary(t)
	// Exactly what a background job of a non-interactive shell inherits: INT and QUIT ignored.
	cmd := exec.Command("sh", "-c", `trap "" INT QUIT; exec "$0" dev --data-dir "$1" --listen 127.0.0.1:0 --temporal-port 0 --ui-port 0`,
		bin, t.TempDir())
	var out strings.Builder
	cmd.Stdout = &lockedWriter{w: &out}
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	eventually(t, 60*time.Second, "dev banner", func() bool { return strings.Contains(cmd.Stdout.(*lockedWriter).String(), "Ctrl-C stops") })
	must(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("dev did not stop within 20s of SIGINT")
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}
