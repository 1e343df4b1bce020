package handle

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var testNow = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// testRing has k0 (verify only) and k1 (current).
func testRing(t testing.TB) *Keyring {
	t.Helper()
	ring, err := NewKeyring("k1", map[string][]byte{"k0": testKey("k0"), "k1": testKey("k1")})
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

func testHandle() Handle {
	return Handle{Tenant: "acme", WorkflowID: "acme/eval/nightly-42", Kind: "eval", Expiry: testNow.Add(24 * time.Hour)}
}

func testCursor() Cursor {
	tok := make([]byte, 300)
	for i := range tok {
		tok[i] = byte(i * 7)
	}
	return Cursor{
		Tenant: "acme", Subject: "user:alice@example.com", Tool: "list_jobs",
		Filter:    FilterFingerprint(map[string]string{"kind": "eval", "status": "running"}),
		PageToken: tok, Expiry: testNow.Add(10 * time.Minute),
	}
}

var urlSafe = regexp.MustCompile(`^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{1,16}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$`)

// cursorURLSafe is a cursor's shape: prefix.kid.ciphertext (encrypted, so no separate signature).
var cursorURLSafe = regexp.MustCompile(`^jgc2\.[A-Za-z0-9_-]{1,16}\.[A-Za-z0-9_-]+$`)

func assertURLSafe(t *testing.T, s string) {
	t.Helper()
	if !urlSafe.MatchString(s) && !cursorURLSafe.MatchString(s) {
		t.Errorf("%q is not prefix.kid.payload.sig (or jgc2.kid.ciphertext) over [A-Za-z0-9_-]", s)
	}
	if url.PathEscape(s) != s || url.QueryEscape(s) != s {
		t.Errorf("%q changes under URL escaping", s)
	}
	if js, _ := json.Marshal(s); string(js) != `"`+s+`"` {
		t.Errorf("%q changes under JSON encoding: %s", s, js)
	}
}

func sameHandle(a, b Handle) bool {
	return a.Tenant == b.Tenant && a.WorkflowID == b.WorkflowID && a.Kind == b.Kind && a.Expiry.Equal(b.Expiry)
}

func sameCursor(a, b Cursor) bool {
	return a.Tenant == b.Tenant && a.Subject == b.Subject && a.Tool == b.Tool && a.Filter == b.Filter &&
		bytes.Equal(a.PageToken, b.PageToken) && a.Expiry.Equal(b.Expiry)
}

func TestHandleRoundTrip(t *testing.T) {
	ring := testRing(t)
	for _, h := range []Handle{
		testHandle(),
		{Tenant: "acme", WorkflowID: "acme/export/q3-report", Kind: "export", Expiry: testNow.Add(time.Second)},
		{Tenant: "t", WorkflowID: "w", Kind: "eval", Expiry: time.Unix(1, 0)},
		{Tenant: "ünïcødé 租户", WorkflowID: "ünïcødé 租户/eval/<&>\"'\\\n\t\x00", Kind: "eval", Expiry: time.Unix(maxUnixSeconds, 0)},
		{Tenant: "acme", WorkflowID: "acme/eval/" + strings.Repeat("x", 600), Kind: "eval", Expiry: testNow.Add(time.Hour)},
	} {
		if err := h.Validate(); err != nil {
			t.Fatalf("Validate(%+v): %v", h, err)
		}
		s := ring.SealHandle(h)
		assertURLSafe(t, s)
		if !strings.HasPrefix(s, "jgh1.k1.") {
			t.Errorf("%q does not start with jgh1.k1.", s)
		}
		got, err := ring.OpenHandle(s, h.Expiry.Add(-time.Second))
		if err != nil {
			t.Fatalf("OpenHandle: %v", err)
		}
		if !sameHandle(got, h) {
			t.Errorf("round trip: got %+v, want %+v", got, h)
		}
		if got.Expiry.Location() != time.UTC {
			t.Errorf("expiry location %v, want UTC", got.Expiry.Location())
		}
		if again := ring.SealHandle(got); again != s {
			t.Errorf("sealing is not deterministic:\n%s\n%s", s, again)
		}
	}
}

func TestCursorRoundTrip(t *testing.T) {
	ring := testRing(t)
	big := bytes.Repeat([]byte{0xff, 0x00, '"', '\\'}, 500)
	for _, c := range []Cursor{
		testCursor(),
		{Tenant: "a", Subject: "b", Tool: "list_jobs", Filter: "f", PageToken: []byte{0}, Expiry: time.Unix(1, 0)},
		{Tenant: "acme", Subject: "svc", Tool: "list_jobs", Filter: FilterFingerprint(nil), PageToken: big, Expiry: testNow.Add(time.Minute)},
	} {
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		s := ring.SealCursor(c)
		assertURLSafe(t, s)
		if !strings.HasPrefix(s, "jgc2.k1.") {
			t.Errorf("%q does not start with jgc2.k1.", s)
		}
		got, err := ring.OpenCursor(s, c.Expiry.Add(-time.Second))
		if err != nil {
			t.Fatalf("OpenCursor: %v", err)
		}
		if !sameCursor(got, c) {
			t.Errorf("round trip: got %+v, want %+v", got, c)
		}
	}
	t.Logf("sealed cursor with a %d-byte page token is %d bytes", len(testCursor().PageToken), len(ring.SealCursor(testCursor())))
}

func TestSealTruncatesExpiryToSecond(t *testing.T) {
	ring := testRing(t)
	h := testHandle()
	h.Expiry = testNow.Add(1500 * time.Millisecond)
	got, err := ring.OpenHandle(ring.SealHandle(h), testNow)
	if err != nil {
		t.Fatal(err)
	}
	if want := testNow.Add(time.Second); !got.Expiry.Equal(want) {
		t.Errorf("expiry %v, want %v", got.Expiry, want)
	}
	// Time zones do not matter.
	h.Expiry = testNow.Add(time.Hour).In(time.FixedZone("X", -7*3600))
	got, _ = ring.OpenHandle(ring.SealHandle(h), testNow)
	if !got.Expiry.Equal(h.Expiry) {
		t.Errorf("expiry %v, want %v", got.Expiry, h.Expiry)
	}
}

func TestRotation(t *testing.T) {
	k0, k1, k2 := testKey("k0"), testKey("k1"), testKey("k2")
	before, _ := NewKeyring("k0", map[string][]byte{"k0": k0})                    // before rotation
	during, _ := NewKeyring("k1", map[string][]byte{"k0": k0, "k1": k1})          // new key signs, old verifies
	after, _ := NewKeyring("k1", map[string][]byte{"k1": k1})                     // old key dropped
	other, _ := NewKeyring("k2", map[string][]byte{"k0": k2, "k1": k2, "k2": k2}) // same kids, other keys
	h, c := testHandle(), testCursor()

	oldH, oldC := before.SealHandle(h), before.SealCursor(c)
	newH, newC := during.SealHandle(h), during.SealCursor(c)
	if !strings.HasPrefix(oldH, "jgh1.k0.") || !strings.HasPrefix(newH, "jgh1.k1.") ||
		!strings.HasPrefix(oldC, "jgc2.k0.") || !strings.HasPrefix(newC, "jgc2.k1.") {
		t.Fatalf("wrong kids: %s %s %s %s", oldH[:8], newH[:8], oldC[:8], newC[:8])
	}
	for name, s := range map[string]string{"old": oldH, "new": newH} {
		if got, err := during.OpenHandle(s, testNow); err != nil || !sameHandle(got, h) {
			t.Errorf("during rotation, %s handle: %+v, %v", name, got, err)
		}
	}
	for name, s := range map[string]string{"old": oldC, "new": newC} {
		if got, err := during.OpenCursor(s, testNow); err != nil || !sameCursor(got, c) {
			t.Errorf("during rotation, %s cursor: %+v, %v", name, got, err)
		}
	}
	// Re-sealing an old handle moves it to the current key.
	got, _ := during.OpenHandle(oldH, testNow)
	if s := during.SealHandle(got); s != newH {
		t.Errorf("re-seal of old handle = %q, want %q", s, newH)
	}
	// After the old key is dropped, its handles are unknown; new ones open.
	if _, err := after.OpenHandle(oldH, testNow); !errors.Is(err, errUnknownKID) {
		t.Errorf("old handle after rotation: %v, want unknown key id", err)
	}
	if _, err := after.OpenCursor(oldC, testNow); !errors.Is(err, errUnknownKID) {
		t.Errorf("old cursor after rotation: %v, want unknown key id", err)
	}
	if _, err := after.OpenHandle(newH, testNow); err != nil {
		t.Errorf("new handle after rotation: %v", err)
	}
	// A ring that does not know k1 yet (e.g. an old replica) cannot open new handles.
	if _, err := before.OpenHandle(newH, testNow); !errors.Is(err, errUnknownKID) {
		t.Errorf("new handle on old replica: %v, want unknown key id", err)
	}
	// Same kid, different key material: signature mismatch.
	for _, s := range []string{oldH, newH} {
		if _, err := other.OpenHandle(s, testNow); !errors.Is(err, errSignature) {
			t.Errorf("foreign key: %v, want signature mismatch", err)
		}
	}
}

func TestUnknownKID(t *testing.T) {
	ring := testRing(t)
	// Signed correctly with a key the ring does not have, under a kid it does not have.
	stranger, _ := NewKeyring("k9", map[string][]byte{"k9": testKey("k9")})
	// Signed with ring's own key bytes but under an unknown kid.
	renamed, _ := NewKeyring("k1x", map[string][]byte{"k1x": testKey("k1")})
	for _, s := range []string{stranger.SealHandle(testHandle()), renamed.SealHandle(testHandle())} {
		h, err := ring.OpenHandle(s, testNow)
		if !errors.Is(err, ErrMalformed) || !errors.Is(err, errUnknownKID) || h != (Handle{}) {
			t.Errorf("OpenHandle(%.12s…) = %+v, %v; want unknown key id", s, h, err)
		}
	}
	for _, s := range []string{stranger.SealCursor(testCursor()), renamed.SealCursor(testCursor())} {
		c, err := ring.OpenCursor(s, testNow)
		if !errors.Is(err, ErrMalformed) || !errors.Is(err, errUnknownKID) || c.Tenant != "" {
			t.Errorf("OpenCursor = %+v, %v; want unknown key id", c, err)
		}
	}
}

func TestHandleAndCursorAreNotInterchangeable(t *testing.T) {
	ring := testRing(t)
	h, c := ring.SealHandle(testHandle()), ring.SealCursor(testCursor())
	assertMalformedCursor(t, ring, h, "handle as cursor")
	assertMalformedHandle(t, ring, c, "cursor as handle")
	// Swapping the prefix alone breaks the signature.
	assertMalformedCursor(t, ring, CursorPrefix+h[4:], "handle with cursor prefix")
	assertMalformedHandle(t, ring, "jgh1"+c[4:], "cursor with handle prefix")

	// A cursor is encrypted, never only signed: a well-formed cursor payload MACed the way
	// handles are (the old, readable jgc1 format, under either prefix) is rejected.
	js, _ := json.Marshal(testCursor().wire())
	for _, prefix := range []string{"jgc1", CursorPrefix} {
		signed := prefix + ".k1." + b64.EncodeToString(js)
		forged := signed + "." + b64.EncodeToString(mac(testKey("k1"), "jobgate-cursor-v1", signed))
		assertMalformedCursor(t, ring, forged, prefix+" signed cursor")
	}
	// The payload sealed with the handle key itself (no HKDF) does not open either.
	block, _ := aes.NewCipher(testKey("k1"))
	gcm, _ := cipher.NewGCM(block)
	nonce := make([]byte, 12)
	raw := CursorPrefix + ".k1." + b64.EncodeToString(gcm.Seal(nonce, nonce, js, []byte(CursorPrefix+".k1")))
	if _, err := ring.OpenCursor(raw, testNow); !errors.Is(err, errSealed) {
		t.Errorf("cursor sealed with the raw key: %v, want errSealed", err)
	}
	// Control: the same payload sealed by the ring opens.
	if _, err := ring.OpenCursor(sealCursorJSON(ring, string(js)), testNow); err != nil {
		t.Errorf("control: %v", err)
	}
}

// TestCursorRevealsNothing: a cursor's holder cannot read it — no field and no byte of the
// page token appears in the string or in any base64 decoding of its parts — and any change to
// the ciphertext, the key ID or the prefix makes it refuse to open.
func TestCursorRevealsNothing(t *testing.T) {
	ring := testRing(t)
	c := Cursor{Tenant: "tenant-secret", Subject: "subject-secret", Tool: "list_approvals", Filter: "filter-secret",
		PageToken: []byte(`{"runId":"0199aabb-ccdd-7eef-8001-123456789abc","workflowId":"acme/export/bo/k1"}`), Expiry: testNow.Add(time.Hour)}
	s := ring.SealCursor(c)
	parts := strings.Split(s, ".")
	if len(parts) != 3 || parts[0] != CursorPrefix || parts[1] != "k1" {
		t.Fatalf("sealed cursor %q: want jgc2.k1.<ciphertext>", s)
	}
	blobs := [][]byte{[]byte(s)}
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
		if d, err := enc.DecodeString(parts[2]); err == nil {
			blobs = append(blobs, d)
		}
	}
	for _, b := range blobs {
		for _, secret := range []string{"tenant-secret", "subject-secret", "list_approvals", "filter-secret", "0199aabb", "acme/export", `"v":`, "runId"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("cursor reveals %q", secret)
			}
		}
		if json.Valid(b) {
			t.Errorf("cursor decodes to JSON: %q", b)
		}
	}
	sealed, _ := b64.DecodeString(parts[2])
	for i := range sealed {
		flipped := bytes.Clone(sealed)
		flipped[i] ^= 1
		if _, err := ring.OpenCursor(CursorPrefix+".k1."+b64.EncodeToString(flipped), testNow); !errors.Is(err, errSealed) {
			t.Fatalf("byte %d flipped: %v, want errSealed", i, err)
		}
	}
	// The header is authenticated: the same ciphertext under another key ID of the ring fails.
	two, _ := NewKeyring("k1", map[string][]byte{"k1": testKey("k1"), "k2": testKey("k1")})
	if _, err := two.OpenCursor(CursorPrefix+".k2."+parts[2], testNow); !errors.Is(err, errSealed) {
		t.Errorf("ciphertext moved to another kid with the same key: %v, want errSealed", err)
	}
	// Deterministic: the same cursor seals to the same string (no nonce reuse across payloads:
	// the nonce is derived from the payload).
	if again := ring.SealCursor(c); again != s {
		t.Errorf("re-seal differs")
	}
	c2 := c
	c2.Expiry = c.Expiry.Add(time.Second)
	if s2 := ring.SealCursor(c2); strings.Split(s2, ".")[2][:16] == parts[2][:16] {
		t.Errorf("two payloads share a nonce")
	}
}

func TestExpired(t *testing.T) {
	ring := testRing(t)
	h := testHandle()
	t.Run("handle", func(t *testing.T) { checkExpiry(t, h, h.Expiry, ring.SealHandle, ring.OpenHandle, sameHandle) })
	d := testDownload()
	t.Run("download", func(t *testing.T) { checkExpiry(t, d, d.Expiry, ring.SealDownload, ring.OpenDownload, sameDownload) })

	// The point of returning the value: another tenant's expired handle can
	// be told apart from the caller's own before saying "expired".
	other := Handle{Tenant: "globex", WorkflowID: "globex/eval/x", Kind: "eval", Expiry: testNow.Add(-time.Minute)}
	got, err := ring.OpenHandle(ring.SealHandle(other), testNow)
	if !errors.Is(err, ErrExpired) || got.Tenant != "globex" || got.WorkflowID != "globex/eval/x" {
		t.Errorf("expired foreign handle: %+v, %v", got, err)
	}

	c := testCursor()
	sc := ring.SealCursor(c)
	if got, err := ring.OpenCursor(sc, c.Expiry); err != ErrExpired || !sameCursor(got, c) {
		t.Errorf("expired cursor: %+v, %v; want decoded cursor and ErrExpired", got, err)
	}
	if got, err := ring.OpenCursor(sc, c.Expiry.Add(-time.Nanosecond)); err != nil || !sameCursor(got, c) {
		t.Errorf("live cursor: %+v, %v", got, err)
	}
}

// TestSizeLimits checks that Seal never produces what Open refuses, that
// Validate agrees with Seal (for the longest kid), and that the limits are
// reached exactly.
func TestSizeLimits(t *testing.T) {
	longKID := strings.Repeat("K", MaxKIDLen)
	r16, _ := NewKeyring(longKID, map[string][]byte{longKID: testKey("k1")})
	for _, ring := range []*Keyring{testRing(t), r16} {
		open := func(s string) error { _, err := ring.OpenHandle(s, testNow); return err }
		checkSizeLimit(t, "handle, kid "+ring.current, 500, 900, MaxHandleLen, 3, func(n int) (error, string) {
			h := Handle{Tenant: "acme", WorkflowID: strings.Repeat("w", n), Kind: "export", Expiry: testNow.Add(time.Hour)}
			return h.Validate(), ring.SealHandle(h)
		}, open)
		// A page-token byte costs ~16/9 characters, so the cap is met within a few.
		open = func(s string) error { _, err := ring.OpenCursor(s, testNow); return err }
		checkSizeLimit(t, "cursor, kid "+ring.current, 1800, 2600, MaxCursorLen, 8, func(n int) (error, string) {
			c := testCursor()
			c.PageToken = bytes.Repeat([]byte{0xfe}, n)
			return c.Validate(), ring.SealCursor(c)
		}, open)
	}
}

func TestSealRejectsInvalidValues(t *testing.T) {
	ring := testRing(t)
	good := testHandle()
	checkRejects(t, good, map[string]func(*Handle){
		"empty tenant":      func(h *Handle) { h.Tenant = "" },
		"non-UTF-8 tenant":  func(h *Handle) { h.Tenant = "a\xffb" },
		"empty workflow ID": func(h *Handle) { h.WorkflowID = "" },
		"non-UTF-8 wid":     func(h *Handle) { h.WorkflowID = "\xc3" },
		"empty kind":        func(h *Handle) { h.Kind = "" },
		"malformed kind":    func(h *Handle) { h.Kind = "re-port" },
		"kind case":         func(h *Handle) { h.Kind = "Eval" },
		"kind digit first":  func(h *Handle) { h.Kind = "1eval" },
		"kind 33 chars":     func(h *Handle) { h.Kind = "k" + strings.Repeat("x", 32) },
		"zero expiry":       func(h *Handle) { h.Expiry = time.Time{} },
		"pre-1970 expiry":   func(h *Handle) { h.Expiry = time.Unix(-5, 0) },
		"epoch expiry":      func(h *Handle) { h.Expiry = time.Unix(0, 0) },
		"year 10000":        func(h *Handle) { h.Expiry = time.Unix(maxUnixSeconds+1, 0) },
		"too long":          func(h *Handle) { h.WorkflowID = strings.Repeat("x", 800) },
	}, Handle.Validate, ring.SealHandle)
	goodC := testCursor()
	checkRejects(t, goodC, map[string]func(*Cursor){
		"empty tenant":     func(c *Cursor) { c.Tenant = "" },
		"empty subject":    func(c *Cursor) { c.Subject = "" },
		"empty tool":       func(c *Cursor) { c.Tool = "" },
		"empty filter":     func(c *Cursor) { c.Filter = "" },
		"non-UTF-8 filter": func(c *Cursor) { c.Filter = "\xff" },
		"nil page token":   func(c *Cursor) { c.PageToken = nil },
		"empty page token": func(c *Cursor) { c.PageToken = []byte{} },
		"zero expiry":      func(c *Cursor) { c.Expiry = time.Time{} },
		"too long":         func(c *Cursor) { c.PageToken = make([]byte, 3000) },
	}, Cursor.Validate, ring.SealCursor)

	var nilRing *Keyring
	if s := nilRing.SealHandle(good); s != "" {
		t.Errorf("nil ring sealed %q", s)
	}
	if s := nilRing.SealCursor(goodC); s != "" {
		t.Errorf("nil ring sealed %q", s)
	}
	if _, err := nilRing.OpenHandle(ring.SealHandle(good), testNow); !errors.Is(err, ErrMalformed) {
		t.Errorf("nil ring OpenHandle: %v", err)
	}
	if _, err := (&Keyring{}).OpenCursor(ring.SealCursor(goodC), testNow); !errors.Is(err, ErrMalformed) {
		t.Errorf("zero ring OpenCursor: %v", err)
	}
}

// TestKindSyntax: the handle package knows no list of job kinds, only their
// syntax ^[a-z][a-z0-9_]{0,31}$.
func TestKindSyntax(t *testing.T) {
	ring := testRing(t)
	for _, k := range []string{
		"eval", "export", "report", "a", "z", "a0", "x_", "bulk_export_v2",
		"k" + strings.Repeat("x", 31), "a" + strings.Repeat("_", 31), "q" + strings.Repeat("9", 31),
	} {
		h := testHandle()
		h.Kind = k
		if err := h.Validate(); err != nil {
			t.Errorf("kind %q: Validate: %v", k, err)
		}
		got, err := ring.OpenHandle(ring.SealHandle(h), testNow)
		if err != nil || got.Kind != k {
			t.Errorf("kind %q: round trip %+v, %v", k, got, err)
		}
		// Also when the payload is built by hand (the opener checks too).
		js := `{"v":1,"t":"acme","w":"acme/x/y","k":"` + k + `","e":1924992000}`
		if got, err := ring.OpenHandle(signJSON(ring, handleFormat, js), testNow); err != nil || got.Kind != k {
			t.Errorf("kind %q: hand-built payload %+v, %v", k, got, err)
		}
	}
	for _, k := range []string{
		"", "_", "_a", "0", "9a", "A", "Eval", "evaL", "ev-al", "ev.al", "ev al", " eval", "eval ", "eval\n",
		"eval\u0000", "évaluation", "eval/x", "k" + strings.Repeat("x", 32), strings.Repeat("a", 100),
	} {
		h := testHandle()
		h.Kind = k
		if err := h.Validate(); err == nil {
			t.Errorf("kind %q: Validate accepted", k)
		}
		if s := ring.SealHandle(h); s != "" {
			t.Errorf("kind %q: sealed %q", k, s)
		}
		js, _ := json.Marshal(handleWire{V: 1, T: "acme", W: "acme/x/y", K: k, E: 1924992000})
		assertMalformedHandle(t, ring, signJSON(ring, handleFormat, string(js)), "kind "+k)
	}
}

func TestRejectsMalformedShapes(t *testing.T) {
	ring := testRing(t)
	good := ring.SealHandle(testHandle())
	parts := strings.Split(good, ".")
	sig := parts[3]
	lenient := base64.RawURLEncoding.EncodeToString(mustDecodeLenient(sig)) // == sig
	for _, s := range []string{
		"", ".", "..", "...", "....", "jgh1", "jgh1.", "jgh1.k1", "jgh1.k1.", "jgh1.k1..", "jgh1.k1.." + sig,
		"jgh1..payload." + sig, ".k1." + parts[2] + "." + sig,
		"jgh1.k1." + parts[2], "jgh1.k1." + parts[2] + ".", good + ".", good + "." + sig,
		"jgh2" + good[4:], "jgh0" + good[4:], "JGH1" + good[4:], "jgh" + good[4:], "h1" + good[4:],
		"jgc1" + good[4:],
		strings.Replace(good, ".", "..", 1),
		strings.Replace(good, ".", "%2E", 1),
		good[:len(good)-1] + "=",
		good + "=",
		strings.Replace(good, "_", "/", -1) + strings.Replace(good, "-", "+", -1),
		" " + good, good + "\n", good[:20] + "\n" + good[20:], good[:20] + "\r\n" + good[20:],
		"jgh1.k1." + parts[2] + "." + sig[:42],
		"jgh1.k1." + parts[2] + "." + sig + "A",
		"jgh1.k1." + parts[2] + "." + lenient[:42] + "B", // non-canonical last char
		"jgh1.k1." + parts[2] + "." + strings.Repeat("A", 43),
		"jgh1.k1." + parts[2] + "." + strings.Repeat("_", 43),
		"jgh1.k1.é." + sig,
		"\x00\x00\x00",
		strings.Repeat(".", 3),
	} {
		assertMalformedHandle(t, ring, s, "shape")
	}
	if sig != lenient {
		t.Fatal("sanity: signature is not canonical base64url")
	}
}

func mustDecodeLenient(s string) []byte {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// signJSON returns a correctly signed string around an arbitrary payload,
// to test what happens after the MAC check.
func signJSON(ring *Keyring, f format, js string) string {
	return signPayload(ring, f, b64.EncodeToString([]byte(js)))
}

// sealCursorJSON returns a correctly encrypted cursor around an arbitrary payload, to test what
// happens after authentication.
func sealCursorJSON(ring *Keyring, js string) string { return ring.sealCursorJSON([]byte(js), 1<<20) }

func signPayload(ring *Keyring, f format, payload string) string {
	signed := f.prefix + "." + ring.current + "." + payload
	return signed + "." + b64.EncodeToString(mac(ring.keys[ring.current], f.label, signed))
}

func TestRejectsBadPayloadAfterMAC(t *testing.T) {
	ring := testRing(t)
	const e = `1893456000` // 2030-01-01T00:00:00Z < testNow: expired, still must be well-formed
	const live = `1924992000`

	// Controls: canonical payloads open.
	if h, err := ring.OpenHandle(signJSON(ring, handleFormat, `{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":`+live+`}`), testNow); err != nil || h.WorkflowID != "acme/eval/x" {
		t.Fatalf("control handle: %+v, %v", h, err)
	}
	if _, err := ring.OpenHandle(signJSON(ring, handleFormat, `{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":`+e+`}`), testNow); err != ErrExpired {
		t.Fatalf("control expired handle: %v", err)
	}
	if c, err := ring.OpenCursor(sealCursorJSON(ring, `{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/w==","e":`+live+`}`), testNow); err != nil || !bytes.Equal(c.PageToken, []byte{0, 1, 2, 0xff}) {
		t.Fatalf("control cursor: %+v, %v", c, err)
	}

	for _, js := range []string{
		``, ` `, `null`, `[]`, `{}`, `"x"`, `1`, `true`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + e + `,"x":1}`,      // unknown field
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + e + `,"kind":"x"}`, // unknown field
		`{"t":"acme","w":"acme/eval/x","k":"eval","e":` + e + `}`,                  // missing v
		`{"v":1,"w":"acme/eval/x","k":"eval","e":` + e + `}`,                       // missing t
		`{"v":1,"t":"acme","k":"eval","e":` + e + `}`,                              // missing w
		`{"v":1,"t":"acme","w":"acme/eval/x","e":` + e + `}`,                       // missing k
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval"}`,                          // missing e
		`{"v":null,"t":"acme","w":"acme/eval/x","k":"eval","e":` + e + `}`,
		`{"v":1,"t":null,"w":"acme/eval/x","k":"eval","e":` + e + `}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":null}`,
		`{"v":"1","t":"acme","w":"acme/eval/x","k":"eval","e":` + e + `}`, // wrong types
		`{"v":1.0,"t":"acme","w":"acme/eval/x","k":"eval","e":` + e + `}`,
		`{"v":1,"t":7,"w":"acme/eval/x","k":"eval","e":` + e + `}`,
		`{"v":1,"t":["acme"],"w":"acme/eval/x","k":"eval","e":` + e + `}`,
		`{"v":1,"t":"acme","w":{},"k":"eval","e":` + e + `}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":true,"e":` + e + `}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":"` + e + `"}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + e + `.5}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":1e9}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":99999999999999999999}`,
		`{"v":2,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}`, // wrong version
		`{"v":0,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}`,
		`{"v":1,"t":"","w":"acme/eval/x","k":"eval","e":` + live + `}`, // empty values
		`{"v":1,"t":"acme","w":"","k":"eval","e":` + live + `}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"","e":` + live + `}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"re-port","e":` + live + `}`, // malformed kind
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"EVAL","e":` + live + `}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"_eval","e":` + live + `}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"k` + strings.Repeat("x", 32) + `","e":` + live + `}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":0}`, // bad expiry
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":-1}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":253402300800}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}x`, // trailing data
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}{}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `} `,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}` + "\n",
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `,}`,
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live,        // truncated
		` {"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}`, // not canonical
		`{"v": 1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}`,
		`{"t":"acme","v":1,"w":"acme/eval/x","k":"eval","e":` + live + `}`,                         // order
		`{"V":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}`,                         // case
		`{"v":1,"T":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}`,                         // case
		`{"v":1,"t":"acme","t":"globex","w":"acme/eval/x","k":"eval","e":` + live + `}`,            // duplicate
		`{"v":1,"t":"globex","w":"acme/eval/x","k":"eval","e":` + live + `,"t":"acme"}`,            // duplicate
		`{"v":1,"t":"\u0061cme","w":"acme/eval/x","k":"eval","e":` + live + `}`,                    // escape
		`{"v":1,"t":"acme","w":"acme/eval/<x>","k":"eval","e":` + live + `}`,                       // unescaped <
		"{\"v\":1,\"t\":\"a\xffb\",\"w\":\"acme/eval/x\",\"k\":\"eval\",\"e\":" + live + "}",       // bad UTF-8
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `,"e":` + live + `}`,        // same dup
		`{"v":01,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}`,                        // bad number
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `000}`,                      // out of range
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/w==","e":` + live + `}`,     // a cursor
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `,"p":"AAEC/w=="}` + "\x00", // NUL
	} {
		assertMalformedHandle(t, ring, signJSON(ring, handleFormat, js), "handle payload "+js)
	}

	for _, js := range []string{
		`{}`, `null`,
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/w==","e":` + live + `,"x":0}`,
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","e":` + live + `}`,                          // missing p
		`{"v":1,"t":"acme","o":"list_jobs","f":"F","p":"AAEC/w==","e":` + live + `}`,                     // missing s
		`{"v":1,"t":"acme","s":"bob","f":"F","p":"AAEC/w==","e":` + live + `}`,                           // missing o
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","p":"AAEC/w==","e":` + live + `}`,                   // missing f
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":null,"e":` + live + `}`,                 // null p
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"","e":` + live + `}`,                   // empty p
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC_w==","e":` + live + `}`,           // url alphabet
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/w","e":` + live + `}`,             // no padding
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/x==","e":` + live + `}`,           // non-canonical bits
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":[0,1],"e":` + live + `}`,                // wrong type
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"","p":"AAEC/w==","e":` + live + `}`,            // empty f
		`{"v":1,"t":"acme","s":"","o":"list_jobs","f":"F","p":"AAEC/w==","e":` + live + `}`,              // empty s
		`{"v":2,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/w==","e":` + live + `}`,           // version
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/w==","e":` + live + `} `,          // trailing
		`{"v":1,"t":"acme","w":"acme/eval/x","k":"eval","e":` + live + `}`,                               // a handle
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/w==","e":0}`,                      // expiry
		`{"v":1,"s":"bob","t":"acme","o":"list_jobs","f":"F","p":"AAEC/w==","e":` + live + `}`,           // order
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/w==","e":` + live + `,"s":"eve"}`, // dup
	} {
		assertMalformedCursor(t, ring, sealCursorJSON(ring, js), "cursor payload "+js)
	}

	// Bad base64 under a valid MAC.
	for _, p := range badBase64Payloads {
		s := signPayload(ring, handleFormat, p)
		if _, err := ring.OpenHandle(s, testNow); !errors.Is(err, ErrMalformed) {
			t.Errorf("payload %q: %v", p, err)
		}
	}
	if _, err := ring.OpenHandle(signPayload(ring, handleFormat, "AB"), testNow); !errors.Is(err, errPayload) {
		t.Errorf("non-canonical base64 payload: %v, want payload error", err)
	}
}

// TestWireFormat pins the format by building a handle and a cursor from the
// documented recipe, independently of the implementation.
func TestWireFormat(t *testing.T) {
	ring := testRing(t)
	exp := time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC) // 1893542400

	h := Handle{Tenant: "acme", WorkflowID: "acme/eval/nightly-1", Kind: "eval", Expiry: exp}
	js := `{"v":1,"t":"acme","w":"acme/eval/nightly-1","k":"eval","e":1893542400}`
	want := signRecipe("jobgate-handle-v1", "jgh1.k1."+base64.RawURLEncoding.EncodeToString([]byte(js)))
	if got := ring.SealHandle(h); got != want {
		t.Errorf("SealHandle:\n got %s\nwant %s", got, want)
	}

	c := Cursor{Tenant: "acme", Subject: "alice", Tool: "list_jobs", Filter: "FP", PageToken: []byte{0, 1, 2, 0xff}, Expiry: exp}
	js = `{"v":1,"t":"acme","s":"alice","o":"list_jobs","f":"FP","p":"AAEC/w==","e":1893542400}`
	// Cursor: AES-256-GCM under HKDF-SHA256(key, info "jobgate-cursor-v2 aes-256-gcm"), nonce
	// HMAC-SHA256(HKDF-SHA256(key, info "jobgate-cursor-v2 synthetic-nonce"), header || JSON)[:12],
	// additional data the header "jgc2.k1"; the string is header "." base64url(nonce || sealed).
	encKey, _ := hkdf.Key(sha256.New, testKey("k1"), nil, "jobgate-cursor-v2 aes-256-gcm", 32)
	nonceKey, _ := hkdf.Key(sha256.New, testKey("k1"), nil, "jobgate-cursor-v2 synthetic-nonce", 32)
	nm := hmac.New(sha256.New, nonceKey)
	nm.Write([]byte("jgc2.k1" + js))
	nonce := nm.Sum(nil)[:12]
	block, _ := aes.NewCipher(encKey)
	gcm, _ := cipher.NewGCM(block)
	want = "jgc2.k1." + base64.RawURLEncoding.EncodeToString(gcm.Seal(slices.Clone(nonce), nonce, []byte(js), []byte("jgc2.k1")))
	if got := ring.SealCursor(c); got != want {
		t.Errorf("SealCursor:\n got %s\nwant %s", got, want)
	}
}

func TestFilterFingerprint(t *testing.T) {
	a := map[string]string{}
	a["status"] = "running"
	a["kind"] = "eval"
	b := map[string]string{"kind": "eval", "status": "running"}
	fa := FilterFingerprint(a)
	if fa != FilterFingerprint(b) {
		t.Error("fingerprint depends on insertion order")
	}
	for i := 0; i < 50; i++ { // map iteration order varies from call to call
		if FilterFingerprint(a) != fa {
			t.Fatal("fingerprint is not stable")
		}
	}
	if len(fa) != 22 || !regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`).MatchString(fa) {
		t.Errorf("fingerprint %q is not 22 base64url characters", fa)
	}
	sum := sha256.Sum256([]byte("jobgate-filter-v1\nkind=eval&status=running"))
	if want := base64.RawURLEncoding.EncodeToString(sum[:16]); fa != want {
		t.Errorf("fingerprint %q, want %q", fa, want)
	}
	if FilterFingerprint(nil) != FilterFingerprint(map[string]string{}) {
		t.Error("nil and empty maps differ")
	}
	// Maps that a naive k=v&k=v join would confuse must differ.
	distinct := []map[string]string{
		nil,
		{"a": ""},
		{"a": "b"},
		{"a": "b", "c": "d"},
		{"a": "b&c=d"},
		{"a=b": "c"},
		{"a": "b=c"},
		{"a": "b,c"},
		{"a": "b", "c": ""},
		{"A": "b"},
		{"a": "B"},
		{"a": "b c"},
		{"a": "b+c"},
		{"a": "b%20c"},
		{"kind": "eval"},
		{"kind": "export"},
		{"status": "eval"},
	}
	seen := map[string]int{}
	for i, m := range distinct {
		fp := FilterFingerprint(m)
		if j, dup := seen[fp]; dup {
			t.Errorf("%v and %v share fingerprint %s", distinct[j], m, fp)
		}
		seen[fp] = i
	}
}

// TestConstantTimeCompare checks, on the source, that signatures are compared
// only with hmac.Equal, inside verifyMAC, and that open calls verifyMAC.
func TestConstantTimeCompare(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatal("no source files found")
	}
	var hmacEqualIn, verifyCalledIn []string
	{
		for _, file := range files {
			for _, decl := range file.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok {
					continue
				}
				ast.Inspect(fn, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.SelectorExpr:
						if x, ok := n.X.(*ast.Ident); ok {
							switch x.Name + "." + n.Sel.Name {
							case "hmac.Equal":
								hmacEqualIn = append(hmacEqualIn, fn.Name.Name)
							case "bytes.Equal", "bytes.Compare", "reflect.DeepEqual", "slices.Equal", "strings.Compare", "strings.EqualFold":
								t.Errorf("%s: %s.%s used in %s; compare MACs with hmac.Equal", fset.Position(n.Pos()), x.Name, n.Sel.Name, fn.Name.Name)
							}
						}
					case *ast.CallExpr:
						if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "verifyMAC" {
							verifyCalledIn = append(verifyCalledIn, fn.Name.Name)
						}
					case *ast.BinaryExpr:
						if n.Op == token.EQL || n.Op == token.NEQ {
							for _, side := range []ast.Expr{n.X, n.Y} {
								name := rootIdent(side)
								if strings.HasSuffix(name, "Len") { // a length constant, not contents
									continue
								}
								if strings.Contains(strings.ToLower(name), "sig") || strings.Contains(strings.ToLower(name), "mac") {
									t.Errorf("%s: %s compared with %s in %s", fset.Position(n.Pos()), name, n.Op, fn.Name.Name)
								}
							}
						}
					}
					return true
				})
			}
		}
	}
	// openCursorJSON compares a cursor's synthetic nonce (after GCM, which checks its tag in
	// constant time itself).
	if fmt.Sprint(hmacEqualIn) != "[openCursorJSON verifyMAC]" {
		t.Errorf("hmac.Equal used in %v, want only in openCursorJSON and verifyMAC", hmacEqualIn)
	}
	if fmt.Sprint(verifyCalledIn) != "[open]" {
		t.Errorf("verifyMAC called from %v, want only from open", verifyCalledIn)
	}
}

// rootIdent names the identifier an operand is (or converts), ignoring
// calls such as len(sig), which compare lengths, not contents.
func rootIdent(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.ParenExpr:
		return rootIdent(e.X)
	case *ast.SliceExpr:
		return rootIdent(e.X)
	case *ast.IndexExpr:
		return rootIdent(e.X)
	case *ast.CallExpr: // conversions like string(sig)
		if id, ok := e.Fun.(*ast.Ident); ok && (id.Name == "string" || id.Name == "[]byte") && len(e.Args) == 1 {
			return rootIdent(e.Args[0])
		}
	}
	return ""
}

func TestConcurrentUse(t *testing.T) {
	ring := testRing(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				h := testHandle()
				h.WorkflowID = fmt.Sprintf("acme/eval/%d-%d", g, i)
				got, err := ring.OpenHandle(ring.SealHandle(h), testNow)
				if err != nil || got.WorkflowID != h.WorkflowID {
					t.Errorf("%+v, %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkSealHandle(b *testing.B) {
	ring, h := testRing(b), testHandle()
	b.ReportAllocs()
	for b.Loop() {
		if ring.SealHandle(h) == "" {
			b.Fatal("seal failed")
		}
	}
}

func BenchmarkOpenHandle(b *testing.B) {
	ring := testRing(b)
	s := ring.SealHandle(testHandle())
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if _, err := ring.OpenHandle(s, testNow); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenHandleBadSig is the cost of rejecting a forged handle.
func BenchmarkOpenHandleBadSig(b *testing.B) {
	ring := testRing(b)
	s := []byte(ring.SealHandle(testHandle()))
	s[len(s)-5] ^= 1
	bad := string(s)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ring.OpenHandle(bad, testNow); err == nil {
			b.Fatal("opened")
		}
	}
}

func BenchmarkSealCursor(b *testing.B) {
	ring, c := testRing(b), testCursor()
	b.ReportAllocs()
	for b.Loop() {
		if ring.SealCursor(c) == "" {
			b.Fatal("seal failed")
		}
	}
}

func BenchmarkOpenCursor(b *testing.B) {
	ring := testRing(b)
	s := ring.SealCursor(testCursor())
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if _, err := ring.OpenCursor(s, testNow); err != nil {
			b.Fatal(err)
		}
	}
}
