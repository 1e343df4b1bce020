package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/cmd/devtemporal"
	"github.com/jobgate/jobgate/cmd/devtemporal/devpki"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// tlsFiles are throwaway PKI files for one test: the CA Temporal's frontend trusts and signs
// with, a client certificate it signs, and an unrelated CA.
type tlsFiles struct {
	ca, clientCert, clientKey, otherCA string
	server                             *devtemporal.Server
}

// startMutualTLSTemporal starts an embedded Temporal whose frontend requires mutual TLS, with
// the namespace but none of jobgate's search attributes (setup adds them).
func startMutualTLSTemporal(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	ca, err := devpki.NewCA("jobgate tls test CA")
	must(t, err)
	srvPair, err := ca.Server("127.0.0.1", "localhost")
	must(t, err)
	clientPair, err := ca.Client("jobgate")
	must(t, err)
	other, err := devpki.NewCA("some other CA")
	must(t, err)
	var f tlsFiles
	f.ca, err = ca.WriteFile(dir, "ca")
	must(t, err)
	f.otherCA, err = other.WriteFile(dir, "other-ca")
	must(t, err)
	f.clientCert, f.clientKey, err = clientPair.WriteFiles(dir, "client")
	must(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f.server, err = devtemporal.Start(ctx, devtemporal.Options{UIPort: devtemporal.UIDisabled, TLS: &devtemporal.TLSOptions{
		CertPEM: srvPair.CertPEM, KeyPEM: srvPair.KeyPEM, RootCAPEM: ca.CertPEM,
		ClientCAPEM: ca.CertPEM, ClientCertPEM: clientPair.CertPEM, ClientKeyPEM: clientPair.KeyPEM}})
	must(t, err)
	t.Cleanup(func() { _ = f.server.Stop() })
	return f
}

// TestTemporalMutualTLS: against a Temporal that requires mutual TLS, `jobgate setup` (flags
// and JOBGATE_* env), the worker and the frontend connect with the right CA and client
// certificate and run an eval end to end through MCP; a wrong CA and a missing client
// certificate fail start-up at once with an error naming TLS and the flag to fix, rather than
// retrying until the context ends.
func TestTemporalMutualTLS(t *testing.T) {
	testenv.Heavy(t, "starts a Temporal server of its own and jobgate processes")
	f := startMutualTLSTemporal(t)
	addr := f.server.FrontendHostPort()

	// setup through its command line, the CA from the environment as a deployment would set it.
	t.Setenv("JOBGATE_TEMPORAL_TLS_CA_FILE", f.ca)
	var out, errOut bytes.Buffer
	err := app.RunSetup([]string{"--temporal-address", addr, "--timeout", "90s",
		"--temporal-tls-cert-file", f.clientCert, "--temporal-tls-key-file", f.clientKey}, &out, &errOut)
	if err != nil {
		t.Fatalf("setup over mTLS: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "ready for jobgate") {
		t.Fatalf("setup output:\n%s", out.String())
	}

	// The keys serve and worker refuse to start without (payload keys, signing keys).
	b := &testBundle{t: t, secret: []byte(randHex(32)), signingKeySpec: "s1:" + handle.GenerateSigningSeedHex()}
	b.sealPayloads(t, "file://"+t.TempDir())
	good := app.TemporalConfig{Address: addr, Namespace: f.server.Namespace(), TaskQueue: "tq-tls-" + randHex(4),
		TLS: app.TemporalTLS{CAFile: f.ca, CertFile: f.clientCert, KeyFile: f.clientKey}, Payloads: b.payloads()}

	// Failures first, each bounded by a context far longer than a refused handshake takes: an
	// error that only came when the context ended would be the silent retry loop.
	failFast := func(what string, run func(ctx context.Context) error, wants ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		begin := time.Now()
		err := run(ctx)
		if err == nil {
			t.Fatalf("%s: started", what)
		}
		if errors.Is(err, context.DeadlineExceeded) || time.Since(begin) > 30*time.Second {
			t.Fatalf("%s: failed only after %v (retried until the context ended?): %v", what, time.Since(begin), err)
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", what, err, w)
			}
		}
	}
	wrongCA := good
	wrongCA.TLS.CAFile = f.otherCA
	noCert := good
	noCert.TLS.CertFile, noCert.TLS.KeyFile = "", ""
	worker := func(tc app.TemporalConfig) func(context.Context) error {
		return func(ctx context.Context) error {
			w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: tc, SigningKeys: b.signingKeySpec}}
			err := w.Run(ctx)
			_ = w.Close()
			return err
		}
	}
	newServe := func(tc app.TemporalConfig) *app.ServeMain {
		v, err := authz.NewHS256Verifier(testIssuer, b.resource(), b.secret, "")
		must(t, err)
		// One keyring for handles and seals will do here: no job of this test asks for approval.
		keys, err := handle.NewKeyring("t1", map[string][]byte{"t1": handle.GenerateKey()})
		must(t, err)
		u := authz.Unlimited()
		return &app.ServeMain{Config: app.ServeConfig{Temporal: tc, Listen: "127.0.0.1:0", ResourceURI: b.resource(),
			Issuer: testIssuer, Tenants: &u, SigningKeys: b.signingKeySpec}, Verifier: v, Keys: keys, ResumeKeys: keys}
	}
	serve := func(tc app.TemporalConfig) func(context.Context) error {
		return func(ctx context.Context) error {
			s := newServe(tc)
			err := s.Run(ctx)
			_ = s.Close()
			return err
		}
	}
	caWants := []string{"TLS", "--temporal-tls-ca-file", "x509: certificate signed by unknown authority"}
	certWants := []string{"TLS", "client certificate", "--temporal-tls-cert-file", "tls: certificate required"}
	failFast("worker with a wrong CA", worker(wrongCA), caWants...)
	failFast("serve with a wrong CA", serve(wrongCA), caWants...)
	failFast("setup with a wrong CA", func(ctx context.Context) error {
		return app.Setup(ctx, app.SetupConfig{Address: addr, Namespace: f.server.Namespace(), TLS: wrongCA.TLS}, zap.NewNop(), &bytes.Buffer{})
	}, caWants...)
	failFast("worker without a client certificate", worker(noCert), certWants...)
	failFast("serve without a client certificate", serve(noCert), certWants...)

	// The real binary, configured by JOBGATE_* variables only: a wrong CA exits at once, non-zero,
	// with the same error.
	env := func(tc app.TemporalConfig) []string {
		var e []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "JOBGATE_") {
				e = append(e, kv)
			}
		}
		e = append(e, "JOBGATE_TEMPORAL_ADDRESS="+tc.Address, "JOBGATE_NAMESPACE="+tc.Namespace,
			"JOBGATE_TASK_QUEUE="+tc.TaskQueue, "JOBGATE_TEMPORAL_TLS_CA_FILE="+tc.TLS.CAFile,
			"JOBGATE_TEMPORAL_TLS_CERT_FILE="+tc.TLS.CertFile, "JOBGATE_TEMPORAL_TLS_KEY_FILE="+tc.TLS.KeyFile,
			"JOBGATE_SIGNING_KEYS="+b.signingKeySpec)
		return append(e, b.payloadEnv()...)
	}
	bin := jobgateBinary(t) // built outside the timed part
	failFast("jobgate worker process with a wrong CA", func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, bin, "worker")
		cmd.Env = env(wrongCA)
		out, err := cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil {
			return fmt.Errorf("exit %v (context %v): %s", err, ctx.Err(), out)
		}
		return errors.New(string(out))
	}, caWants...)

	// The right CA and client certificate: a worker process (env only) and a frontend of its own
	// building (no injected client), an eval with the demo suite through MCP.
	w := exec.Command(bin, "worker", "--max-concurrent-episodes", "10")
	w.Env = env(good)
	var wout bytes.Buffer
	w.Stdout, w.Stderr = &wout, &wout
	must(t, w.Start())
	t.Cleanup(func() {
		_ = w.Process.Signal(syscall.SIGTERM)
		_ = w.Wait()
		if t.Failed() {
			t.Logf("worker output:\n%s", wout.String())
		}
	})
	s := newServe(good)
	must(t, s.Run(context.Background()))
	t.Cleanup(func() { _ = s.Close() })
	b.frontends = []*app.ServeMain{s}

	cs := b.session(ana, 0, "")
	started := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 3, map[string]any{"episode_ms": 10})))
	done := waitStatus(t, cs, started.Handle, workflows.StatusSucceeded, 60*time.Second)
	if done.JobID != started.JobID {
		t.Fatalf("job %s, started %s", done.JobID, started.JobID)
	}
}
