package tests

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestServeAndWorkerRequireKeys: the built `jobgate serve` and `jobgate worker` refuse to start
// without a payload key-encryption key (contract invariant 9: Temporal holds no tenant's words
// in clear) and without signing keys (invariant 3: records anyone can verify), as they refuse
// without resume keys: exit 2, and stderr exactly one line naming the flags and how to make the
// key. `jobgate replay` refuses without the key-encryption key too (every history is sealed).
// Given every key, serve starts (and answers /healthz), as the control that the line is the key's.
func TestServeAndWorkerRequireKeys(t *testing.T) {
	testenv.Heavy(t, "builds and runs jobgate serve and worker")
	t.Parallel()
	bin := jobgateBinary(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "hs256")
	must(t, os.WriteFile(secret, []byte(randHex(32)), 0o600))
	kekFile := filepath.Join(dir, "payload-kek")
	must(t, os.WriteFile(kekFile, []byte(payloadcrypt.NewLocalKEK()+"\n"), 0o600))
	artifacts := "file://" + filepath.Join(dir, "artifacts")
	resume := "r1:" + hex.EncodeToString(handle.GenerateKey())
	signing := []string{"--signing-keys", "s1:" + handle.GenerateSigningSeedHex()}
	kek := []string{"--payload-kek-file", kekFile}
	serve := []string{"serve", "--listen", "127.0.0.1:0", "--issuer", testIssuer, "--hs256-secret-file", secret,
		"--handle-keys", "k1:" + hex.EncodeToString(handle.GenerateKey()), "--resume-keys", resume,
		"--temporal-address", temporalAddr, "--artifacts", artifacts}
	worker := []string{"worker", "--resume-keys", resume, "--temporal-address", temporalAddr, "--artifacts", artifacts,
		"--task-queue", "tq-" + randHex(6)}
	noSigning := "jobgate: --signing-keys or --signing-keys-file is required (%s; make one with `jobgate keygen signing-keys`)"
	noKEK := "jobgate: " + app.ErrNoPayloadKEK.Error()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"serve without signing keys", keysArgs(serve, kek), strings.Replace(noSigning, "%s", "frontends sign every decision record with them; give the workers the same keys", 1)},
		{"serve without a payload KEK", keysArgs(serve, signing), noKEK},
		{"serve without either", serve, strings.Replace(noSigning, "%s", "frontends sign every decision record with them; give the workers the same keys", 1)},
		{"worker without signing keys", keysArgs(worker, kek), strings.Replace(noSigning, "%s", "a worker serving exports signs every manifest with serve's signing keys", 1)},
		{"worker without a payload KEK", keysArgs(worker, signing), noKEK},
		{"episode worker without a payload KEK", []string{"worker", "--kinds", "eval", "--temporal-address", temporalAddr,
			"--task-queue", "tq-" + randHex(6), "--payload-key-store", artifacts}, noKEK},
		{"replay without a payload KEK", []string{"replay", "--temporal-address", temporalAddr, "--artifacts", artifacts},
			"jobgate: --payload-kek or --payload-kek-file is required (the histories' payloads are encrypted): give replay serve's and worker's key-encryption key and --artifacts (or --payload-key-store)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, c.args...)
			cmd.Env = envWithoutJobgate()
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("still running after a minute:\n%s", stderr.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit: %v, want status 2\n%s", err, stderr.String())
			}
			if got := strings.TrimSuffix(stderr.String(), "\n"); got != c.want || stdout.Len() != 0 {
				t.Fatalf("stderr:\n%q\nwant exactly one line:\n%q\n(stdout %q)", stderr.String(), c.want, stdout.String())
			}
		})
	}
	// The control: with both keys serve starts and answers.
	ctl := exec.Command(bin, keysArgs(serve, signing, kek)...)
	ctl.Env = envWithoutJobgate()
	p := startProc(t, ctl, true)
	eventually(t, 30*time.Second, "serve with every key to log that it listens", func() bool {
		select {
		case <-p.done:
			t.Fatalf("serve with every key exited:\n%s", p.logs())
		default:
		}
		return strings.Contains(p.logs(), "frontend listening")
	})
}

// keysArgs is the argument lists joined.
func keysArgs(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// envWithoutJobgate is the test's environment without JOBGATE_* variables (a developer's shell
// may set some), so a process sees only the flags a test gives it.
func envWithoutJobgate() []string {
	var e []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JOBGATE_") {
			e = append(e, kv)
		}
	}
	return e
}
