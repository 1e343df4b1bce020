package handle

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
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
// TestResume_RoundTripApprover: the optional approver fields (issuer, name, email, auth_time,
// amr, acr, meaning digest) are sealed and open to the same values.
func TestResume_RoundTripApprover(t *testing.T) {
	ring := testRing(t)
	want := testResume()
	want.Issuer, want.Name, want.Email = "https://idp.acme.example", "Stew Ard", "steward@acme.example"
	want.AuthTime = testNow.Add(-2 * time.Minute).Truncate(time.Second).UTC()
	want.AMR, want.ACR = []string{"pwd", "otp"}, "urn:acme:loa:2"
	want.MeaningDigest = commentDigest("Allow ann@acme to export id of customers")
	s := ring.SealResume(want)
	got, err := ring.OpenResume(s, testNow)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("OpenResume = %+v, %v; want %+v", got, err, want)
	}
	// A seal without them (every seal made before they existed) opens with them zero.
	plain, err := ring.OpenResume(ring.SealResume(testResume()), testNow)
	if err != nil || !plain.AuthTime.IsZero() || plain.AMR != nil || plain.Name != "" || plain.MeaningDigest != "" {
		t.Fatalf("plain seal opened as %+v, %v", plain, err)
	}
}

// TestResume_LargestApproverSeals: an approver at authz's Person limits, written in the
// characters JSON escapes most (<, >, & become six bytes each), with long IDs, still seals:
// nobody is unable to approve because of their name.
func TestResume_LargestApproverSeals(t *testing.T) {
	r := testResume()
	r.WorkflowID = "acme/export/" + strings.Repeat("k", 300)
	r.Issuer = "https://" + strings.Repeat("i", 200)
	r.Name, r.Email, r.ACR = strings.Repeat("<", 256), strings.Repeat(">", 256), strings.Repeat("&", 256)
	r.AMR = make([]string, 8)
	for i := range r.AMR {
		r.AMR[i] = strings.Repeat("<", 32)
	}
	r.AuthTime = testNow
	r.MeaningDigest = commentDigest("m")
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestResume_OtherRingsAndFormats(t *testing.T) {
	ring := testRing(t)
	other, err := NewKeyring("k1", map[string][]byte{"k1": testKey("other")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring.OpenResume(other.SealResume(testResume()), testNow); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a seal of another ring with the same kid opened: %v", err)
	}
	st := ring.SealState(State{Request: Request{Tenant: "acme", Subject: "steward", WorkflowID: "acme/export/q3", InputID: "approve-1",
		ScopeDigest: "sha256:x"}, Tool: "get_export", ArgsDigest: "ab", Expiry: testNow.Add(time.Hour)})
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
		"bad meaning":    func(r *Resume) { r.MeaningDigest = "sha256:00" },
		"empty amr":      func(r *Resume) { r.AMR = []string{""} },
		"too many amr":   func(r *Resume) { r.AMR = make([]string, maxResumeAMR+1) },
		"bad name":       func(r *Resume) { r.Name = "\xff" },
		"auth_time 0":    func(r *Resume) { r.AuthTime = time.Unix(0, 0) },
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
