package handle

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The tests every signed string of this package must pass (tampering, truncation, expiry,
// size limits, invalid values, errors that do not echo input) are written once here, over
// tokenKind and a few generic helpers; handle_test.go and download_test.go keep what is
// particular to each kind.

// tokenKind is one kind of sealed string, as the table-driven tests see it.
type tokenKind struct {
	name   string
	maxLen int
	// sealed is a valid token of this kind.
	sealed func(*Keyring) string
	// open opens s at now; zero reports that the value returned is the zero value.
	open func(r *Keyring, s string, now time.Time) (zero bool, err error)
	// oversized is a correctly signed (or sealed) token over the length cap.
	oversized func(*Keyring) string
}

var (
	handleToken = tokenKind{
		name: "handle", maxLen: MaxHandleLen,
		sealed: func(r *Keyring) string { return r.SealHandle(testHandle()) },
		open: func(r *Keyring, s string, now time.Time) (bool, error) {
			h, err := r.OpenHandle(s, now)
			return h == (Handle{}), err
		},
		oversized: func(r *Keyring) string {
			big := Handle{Tenant: "acme", WorkflowID: "acme/eval/" + strings.Repeat("x", 2000), Kind: "eval", Expiry: testNow.Add(time.Hour)}
			js, _ := json.Marshal(big.wire())
			return (&Keyring{current: "k1", keys: r.keys}).seal(format{HandlePrefix, handleLabel, 1 << 20}, js)
		},
	}
	cursorToken = tokenKind{
		name: "cursor", maxLen: MaxCursorLen,
		sealed: func(r *Keyring) string { return r.SealCursor(testCursor()) },
		open: func(r *Keyring, s string, now time.Time) (bool, error) {
			c, err := r.OpenCursor(s, now)
			return sameCursor(c, Cursor{}), err
		},
		oversized: func(r *Keyring) string {
			big := testCursor()
			big.PageToken = make([]byte, 4000)
			js, _ := json.Marshal(big.wire())
			return r.sealCursorJSON(js, 1<<20)
		},
	}
	downloadToken = tokenKind{
		name: "download token", maxLen: MaxDownloadLen,
		sealed: func(r *Keyring) string { return r.SealDownload(testDownload()) },
		open: func(r *Keyring, s string, now time.Time) (bool, error) {
			d, err := r.OpenDownload(s, now)
			return d == (Download{}), err
		},
		oversized: func(r *Keyring) string {
			big := testDownload()
			big.WorkflowID = strings.Repeat("x", 2000)
			js, _ := json.Marshal(big.wire())
			return r.seal(format{DownloadPrefix, downloadLabel, 1 << 20}, js)
		},
	}
	tokenKinds = []tokenKind{handleToken, cursorToken, downloadToken}
)

// assertMalformed fails unless s is rejected as malformed (and not as expired), with the zero
// value.
func (k tokenKind) assertMalformed(t *testing.T, ring *Keyring, s, what string) {
	t.Helper()
	zero, err := k.open(ring, s, testNow)
	if err == nil || !errors.Is(err, ErrMalformed) || errors.Is(err, ErrExpired) || !zero {
		t.Fatalf("%s: open %s %q = %v (zero value: %v); want ErrMalformed", what, k.name, s, err, zero)
	}
}

func assertMalformedHandle(t *testing.T, ring *Keyring, s, what string) {
	t.Helper()
	handleToken.assertMalformed(t, ring, s, what)
}

func assertMalformedCursor(t *testing.T, ring *Keyring, s, what string) {
	t.Helper()
	cursorToken.assertMalformed(t, ring, s, what)
}

func assertMalformedDownload(t *testing.T, ring *Keyring, s, what string) {
	t.Helper()
	downloadToken.assertMalformed(t, ring, s, what)
}

// checkExpiry: a sealed v opens until expiry and is exactly ErrExpired from then on, and in
// both cases decodes to v (so a caller can tell another tenant's expired token from its own
// before saying "expired").
func checkExpiry[T any](t *testing.T, v T, expiry time.Time, seal func(T) string, open func(string, time.Time) (T, error), same func(a, b T) bool) {
	t.Helper()
	s := seal(v)
	for _, tc := range []struct {
		now     time.Time
		expired bool
	}{
		{expiry.Add(-time.Hour), false},
		{expiry.Add(-time.Second), false},
		{expiry.Add(-time.Nanosecond), false},
		{expiry, true}, // now >= Expiry
		{expiry.Add(time.Nanosecond), true},
		{expiry.Add(365 * 24 * time.Hour), true},
	} {
		got, err := open(s, tc.now)
		if tc.expired {
			if err != ErrExpired || errors.Is(err, ErrMalformed) {
				t.Errorf("now=%v: err %v, want exactly ErrExpired", tc.now, err)
			}
		} else if err != nil {
			t.Errorf("now=%v: %v", tc.now, err)
		}
		if !same(got, v) {
			t.Errorf("now=%v: decoded %+v, want %+v (also when expired)", tc.now, got, v)
		}
	}
}

// checkRejects: every mutation of good fails Validate, and Seal answers "" for it.
func checkRejects[T any](t *testing.T, good T, muts map[string]func(*T), validate func(T) error, seal func(T) string) {
	t.Helper()
	for name, mut := range muts {
		v := good
		mut(&v)
		if err := validate(v); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, v)
		}
		if s := seal(v); s != "" {
			t.Errorf("%s: Seal = %q, want \"\"", name, s)
		}
	}
}

// checkSizeLimit seals the value mk(n) for each n in [from, to], growing with n: Seal never
// produces what Open refuses (nor more than maxLen bytes), Validate agrees with Seal, and some
// token comes within slack bytes of maxLen before the first n Seal refuses.
func checkSizeLimit(t *testing.T, what string, from, to, maxLen, slack int,
	mk func(n int) (validateErr error, sealed string), open func(string) error) {
	t.Helper()
	longest, firstRefused := 0, 0
	for n := from; n <= to; n++ {
		verr, s := mk(n)
		if verr == nil && s == "" {
			t.Fatalf("%s, n=%d: Validate ok but Seal failed", what, n)
		}
		if s == "" {
			if firstRefused == 0 {
				firstRefused = n
			}
			continue
		}
		if len(s) > maxLen {
			t.Fatalf("%s: sealed %d bytes > %d", what, len(s), maxLen)
		}
		if err := open(s); err != nil {
			t.Fatalf("%s, n=%d, %d bytes: %v", what, n, len(s), err)
		}
		longest = max(longest, len(s))
	}
	if longest < maxLen-slack || firstRefused == 0 {
		t.Errorf("%s: longest %d bytes, first refused at n=%d", what, longest, firstRefused)
	}
	t.Logf("%s: longest %d bytes; n=%d is the first refused", what, longest, firstRefused)
}

// badBase64Payloads are payloads no canonical base64url encoding produces.
var badBase64Payloads = []string{"A", "AB", "ABC=", "AAAAA", "A_-"}

// signRecipe signs signed ("<prefix>.<kid>.<payload>") with testKey("k1") under label the way
// the documented format says, independently of the implementation.
func signRecipe(label, signed string) string {
	m := hmac.New(sha256.New, testKey("k1"))
	m.Write([]byte(label + "." + signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func TestTamperEveryByte(t *testing.T) {
	ring := testRing(t)
	for _, k := range tokenKinds {
		t.Run(k.name, func(t *testing.T) {
			n := 0
			b := []byte(k.sealed(ring))
			for i := range b {
				orig := b[i]
				// Every other byte value, including ones that decode to the same
				// bits under lenient base64 (the last signature character).
				for v := 0; v < 256; v++ {
					if byte(v) == orig {
						continue
					}
					b[i] = byte(v)
					k.assertMalformed(t, ring, string(b), fmt.Sprintf("byte %d = %#x", i, v))
					n++
				}
				b[i] = orig
			}
			t.Logf("%d tampered variants of a %d-byte %s rejected", n, len(b), k.name)
		})
	}
}

func TestTruncateAndExtend(t *testing.T) {
	ring := testRing(t)
	for _, k := range tokenKinds {
		t.Run(k.name, func(t *testing.T) {
			s := k.sealed(ring)
			for n := 0; n < len(s); n++ {
				k.assertMalformed(t, ring, s[:n], fmt.Sprintf("prefix of length %d", n))
				k.assertMalformed(t, ring, s[n+1:], fmt.Sprintf("suffix from %d", n+1))
				k.assertMalformed(t, ring, s[:n]+s[n+1:], fmt.Sprintf("byte %d deleted", n))
			}
			for _, extra := range []string{"A", "AA", "AAA", "AAAA", "=", "==", ".", ".x", "/", "/x", "?x=1", "#x", " ", "\n", "\x00", "%3D", "é"} {
				k.assertMalformed(t, ring, s+extra, "trailing "+extra)
				k.assertMalformed(t, ring, extra+s, "leading "+extra)
			}
		})
	}
}

// TestOversizedInputRejectedFirst: the length cap is checked before anything else, the MAC
// included, so no one can make us hash megabytes; a correctly signed token over the cap is
// refused too.
func TestOversizedInputRejectedFirst(t *testing.T) {
	ring := testRing(t)
	for _, k := range tokenKinds {
		prefix := strings.Split(k.sealed(ring), ".")[0]
		for _, s := range []string{
			strings.Repeat("A", k.maxLen+1),
			strings.Repeat("\xff", 1<<20),
			strings.Repeat(".", 1<<20),
			prefix + ".k1." + strings.Repeat("A", k.maxLen) + ".sig",
			k.oversized(ring),
		} {
			if _, err := k.open(ring, s, testNow); !errors.Is(err, errTooLong) {
				t.Errorf("%d-byte %s: %v, want too long", len(s), k.name, err)
			}
		}
	}
}

func TestErrorsDoNotCarryInput(t *testing.T) {
	ring := testRing(t)
	for _, k := range tokenKinds {
		good := k.sealed(ring)
		sig := good[strings.LastIndexByte(good, '.')+1:]
		for i := 0; i < len(good); i += 5 {
			_, err := k.open(ring, good[:i]+"x"+good[i+1:], testNow)
			if err == nil {
				continue
			}
			if msg := err.Error(); strings.Contains(msg, sig[:10]) || strings.Contains(msg, "acme") || strings.Contains(msg, "alice") {
				t.Fatalf("%s: error %q carries input", k.name, msg)
			}
		}
	}
}
