package handle

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
	"time"
)

func testResume() Resume {
	return Resume{WorkflowID: "acme/export/q3", RunID: "run-1", InputID: "approve-0a1b2c3d4e5f",
		ScopeDigest: "sha256:" + testDigest("scope"), Tenant: "acme", Subject: "steward",
		Scopes: []string{"jobs:approve"}, Decision: "approve", CommentDigest: commentDigest(""), Surface: "tool",
		SignedInWith: "bearer-jwt", Expiry: testNow.Add(5 * time.Minute)}
}

func TestResume_RoundTrip(t *testing.T) {
	ring := testRing(t)
	want := testResume()
	s := ring.SealResume(want)
	if s == "" {
		t.Fatal("SealResume returned empty")
	}
	got, err := ring.OpenResume(s, testNow)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("OpenResume = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ring.OpenResume(s, want.Expiry); !errors.Is(err, ErrExpired) {
		t.Fatalf("at expiry: %v, want ErrExpired", err)
	}
}

// A seal made with another ring (e.g. the handle keys, or an attacker's) never opens, and no
// other kind of sealed string opens as a resume seal, even with the same keys.
func TestResume_OtherRingsAndFormats(t *testing.T) {
	ring := testRing(t)
	other, err := NewKeyring("k1", map[string][]byte{"k1": testKey("other")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring.OpenResume(other.SealResume(testResume()), testNow); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a seal of another ring with the same kid opened: %v", err)
	}
	st := ring.SealState(State{Tenant: "acme", Subject: "steward", WorkflowID: "acme/export/q3", InputID: "approve-1",
		ScopeDigest: "sha256:x", Tool: "get_export", ArgsDigest: "ab", Expiry: testNow.Add(time.Hour)})
	if _, err := ring.OpenResume(ResumePrefix+st[len(StatePrefix):], testNow); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a request state re-prefixed opened as a resume seal: %v", err)
	}
}

func TestResume_Invalid(t *testing.T) {
	ring := testRing(t)
	for name, edit := range map[string]func(*Resume){
		"no run":         func(r *Resume) { r.RunID = "" },
		"no subject":     func(r *Resume) { r.Subject = "" },
		"no surface":     func(r *Resume) { r.Surface = "" },
		"bad comment":    func(r *Resume) { r.CommentDigest = "x" },
		"empty scope":    func(r *Resume) { r.Scopes = []string{""} },
		"no expiry":      func(r *Resume) { r.Expiry = time.Time{} },
		"too many scope": func(r *Resume) { r.Scopes = make([]string, maxResumeScopes+1) },
	} {
		r := testResume()
		edit(&r)
		if s := ring.SealResume(r); s != "" || r.Validate() == nil {
			t.Errorf("%s: sealed %q", name, s)
		}
	}
}

// commentDigest is workflows.CommentDigest (what the worker checks a seal's comment with),
// written out here because nothing in frontend/handle may depend on workflows.
func commentDigest(comment string) string {
	sum := sha256.Sum256([]byte(comment))
	return hex.EncodeToString(sum[:])
}
