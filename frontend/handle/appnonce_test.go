package handle

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

func testAppNonce(sub string, exp time.Time) AppNonce {
	return AppNonce{Request: Request{Tenant: "acme", Subject: sub, WorkflowID: "acme/export/ana/q3", InputID: "approve-0a1b2c3d4e5f",
		ScopeDigest: "sha256:" + testDigest("scope")}, Expiry: exp}
}

func seedAppNonces(t testing.TB) map[string]string {
	ring := testRing(t)
	old, _ := NewKeyring("k0", map[string][]byte{"k0": testKey("k0")})
	valid := ring.SealAppNonce(testAppNonce("steward", fuzzNow.Add(5*time.Minute)))
	live := strconv.FormatInt(fuzzNow.Add(time.Hour).Unix(), 10)
	return map[string]string{
		"valid":            valid,
		"valid_old_kid":    old.SealAppNonce(testAppNonce("steward", fuzzNow.Add(time.Minute))),
		"expired":          ring.SealAppNonce(testAppNonce("steward", fuzzNow)),
		"truncated":        valid[:len(valid)-10],
		"tampered_payload": tamper(valid, len(AppNoncePrefix+".k1.")+30),
		"tampered_sig":     tamper(valid, len(valid)-1),
		"state_prefix":     StatePrefix + valid[len(AppNoncePrefix):],
		"state":            ring.SealState(State{Request: Request{Tenant: "acme", Subject: "steward", WorkflowID: "acme/export/q3", InputID: "approve-1", ScopeDigest: "sha256:x"}, Tool: "get_export", ArgsDigest: "ab", Expiry: fuzzNow.Add(time.Hour)}),
		"no_digest":        signJSON(ring, appNonceFormat, `{"v":1,"t":"acme","s":"steward","w":"acme/export/x","i":"approve-1","d":"","e":`+live+`}`),
		"empty":            "",
		"too_long":         valid + "." + strings.Repeat("A", MaxAppNonceLen),
	}
}

// TestAppNonce: a nonce opens to exactly what was sealed, and nothing else opens as one: no
// other token kind, nothing tampered, nothing expired (which still names what it was).
func TestAppNonce(t *testing.T) {
	ring := testRing(t)
	seeds := seedAppNonces(t)
	testenv.SeedCorpus(t, filepath.Join("testdata", "fuzz", "FuzzOpenAppNonce"), seeds, *updateSeeds, true)
	for name, s := range seeds {
		n, err := ring.OpenAppNonce(s, fuzzNow)
		switch {
		case strings.HasPrefix(name, "valid"):
			if err != nil || n.Subject != "steward" || n.WorkflowID != "acme/export/ana/q3" {
				t.Errorf("%s: %+v, %v; want the steward's nonce", name, n, err)
			}
		case name == "expired":
			if !errors.Is(err, ErrExpired) || n.Subject != "steward" {
				t.Errorf("%s: %+v, %v; want ErrExpired with the nonce", name, n, err)
			}
		default:
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: %v, want ErrMalformed", name, err)
			}
		}
	}
	if s := ring.SealAppNonce(AppNonce{Request: Request{Tenant: "acme", Subject: "steward"}, Expiry: fuzzNow.Add(time.Hour)}); s != "" {
		t.Fatalf("sealed a nonce without a job: %q", s)
	}
	if _, err := ring.OpenState(seeds["valid"], fuzzNow); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an app nonce opened as a request state: %v", err)
	}
	if _, err := ring.OpenResume(seeds["valid"], fuzzNow); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an app nonce opened as a resume seal: %v", err)
	}
}

func FuzzOpenAppNonce(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ring.OpenAppNonce(s, fuzzNow)
		expired, opened := openOutcome(t, err, n != (AppNonce{}), n)
		if !opened {
			return
		}
		if len(s) > MaxAppNonceLen {
			t.Fatalf("opened a %d-byte app nonce", len(s))
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("opened an invalid app nonce %+v: %v", n, err)
		}
		r := ring.SealAppNonce(n)
		n2, err2 := ring.OpenAppNonce(r, fuzzNow)
		if n2 != n || errors.Is(err2, ErrExpired) != expired || (err2 != nil && !expired) {
			t.Fatalf("re-seal: %+v, %v; want %+v, %v", n2, err2, n, err)
		}
		if _, err := ring.OpenState(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("an app nonce opened as a request state: %v", err)
		}
		if _, err := ring.OpenHandle(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("an app nonce opened as a handle: %v", err)
		}
	})
}
