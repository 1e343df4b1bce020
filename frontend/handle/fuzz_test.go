package handle

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the committed fuzz seed corpus under testdata/fuzz")

// fuzzNow is the fixed clock of the fuzz targets and their seeds.
var fuzzNow = testNow

// seedHandles returns the named seeds of FuzzOpenHandle. They are derived
// deterministically from fixed test keys, so they double as a known-answer
// test of the wire format (see TestFuzzSeedCorpus).
func seedHandles(t testing.TB) map[string]string {
	ring := testRing(t)
	old, _ := NewKeyring("k0", map[string][]byte{"k0": testKey("k0")})
	valid := ring.SealHandle(Handle{Tenant: "acme", WorkflowID: "acme/eval/nightly-42", Kind: "eval", Expiry: fuzzNow.Add(24 * time.Hour)})
	c := ring.SealCursor(Cursor{Tenant: "acme", Subject: "alice", Tool: "list_jobs", Filter: FilterFingerprint(nil), PageToken: []byte("next"), Expiry: fuzzNow.Add(time.Hour)})
	return map[string]string{
		"valid":            valid,
		"valid_export":     ring.SealHandle(Handle{Tenant: "globex", WorkflowID: "globex/export/q3 <&> \"ü\"", Kind: "export", Expiry: fuzzNow.Add(time.Hour)}),
		"valid_old_kid":    old.SealHandle(Handle{Tenant: "acme", WorkflowID: "acme/eval/old", Kind: "eval", Expiry: fuzzNow.Add(time.Hour)}),
		"expired":          ring.SealHandle(Handle{Tenant: "acme", WorkflowID: "acme/eval/done", Kind: "eval", Expiry: fuzzNow.Add(-time.Second)}),
		"truncated":        valid[:len(valid)-10],
		"tampered_payload": tamper(valid, len("jgh1.k1.")+5),
		"tampered_sig":     tamper(valid, len(valid)-1),
		"wrong_prefix":     "jgh2" + valid[4:],
		"cursor":           c,
		"unknown_kid":      strings.Replace(valid, ".k1.", ".k7.", 1),
		"empty":            "",
		"dots":             "...",
		"too_long":         valid + "." + strings.Repeat("A", MaxHandleLen),
	}
}

func seedCursors(t testing.TB) map[string]string {
	ring := testRing(t)
	old, _ := NewKeyring("k0", map[string][]byte{"k0": testKey("k0")})
	tok := []byte(`{"sort":[1735689600000,"acme/eval/nightly-41"],"pit":"x"}`)
	mk := func(r *Keyring, sub string, exp time.Time, tok []byte) string {
		return r.SealCursor(Cursor{Tenant: "acme", Subject: sub, Tool: "list_jobs",
			Filter: FilterFingerprint(map[string]string{"kind": "eval"}), PageToken: tok, Expiry: exp})
	}
	valid := mk(ring, "alice", fuzzNow.Add(10*time.Minute), tok)
	return map[string]string{
		"valid":            valid,
		"valid_binary":     mk(ring, "svc:exporter", fuzzNow.Add(time.Minute), []byte{0, 0xff, 0xfe, '"', '\\', 0x7f}),
		"valid_old_kid":    mk(old, "alice", fuzzNow.Add(time.Minute), tok),
		"expired":          mk(ring, "alice", fuzzNow, tok),
		"truncated":        valid[:len(valid)/2],
		"tampered_payload": tamper(valid, len("jgc2.k1.")+40),
		"tampered_tag":     tamper(valid, len(valid)-1),
		"tampered_nonce":   tamper(valid, len("jgc2.k1.")+3),
		"wrong_prefix":     "jgh1" + valid[4:],
		"old_prefix":       "jgc1" + valid[4:],
		"unknown_kid":      strings.Replace(valid, ".k1.", ".k7.", 1),
		// The readable, MAC-signed format of jgc1 cursors is no longer accepted, under either prefix.
		"signed_jgc1": signPayload(ring, format{"jgc1", "jobgate-cursor-v1", MaxCursorLen}, b64.EncodeToString([]byte(
			`{"v":1,"t":"acme","s":"alice","o":"list_jobs","f":"F","p":"AAEC/w==","e":1924992000}`))),
		"signed_jgc2": signPayload(ring, format{CursorPrefix, "jobgate-cursor-v1", MaxCursorLen}, b64.EncodeToString([]byte(
			`{"v":1,"t":"acme","s":"alice","o":"list_jobs","f":"F","p":"AAEC/w==","e":1924992000}`))),
		// Correctly encrypted, but the payload is not canonical: the opener itself refuses it.
		"sealed_unknown_field": sealCursorJSON(ring, `{"v":1,"t":"acme","s":"alice","o":"list_jobs","f":"F","p":"AAEC/w==","e":1924992000,"x":1}`),
		"handle":               ring.SealHandle(Handle{Tenant: "acme", WorkflowID: "acme/eval/x", Kind: "eval", Expiry: fuzzNow.Add(time.Hour)}),
		"empty":                "",
		"dots":                 "...",
		"too_long":             valid + strings.Repeat("A", MaxCursorLen),
	}
}

func seedDownloads(t testing.TB) map[string]string {
	ring := testRing(t)
	old, _ := NewKeyring("k0", map[string][]byte{"k0": testKey("k0")})
	dig := testDigest("q3-report.csv")
	mk := func(r *Keyring, sub string, exp time.Time) string {
		return r.SealDownload(Download{Tenant: "acme", WorkflowID: "acme/export/q3-report", Subject: sub, Digest: dig, Expiry: exp})
	}
	valid := mk(ring, "user:alice@example.com", fuzzNow.Add(5*time.Minute))
	live := strconv.FormatInt(fuzzNow.Add(time.Hour).Unix(), 10)
	return map[string]string{
		"valid":            valid,
		"valid_unicode":    ring.SealDownload(Download{Tenant: "globex", WorkflowID: "globex/export/q3 <&> \"ü\"", Subject: "svc:exporter", Digest: testDigest("ü"), Expiry: fuzzNow.Add(time.Minute)}),
		"valid_old_kid":    mk(old, "alice", fuzzNow.Add(time.Minute)),
		"expired":          mk(ring, "alice", fuzzNow),
		"truncated":        valid[:len(valid)-10],
		"tampered_payload": tamper(valid, len("jgd1.k1.")+30),
		"tampered_sig":     tamper(valid, len(valid)-1),
		"wrong_prefix":     "jgd2" + valid[4:],
		"handle_prefix":    "jgh1" + valid[4:],
		"handle":           ring.SealHandle(Handle{Tenant: "acme", WorkflowID: "acme/export/q3-report", Kind: "export", Expiry: fuzzNow.Add(time.Hour)}),
		"cursor":           ring.SealCursor(Cursor{Tenant: "acme", Subject: "alice", Tool: "list_jobs", Filter: FilterFingerprint(nil), PageToken: []byte("next"), Expiry: fuzzNow.Add(time.Hour)}),
		"unknown_kid":      strings.Replace(valid, ".k1.", ".k7.", 1),
		// Correctly signed, but a field is out of its syntax: the opener
		// itself must refuse them.
		"upper_digest": signJSON(ring, downloadFormat, `{"v":1,"t":"acme","w":"acme/export/x","s":"alice","d":"`+strings.ToUpper(dig)+`","e":`+live+`}`),
		"short_digest": signJSON(ring, downloadFormat, `{"v":1,"t":"acme","w":"acme/export/x","s":"alice","d":"`+dig[:63]+`","e":`+live+`}`),
		"no_subject":   signJSON(ring, downloadFormat, `{"v":1,"t":"acme","w":"acme/export/x","s":"","d":"`+dig+`","e":`+live+`}`),
		"empty":        "",
		"dots":         "...",
		"too_long":     valid + "." + strings.Repeat("A", MaxDownloadLen),
	}
}

func seedStates(t testing.TB) map[string]string {
	ring := testRing(t)
	old, _ := NewKeyring("k0", map[string][]byte{"k0": testKey("k0")})
	mk := func(r *Keyring, sub string, exp time.Time) string {
		return r.SealState(State{Request: Request{Tenant: "acme", Subject: sub, WorkflowID: "acme/export/q3", InputID: "approve-0a1b2c3d4e5f",
			ScopeDigest: "sha256:" + testDigest("scope")}, Tool: "get_export", ArgsDigest: "00112233445566778899aabbccddeeff", Expiry: exp})
	}
	valid := mk(ring, "steward", fuzzNow.Add(5*time.Minute))
	live := strconv.FormatInt(fuzzNow.Add(time.Hour).Unix(), 10)
	return map[string]string{
		"valid":            valid,
		"valid_old_kid":    mk(old, "steward", fuzzNow.Add(time.Minute)),
		"expired":          mk(ring, "steward", fuzzNow),
		"truncated":        valid[:len(valid)-10],
		"tampered_payload": tamper(valid, len("jgs1.k1.")+30),
		"tampered_sig":     tamper(valid, len(valid)-1),
		"download_prefix":  "jgd1" + valid[4:],
		"handle":           ring.SealHandle(Handle{Tenant: "acme", WorkflowID: "acme/export/q3", Kind: "export", Expiry: fuzzNow.Add(time.Hour)}),
		"no_tool":          signJSON(ring, stateFormat, `{"v":1,"t":"acme","s":"steward","w":"acme/export/x","i":"approve-1","d":"sha256:x","o":"","a":"ab","e":`+live+`}`),
		"empty":            "",
		"too_long":         valid + "." + strings.Repeat("A", MaxStateLen),
	}
}

func seedResumes(t testing.TB) map[string]string {
	ring := testRing(t)
	old, _ := NewKeyring("k0", map[string][]byte{"k0": testKey("k0")})
	mk := func(r *Keyring, sub string, scopes []string, exp time.Time) string {
		return r.SealResume(Resume{WorkflowID: "acme/export/q3", RunID: "0190a4b2-1c2d-7e8f-9a0b-1c2d3e4f5a6b",
			InputID: "approve-0a1b2c3d4e5f", ScopeDigest: "sha256:" + testDigest("scope"), Tenant: "acme", Subject: sub,
			Scopes: scopes, Decision: "approve", CommentDigest: commentDigest("ok"), Surface: "tool",
			SignedInWith: "bearer-jwt", Expiry: exp})
	}
	valid := mk(ring, "steward", []string{"jobs:approve"}, fuzzNow.Add(5*time.Minute))
	live := strconv.FormatInt(fuzzNow.Add(time.Hour).Unix(), 10)
	body := `"w":"acme/export/x","r":"run","i":"approve-1","d":"sha256:x","t":"acme","s":"steward","p":[],"x":"approve","c":"` +
		commentDigest("") + `","u":"tool","a":"bearer-jwt","e":` + live
	return map[string]string{
		"valid":            valid,
		"valid_no_scopes":  mk(ring, "svc:bot \"ü\"", nil, fuzzNow.Add(time.Minute)),
		"valid_old_kid":    mk(old, "steward", []string{"jobs:approve", "jobs:read"}, fuzzNow.Add(time.Minute)),
		"expired":          mk(ring, "steward", []string{"jobs:approve"}, fuzzNow),
		"truncated":        valid[:len(valid)-10],
		"tampered_payload": tamper(valid, len("jgr1.k1.")+30),
		"tampered_sig":     tamper(valid, len(valid)-1),
		"state_prefix":     "jgs1" + valid[4:],
		"handle":           ring.SealHandle(Handle{Tenant: "acme", WorkflowID: "acme/export/q3", Kind: "export", Expiry: fuzzNow.Add(time.Hour)}),
		"unknown_kid":      strings.Replace(valid, ".k1.", ".k7.", 1),
		// Correctly signed, but a field is out of its syntax: the opener itself must refuse them.
		"null_scopes":   signJSON(ring, resumeFormat, `{"v":1,`+strings.Replace(body, `"p":[]`, `"p":null`, 1)+`}`),
		"empty_scope":   signJSON(ring, resumeFormat, `{"v":1,`+strings.Replace(body, `"p":[]`, `"p":[""]`, 1)+`}`),
		"no_surface":    signJSON(ring, resumeFormat, `{"v":1,`+strings.Replace(body, `"u":"tool"`, `"u":""`, 1)+`}`),
		"short_comment": signJSON(ring, resumeFormat, `{"v":1,`+strings.Replace(body, commentDigest(""), commentDigest("")[:63], 1)+`}`),
		"version_2":     signJSON(ring, resumeFormat, `{"v":2,`+body+`}`),
		"empty":         "",
		"too_long":      valid + "." + strings.Repeat("A", MaxResumeLen),
	}
}

// tamper changes the byte at i to another URL-safe byte.
func tamper(s string, i int) string {
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// TestFuzzSeedCorpus keeps testdata/fuzz in step with the seeds above and
// checks each seed does what its name says. Run with -update-seeds to rewrite.
func TestFuzzSeedCorpus(t *testing.T) {
	ring := testRing(t)
	openers := map[string]func(string) error{
		"FuzzOpenHandle":   func(s string) error { _, err := ring.OpenHandle(s, fuzzNow); return err },
		"FuzzOpenCursor":   func(s string) error { _, err := ring.OpenCursor(s, fuzzNow); return err },
		"FuzzOpenDownload": func(s string) error { _, err := ring.OpenDownload(s, fuzzNow); return err },
		"FuzzOpenState":    func(s string) error { _, err := ring.OpenState(s, fuzzNow); return err },
		"FuzzOpenResume":   func(s string) error { _, err := ring.OpenResume(s, fuzzNow); return err },
	}
	for target, seeds := range map[string]map[string]string{
		"FuzzOpenHandle":   seedHandles(t),
		"FuzzOpenCursor":   seedCursors(t),
		"FuzzOpenDownload": seedDownloads(t),
		"FuzzOpenState":    seedStates(t),
		"FuzzOpenResume":   seedResumes(t),
	} {
		dir := filepath.Join("testdata", "fuzz", target)
		testenv.SeedCorpus(t, dir, seeds, *updateSeeds, false)
		for name, s := range seeds {
			err := openers[target](s)
			switch {
			case strings.HasPrefix(name, "valid"):
				if err != nil {
					t.Errorf("%s/%s: %v, want success", target, name, err)
				}
			case name == "expired":
				if err != ErrExpired {
					t.Errorf("%s/%s: %v, want ErrExpired", target, name, err)
				}
			default:
				if !errors.Is(err, ErrMalformed) {
					t.Errorf("%s/%s: %v, want ErrMalformed", target, name, err)
				}
			}
		}
	}
}

func FuzzOpenHandle(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ring.OpenHandle(s, fuzzNow)
		expired, opened := openOutcome(t, err, h != (Handle{}), h)
		if !opened {
			return
		}
		if len(s) > MaxHandleLen {
			t.Fatalf("opened a %d-byte handle", len(s))
		}
		// Opened (possibly expired): must re-seal to an equivalent value.
		if err := h.Validate(); err != nil {
			t.Fatalf("opened an invalid handle %+v: %v", h, err)
		}
		r := ring.SealHandle(h)
		h2, err2 := ring.OpenHandle(r, fuzzNow)
		if !sameHandle(h, h2) || errors.Is(err2, ErrExpired) != expired || (err2 != nil && !expired) {
			t.Fatalf("re-seal: %+v, %v; want %+v, %v", h2, err2, h, err)
		}
		// Nobody but the sealer can produce a valid MAC, so a handle under
		// the current kid re-seals to the very same string.
		if strings.HasPrefix(s, HandlePrefix+"."+ring.CurrentKID()+".") && r != s {
			t.Fatalf("re-seal differs:\n%q\n%q", s, r)
		}
		if _, err := ring.OpenCursor(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a handle opened as a cursor: %v", err)
		}
		if _, err := ring.OpenDownload(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a handle opened as a download token: %v", err)
		}
	})
}

func FuzzOpenCursor(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ring.OpenCursor(s, fuzzNow)
		expired, opened := openOutcome(t, err, !sameCursor(c, Cursor{}) || c.PageToken != nil, c)
		if !opened {
			return
		}
		if len(s) > MaxCursorLen {
			t.Fatalf("opened a %d-byte cursor", len(s))
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("opened an invalid cursor %+v: %v", c, err)
		}
		r := ring.SealCursor(c)
		c2, err2 := ring.OpenCursor(r, fuzzNow)
		if !sameCursor(c, c2) || errors.Is(err2, ErrExpired) != expired || (err2 != nil && !expired) {
			t.Fatalf("re-seal: %+v, %v; want %+v, %v", c2, err2, c, err)
		}
		if strings.HasPrefix(s, CursorPrefix+"."+ring.CurrentKID()+".") && r != s {
			t.Fatalf("re-seal differs:\n%q\n%q", s, r)
		}
		if _, err := ring.OpenHandle(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a cursor opened as a handle: %v", err)
		}
		if _, err := ring.OpenDownload(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a cursor opened as a download token: %v", err)
		}
	})
}

func FuzzOpenDownload(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ring.OpenDownload(s, fuzzNow)
		expired, opened := openOutcome(t, err, d != (Download{}), d)
		if !opened {
			return
		}
		if len(s) > MaxDownloadLen {
			t.Fatalf("opened a %d-byte download token", len(s))
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("opened an invalid download token %+v: %v", d, err)
		}
		r := ring.SealDownload(d)
		d2, err2 := ring.OpenDownload(r, fuzzNow)
		if !sameDownload(d, d2) || errors.Is(err2, ErrExpired) != expired || (err2 != nil && !expired) {
			t.Fatalf("re-seal: %+v, %v; want %+v, %v", d2, err2, d, err)
		}
		// Only the sealer can produce a valid MAC, so a token under the
		// current kid re-seals to the very same string.
		if strings.HasPrefix(s, DownloadPrefix+"."+ring.CurrentKID()+".") && r != s {
			t.Fatalf("re-seal differs:\n%q\n%q", s, r)
		}
		if _, err := ring.OpenHandle(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a download token opened as a handle: %v", err)
		}
		if _, err := ring.OpenCursor(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a download token opened as a cursor: %v", err)
		}
	})
}

func FuzzOpenState(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ring.OpenState(s, fuzzNow)
		expired, opened := openOutcome(t, err, st != (State{}), st)
		if !opened {
			return
		}
		if len(s) > MaxStateLen {
			t.Fatalf("opened a %d-byte request state", len(s))
		}
		if err := st.Validate(); err != nil {
			t.Fatalf("opened an invalid request state %+v: %v", st, err)
		}
		r := ring.SealState(st)
		st2, err2 := ring.OpenState(r, fuzzNow)
		if st2 != st || errors.Is(err2, ErrExpired) != expired || (err2 != nil && !expired) {
			t.Fatalf("re-seal: %+v, %v; want %+v, %v", st2, err2, st, err)
		}
		if strings.HasPrefix(s, StatePrefix+"."+ring.CurrentKID()+".") && r != s {
			t.Fatalf("re-seal differs:\n%q\n%q", s, r)
		}
		if _, err := ring.OpenHandle(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a request state opened as a handle: %v", err)
		}
		if _, err := ring.OpenDownload(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a request state opened as a download token: %v", err)
		}
	})
}

func FuzzOpenResume(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ring.OpenResume(s, fuzzNow)
		expired, opened := openOutcome(t, err, !reflect.DeepEqual(r, Resume{}), r)
		if !opened {
			return
		}
		if len(s) > MaxResumeLen {
			t.Fatalf("opened a %d-byte resume seal", len(s))
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("opened an invalid resume seal %+v: %v", r, err)
		}
		again := ring.SealResume(r)
		r2, err2 := ring.OpenResume(again, fuzzNow)
		if !reflect.DeepEqual(r2, r) || errors.Is(err2, ErrExpired) != expired || (err2 != nil && !expired) {
			t.Fatalf("re-seal: %+v, %v; want %+v, %v", r2, err2, r, err)
		}
		if strings.HasPrefix(s, ResumePrefix+"."+ring.CurrentKID()+".") && again != s {
			t.Fatalf("re-seal differs:\n%q\n%q", s, again)
		}
		if _, err := ring.OpenState(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a resume seal opened as a request state: %v", err)
		}
		if _, err := ring.OpenHandle(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a resume seal opened as a handle: %v", err)
		}
	})
}

// Example of the intended call order; see the package documentation.
func ExampleKeyring_OpenHandle() {
	ring, _ := ParseKeyring("k1:" + strings.Repeat("ab", 32))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := ring.SealHandle(Handle{Tenant: "acme", WorkflowID: "acme/eval/nightly", Kind: "eval", Expiry: now.Add(-time.Minute)})

	callerTenant := "globex"
	h, err := ring.OpenHandle(s, now)
	switch {
	case errors.Is(err, ErrMalformed):
		fmt.Println("invalid_handle")
	case h.Tenant != callerTenant:
		fmt.Println("not_found") // expired or not: never reveal another tenant's handle
	case errors.Is(err, ErrExpired):
		fmt.Println("handle_expired")
	default:
		fmt.Println("look up", h.WorkflowID)
	}
	// Output: not_found
}

// FuzzCursorPayload drives what comes after decryption: any payload sealed with the ring either
// opens to a valid cursor that re-seals to the very same string (the payload was canonical), or
// is refused as malformed — never a panic, never a cursor that does not validate.
func FuzzCursorPayload(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, js string) {
		s := ring.sealCursorJSON([]byte(js), 1<<20)
		c, err := ring.OpenCursor(s, fuzzNow)
		switch {
		case errors.Is(err, ErrMalformed):
			if !sameCursor(c, Cursor{}) || c.PageToken != nil {
				t.Fatalf("malformed but returned %+v", c)
			}
			return
		case err != nil && !errors.Is(err, ErrExpired):
			t.Fatalf("unexpected error class: %v", err)
		case len(s) > MaxCursorLen:
			t.Fatalf("opened a %d-byte cursor", len(s))
		}
		if verr := c.Validate(); verr != nil {
			t.Fatalf("opened an invalid cursor %+v: %v", c, verr)
		}
		if r := ring.SealCursor(c); r != s {
			t.Fatalf("payload %q opened but re-seals differently", js)
		}
	})
}

// openOutcome checks the error class of an Open* call (nil, ErrExpired or ErrMalformed, never
// both nor another) and that a malformed string returned nothing (returned: the value is not
// the zero value). opened is false for malformed; expired reports ErrExpired.
func openOutcome(t *testing.T, err error, returned bool, v any) (expired, opened bool) {
	t.Helper()
	malformed, expired := errors.Is(err, ErrMalformed), errors.Is(err, ErrExpired)
	switch {
	case malformed && expired:
		t.Fatalf("error is both malformed and expired: %v", err)
	case err != nil && !malformed && !expired:
		t.Fatalf("unexpected error class: %v", err)
	case malformed && returned:
		t.Fatalf("malformed but returned %+v", v)
	}
	return expired, !malformed
}
