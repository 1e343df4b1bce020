package payloadcrypt

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestForget: after Forget (from another process, as `jobgate tenant forget` runs), a running
// process stops opening the tenant's payloads within its KeyRecheck and makes the tenant no new
// key; other tenants are untouched; a deliberate rotation gives the tenant a key again.
func TestForget(t *testing.T) {
	dir, kek := t.TempDir(), NewLocalKEK()
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := openStore(t, dir, kek, Options{Now: clock})
	dc := NewDataConverter(s.Store)
	acme, err := forWorkflow(dc, "acme/eval/ana/k").ToPayload("acme's words")
	if err != nil {
		t.Fatal(err)
	}
	globex, err := forWorkflow(dc, "globex/eval/gus/k").ToPayload("globex's words")
	if err != nil {
		t.Fatal(err)
	}
	op := openStore(t, dir, kek, Options{Now: clock})
	if n, err := op.Forget(context.Background(), "acme"); err != nil || n != 1 {
		t.Fatalf("forget: %d %v", n, err)
	}
	// The operator's own store opens nothing of acme's at once.
	var got string
	if err := NewDataConverter(op.Store).FromPayload(acme, &got); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("operator's store after forget: %q %v", got, err)
	}
	// The running process, within its recheck period, still holds the key; past it, not.
	if err := dc.FromPayload(acme, &got); err != nil || got != "acme's words" {
		t.Fatalf("before the recheck: %q %v", got, err)
	}
	now = now.Add(2 * CurrentTTLDefault)
	if err := dc.FromPayload(acme, &got); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("after the recheck: %q %v", got, err)
	}
	if _, err := forWorkflow(dc, "acme/eval/ana/k2").ToPayload("new words"); !errors.Is(err, ErrForgotten) {
		t.Fatalf("sealing for a forgotten tenant: %v", err)
	}
	if err := dc.FromPayload(globex, &got); err != nil || got != "globex's words" {
		t.Fatalf("globex after acme's forget: %q %v", got, err)
	}
	if ids, err := s.List(context.Background(), "acme"); err != nil || len(ids) != 0 {
		t.Fatalf("acme's keys after forget: %v %v", ids, err)
	}
	if n, err := op.Forget(context.Background(), "acme"); err != nil || n != 0 {
		t.Fatalf("forget again: %d %v", n, err)
	}
	if _, err := op.Add(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * CurrentTTLDefault)
	if _, err := forWorkflow(dc, "acme/eval/ana/k3").ToPayload("after a rotation"); err != nil {
		t.Fatalf("sealing after a deliberate rotation: %v", err)
	}
	if err := dc.FromPayload(acme, &got); !errors.Is(err, ErrUnknownKey) {
		t.Fatal("a new key opened what the forgotten one sealed")
	}
}
