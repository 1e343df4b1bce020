package tests

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
)

// TestTemporalUnreachable: the frontend starts without Temporal, reports not ready, and tools
// answer a retryable `unavailable` instead of hanging or failing the protocol.
func TestTemporalUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noWorker: true})
	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	dead := ln.Addr().String()
	ln.Close()
	v, err := authz.NewHS256Verifier(testIssuer, b.resource(), b.secret, "")
	must(t, err)
	s := &app.ServeMain{Config: app.ServeConfig{Temporal: app.TemporalConfig{Address: dead, Namespace: namespace, TaskQueue: b.taskQueue,
		Payloads: b.payloads()}, Listen: "127.0.0.1:0", ResourceURI: b.resource(), Issuer: testIssuer}, Verifier: v, Keys: b.keys,
		ResumeKeys: b.resumeKeys, SigningKeys: b.signingKeys}
	must(t, s.Run(context.Background()))
	t.Cleanup(func() { _ = s.Close() })
	b.frontends = append(b.frontends, s)

	resp, err := http.Get("http://" + s.Addr() + "/readyz")
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz: %d", resp.StatusCode)
	}
	cs := b.session(ana, 2, "")
	start := time.Now()
	e := mustErr(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 1, nil)), "unavailable")
	if !e.Retryable {
		t.Fatal("unavailable must be retryable")
	}
	mustErr(t, call(t, cs, "get_eval", map[string]any{"handle": b.keys.SealHandle(handleFor("acme/eval/x"))}), "unavailable")
	if d := time.Since(start); d > 25*time.Second {
		t.Fatalf("unavailable took %s", d)
	}
}
