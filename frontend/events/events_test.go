package events

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/wire"
)

func TestStreamLimits(t *testing.T) {
	l := NewLimits(3, 2)
	ana, bo, cy := authz.Principal{Tenant: "acme", Subject: "ana"}, authz.Principal{Tenant: "acme", Subject: "bo"}, authz.Principal{Tenant: "globex", Subject: "ana"}
	r1, te := l.Acquire(ana)
	if te != nil {
		t.Fatal(te)
	}
	if _, te := l.Acquire(ana); te != nil {
		t.Fatal(te)
	}
	if _, te := l.Acquire(ana); te == nil || te.Code != wire.CodeQuotaExceeded || !te.Retryable || te.RetryAfterMS <= 0 {
		t.Fatalf("a third stream of one caller: %+v", te)
	}
	if _, te := l.Acquire(cy); te != nil { // same subject, another tenant: another caller
		t.Fatal(te)
	}
	if _, te := l.Acquire(bo); te == nil || !strings.Contains(te.Message, "server") {
		t.Fatalf("past the replica's limit: %+v", te)
	}
	r1()
	r1() // releasing twice gives back one slot
	if _, te := l.Acquire(bo); te != nil {
		t.Fatal(te)
	}
	if _, te := l.Acquire(bo); te == nil {
		t.Fatal("the replica's limit forgot a stream")
	}
}

func TestViewDigest(t *testing.T) {
	a := ViewDigest(json.RawMessage(`{"handle":"x","status":"running","progress":{"done":1}}`), "handle")
	b := ViewDigest(json.RawMessage(`{"progress":{"done":1},"status":"running","handle":"y"}`), "handle")
	c := ViewDigest(json.RawMessage(`{"handle":"x","status":"running","progress":{"done":2}}`), "handle")
	if a != b || a == c || len(a) != handle.EventDigestLen {
		t.Fatalf("digests %s %s %s", a, b, c)
	}
	if StreamTarget("job", []string{"a/b"}) == StreamTarget("job", []string{"a", "b"}) || StreamTarget("job", []string{"a"}) == StreamTarget("tasks", []string{"a"}) {
		t.Fatal("stream targets collide")
	}
}

// TestViewDigestIgnoresFreshLinks: a succeeded eval's view read a second apart carries a
// freshly sealed episodes_url (its expiry truncated to the second); the state is the same, so
// the digest must be too — else a stream resumed after the terminal view sends it again (the
// "an event after the end" flake of TestJobEventsResume).
