package handle

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

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
