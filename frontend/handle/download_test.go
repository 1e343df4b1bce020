package handle

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// testDigest is the hex SHA-256 of an artifact with the given contents.
func testDigest(contents string) string {
	sum := sha256.Sum256([]byte(contents))
	return hex.EncodeToString(sum[:])
}

func testDownload() Download {
	return Download{
		Tenant: "acme", WorkflowID: "acme/export/q3-report", Subject: "user:alice@example.com",
		Digest: testDigest("q3-report.csv"), Expiry: testNow.Add(5 * time.Minute),
	}
}

func sameDownload(a, b Download) bool {
	return a.Tenant == b.Tenant && a.WorkflowID == b.WorkflowID && a.Subject == b.Subject &&
		a.Digest == b.Digest && a.Expiry.Equal(b.Expiry)
}

func TestDownloadRoundTrip(t *testing.T) {
	ring := testRing(t)
	for _, d := range []Download{
		testDownload(),
		{Tenant: "t", WorkflowID: "w", Subject: "s", Digest: strings.Repeat("0", 64), Expiry: time.Unix(1, 0)},
		{Tenant: "ünïcødé 租户", WorkflowID: "ünïcødé 租户/export/<&>\"'\\\n\t\x00", Subject: "user:ü@例え.jp",
			Digest: strings.Repeat("f", 64), Expiry: time.Unix(maxUnixSeconds, 0)},
		{Tenant: "acme", WorkflowID: "acme/export/" + strings.Repeat("x", 600), Subject: strings.Repeat("s", 256),
			Digest: testDigest(""), Expiry: testNow.Add(time.Hour)},
	} {
		if err := d.Validate(); err != nil {
			t.Fatalf("Validate(%+v): %v", d, err)
		}
		s := ring.SealDownload(d)
		assertURLSafe(t, s)
		if !strings.HasPrefix(s, "jgd1.k1.") {
			t.Errorf("%q does not start with jgd1.k1.", s)
		}
		if len(s) > MaxDownloadLen {
			t.Errorf("sealed %d bytes > %d", len(s), MaxDownloadLen)
		}
		got, err := ring.OpenDownload(s, d.Expiry.Add(-time.Second))
		if err != nil {
			t.Fatalf("OpenDownload: %v", err)
		}
		if !sameDownload(got, d) {
			t.Errorf("round trip: got %+v, want %+v", got, d)
		}
		if got.Expiry.Location() != time.UTC {
			t.Errorf("expiry location %v, want UTC", got.Expiry.Location())
		}
		if again := ring.SealDownload(got); again != s {
			t.Errorf("sealing is not deterministic:\n%s\n%s", s, again)
		}
	}
	// Sub-second expiry is truncated, as for handles.
	d := testDownload()
	d.Expiry = testNow.Add(1500 * time.Millisecond)
	if got, err := ring.OpenDownload(ring.SealDownload(d), testNow); err != nil || !got.Expiry.Equal(testNow.Add(time.Second)) {
		t.Errorf("truncation: %+v, %v", got, err)
	}
}

// TestDownloadTamperEachPart swaps each part for a validly formed other
// value — another prefix, another kid, another field value in the payload,
// the signature of another token — keeping the rest.
func TestDownloadTamperEachPart(t *testing.T) {
	ring := testRing(t)
	d := testDownload()
	s := ring.SealDownload(d)
	p := strings.Split(s, ".")
	join := func(prefix, kid, payload, sig string) string { return prefix + "." + kid + "." + payload + "." + sig }

	// Prefix.
	for _, prefix := range []string{"jgd0", "jgd2", "JGD1", "jgh1", "jgc1", "jgd", "jgd11"} {
		assertMalformedDownload(t, ring, join(prefix, p[1], p[2], p[3]), "prefix "+prefix)
	}
	// Kid: another known kid (wrong key) and unknown ones.
	if _, err := ring.OpenDownload(join(p[0], "k0", p[2], p[3]), testNow); !errors.Is(err, errSignature) {
		t.Errorf("kid k1→k0: %v, want signature mismatch", err)
	}
	for _, kid := range []string{"k2", "K1", "k1_", ""} {
		assertMalformedDownload(t, ring, join(p[0], kid, p[2], p[3]), "kid "+kid)
	}
	// Payload: every field changed in turn, under the original signature.
	for name, mut := range map[string]func(*Download){
		"tenant":      func(d *Download) { d.Tenant = "globex" },
		"workflow ID": func(d *Download) { d.WorkflowID = "acme/export/other" },
		"subject":     func(d *Download) { d.Subject = "user:mallory@example.com" },
		"digest":      func(d *Download) { d.Digest = testDigest("other bytes") },
		"expiry":      func(d *Download) { d.Expiry = d.Expiry.Add(24 * time.Hour) },
	} {
		d2 := d
		mut(&d2)
		other := ring.SealDownload(d2)
		if other == "" || other == s {
			t.Fatalf("%s: bad control %q", name, other)
		}
		q := strings.Split(other, ".")
		if _, err := ring.OpenDownload(join(p[0], p[1], q[2], p[3]), testNow); !errors.Is(err, errSignature) {
			t.Errorf("%s changed under the old signature: %v, want signature mismatch", name, err)
		}
		if _, err := ring.OpenDownload(join(p[0], p[1], p[2], q[3]), testNow); !errors.Is(err, errSignature) {
			t.Errorf("signature of a token with another %s: %v, want signature mismatch", name, err)
		}
	}
	// Signature: zeros, ones, other lengths.
	for _, sig := range []string{strings.Repeat("A", 43), strings.Repeat("_", 43), p[3][:42], p[3] + "A", ""} {
		assertMalformedDownload(t, ring, join(p[0], p[1], p[2], sig), "signature "+sig)
	}
}

func TestDownloadWrongKey(t *testing.T) {
	ring := testRing(t)
	s := ring.SealDownload(testDownload())
	// Same kids, other key material.
	other, _ := NewKeyring("k1", map[string][]byte{"k0": testKey("x0"), "k1": testKey("x1")})
	if d, err := other.OpenDownload(s, testNow); !errors.Is(err, errSignature) || d != (Download{}) {
		t.Errorf("foreign key: %+v, %v; want signature mismatch", d, err)
	}
	// A kid the ring does not have, signed with its own or someone else's key.
	stranger, _ := NewKeyring("k9", map[string][]byte{"k9": testKey("k9")})
	renamed, _ := NewKeyring("k1x", map[string][]byte{"k1x": testKey("k1")})
	for _, r := range []*Keyring{stranger, renamed} {
		if d, err := ring.OpenDownload(r.SealDownload(testDownload()), testNow); !errors.Is(err, errUnknownKID) || d != (Download{}) {
			t.Errorf("kid %s: %+v, %v; want unknown key id", r.CurrentKID(), d, err)
		}
	}
}

func TestDownloadRotation(t *testing.T) {
	k0, k1 := testKey("k0"), testKey("k1")
	before, _ := NewKeyring("k0", map[string][]byte{"k0": k0})
	during, _ := NewKeyring("k1", map[string][]byte{"k0": k0, "k1": k1})
	after, _ := NewKeyring("k1", map[string][]byte{"k1": k1})
	d := testDownload()

	oldS, newS := before.SealDownload(d), during.SealDownload(d)
	if !strings.HasPrefix(oldS, "jgd1.k0.") || !strings.HasPrefix(newS, "jgd1.k1.") {
		t.Fatalf("wrong kids: %.8s %.8s", oldS, newS)
	}
	for name, s := range map[string]string{"old": oldS, "new": newS} {
		if got, err := during.OpenDownload(s, testNow); err != nil || !sameDownload(got, d) {
			t.Errorf("during rotation, %s token: %+v, %v", name, got, err)
		}
	}
	if got, _ := during.OpenDownload(oldS, testNow); during.SealDownload(got) != newS {
		t.Error("re-sealing an old token does not move it to the current key")
	}
	if _, err := after.OpenDownload(oldS, testNow); !errors.Is(err, errUnknownKID) {
		t.Errorf("old token after rotation: %v, want unknown key id", err)
	}
	if _, err := after.OpenDownload(newS, testNow); err != nil {
		t.Errorf("new token after rotation: %v", err)
	}
	if _, err := before.OpenDownload(newS, testNow); !errors.Is(err, errUnknownKID) {
		t.Errorf("new token on an old replica: %v, want unknown key id", err)
	}
}

func TestDownloadNotInterchangeable(t *testing.T) {
	ring := testRing(t)
	h, c, d := ring.SealHandle(testHandle()), ring.SealCursor(testCursor()), ring.SealDownload(testDownload())
	assertMalformedDownload(t, ring, h, "handle as download token")
	assertMalformedDownload(t, ring, c, "cursor as download token")
	assertMalformedHandle(t, ring, d, "download token as handle")
	assertMalformedCursor(t, ring, d, "download token as cursor")
	// Swapping the prefix alone breaks the signature.
	assertMalformedDownload(t, ring, "jgd1"+h[4:], "handle with download prefix")
	assertMalformedDownload(t, ring, "jgd1"+c[4:], "cursor with download prefix")
	assertMalformedHandle(t, ring, "jgh1"+d[4:], "download token with handle prefix")
	assertMalformedCursor(t, ring, CursorPrefix+d[4:], "download token with cursor prefix")

	// The label separates the domains even when prefix and JSON fit: a
	// well-formed download payload MACed with another label is rejected.
	js, _ := json.Marshal(testDownload().wire())
	signed := DownloadPrefix + ".k1." + b64.EncodeToString(js)
	for _, label := range []string{handleLabel, "jobgate-cursor-v1", "jobgate-download-v2", ""} {
		forged := signed + "." + b64.EncodeToString(mac(testKey("k1"), label, signed))
		if _, err := ring.OpenDownload(forged, testNow); !errors.Is(err, errSignature) {
			t.Errorf("download MACed with label %q: %v, want signature mismatch", label, err)
		}
	}
	genuine := signed + "." + b64.EncodeToString(mac(testKey("k1"), downloadLabel, signed))
	if _, err := ring.OpenDownload(genuine, testNow); err != nil {
		t.Errorf("control: %v", err)
	}
	// And the other way: handle and cursor payloads MACed with the download
	// label under their own prefixes do not open.
	hjs, _ := json.Marshal(testHandle().wire())
	hs := HandlePrefix + ".k1." + b64.EncodeToString(hjs)
	if _, err := ring.OpenHandle(hs+"."+b64.EncodeToString(mac(testKey("k1"), downloadLabel, hs)), testNow); !errors.Is(err, errSignature) {
		t.Errorf("handle MACed with download label: %v, want signature mismatch", err)
	}
	// A cursor is encrypted, never MACed: a signed, readable cursor payload does not open.
	cjs, _ := json.Marshal(testCursor().wire())
	cs := CursorPrefix + ".k1." + b64.EncodeToString(cjs)
	if _, err := ring.OpenCursor(cs+"."+b64.EncodeToString(mac(testKey("k1"), downloadLabel, cs)), testNow); !errors.Is(err, ErrMalformed) {
		t.Errorf("cursor MACed with download label: %v, want malformed", err)
	}
}

func TestDownloadRejectsInvalidValues(t *testing.T) {
	ring := testRing(t)
	good := testDownload()
	dig := good.Digest
	checkRejects(t, good, map[string]func(*Download){
		"empty tenant":        func(d *Download) { d.Tenant = "" },
		"non-UTF-8 tenant":    func(d *Download) { d.Tenant = "a\xffb" },
		"empty workflow ID":   func(d *Download) { d.WorkflowID = "" },
		"non-UTF-8 wid":       func(d *Download) { d.WorkflowID = "\xc3" },
		"empty subject":       func(d *Download) { d.Subject = "" },
		"non-UTF-8 subject":   func(d *Download) { d.Subject = "al\xffice" },
		"empty digest":        func(d *Download) { d.Digest = "" },
		"upper-case digest":   func(d *Download) { d.Digest = strings.ToUpper(dig) },
		"mixed-case digest":   func(d *Download) { d.Digest = "A" + dig[1:] },
		"short digest":        func(d *Download) { d.Digest = dig[:63] },
		"long digest":         func(d *Download) { d.Digest = dig + "0" },
		"sha-512 digest":      func(d *Download) { d.Digest = dig + dig },
		"prefixed digest":     func(d *Download) { d.Digest = "sha256:" + dig },
		"non-hex digest":      func(d *Download) { d.Digest = "g" + dig[1:] },
		"base64 digest":       func(d *Download) { d.Digest = base64.StdEncoding.EncodeToString([]byte(dig[:48])) },
		"spaced digest":       func(d *Download) { d.Digest = " " + dig[1:] },
		"zero expiry":         func(d *Download) { d.Expiry = time.Time{} },
		"pre-1970 expiry":     func(d *Download) { d.Expiry = time.Unix(-5, 0) },
		"epoch expiry":        func(d *Download) { d.Expiry = time.Unix(0, 0) },
		"year 10000":          func(d *Download) { d.Expiry = time.Unix(maxUnixSeconds+1, 0) },
		"too long workflow":   func(d *Download) { d.WorkflowID = strings.Repeat("x", 1200) },
		"too long subject":    func(d *Download) { d.Subject = strings.Repeat("s", 1200) },
		"escapes make it big": func(d *Download) { d.Subject = strings.Repeat("<", 200) + strings.Repeat("s", 500) },
	}, Download.Validate, ring.SealDownload)
	var nilRing *Keyring
	if s := nilRing.SealDownload(good); s != "" {
		t.Errorf("nil ring sealed %q", s)
	}
	if _, err := nilRing.OpenDownload(ring.SealDownload(good), testNow); !errors.Is(err, ErrMalformed) {
		t.Errorf("nil ring OpenDownload: %v", err)
	}
	if _, err := (&Keyring{}).OpenDownload(ring.SealDownload(good), testNow); !errors.Is(err, ErrMalformed) {
		t.Errorf("zero ring OpenDownload: %v", err)
	}
}

func TestDownloadRejectsBadPayloadAfterMAC(t *testing.T) {
	ring := testRing(t)
	const live = `1924992000`
	dig := testDigest("x")
	ok := `{"v":1,"t":"acme","w":"acme/export/x","s":"alice","d":"` + dig + `","e":` + live + `}`
	if d, err := ring.OpenDownload(signJSON(ring, downloadFormat, ok), testNow); err != nil || d.Digest != dig || d.Subject != "alice" {
		t.Fatalf("control: %+v, %v", d, err)
	}
	if _, err := ring.OpenDownload(signJSON(ring, downloadFormat, strings.Replace(ok, live, "1893456000", 1)), testNow); err != ErrExpired {
		t.Fatalf("control expired: %v", err)
	}
	for _, js := range []string{
		``, `null`, `{}`, `[]`, `"x"`,
		strings.Replace(ok, `}`, `,"x":1}`, 1),                                                  // unknown field
		strings.Replace(ok, `"s":"alice",`, ``, 1),                                              // missing s
		strings.Replace(ok, `"d":"`+dig+`",`, ``, 1),                                            // missing d
		strings.Replace(ok, `"w":"acme/export/x",`, ``, 1),                                      // missing w
		strings.Replace(ok, `"v":1`, `"v":2`, 1),                                                // version
		strings.Replace(ok, `"v":1`, `"v":0`, 1),                                                //
		strings.Replace(ok, `"s":"alice"`, `"s":""`, 1),                                         // empty subject
		strings.Replace(ok, `"s":"alice"`, `"s":null`, 1),                                       // null subject
		strings.Replace(ok, `"t":"acme"`, `"t":""`, 1),                                          // empty tenant
		strings.Replace(ok, dig, strings.ToUpper(dig), 1),                                       // digest spelling
		strings.Replace(ok, dig, dig[:62], 1),                                                   // digest length
		strings.Replace(ok, dig, "sha256:"+dig, 1),                                              //
		strings.Replace(ok, `"d":"`+dig+`"`, `"d":""`, 1),                                       // empty digest
		strings.Replace(ok, `"d":"`+dig+`"`, `"d":null`, 1),                                     // null digest
		strings.Replace(ok, live, `0`, 1),                                                       // expiry
		strings.Replace(ok, live, `253402300800`, 1),                                            //
		strings.Replace(ok, live, live+`.0`, 1),                                                 //
		strings.Replace(ok, `"s":"alice"`, `"s":"\u0061lice"`, 1),                               // escape
		`{"v":1,"w":"acme/export/x","t":"acme","s":"alice","d":"` + dig + `","e":` + live + `}`, // order
		strings.Replace(ok, `"s":"alice"`, `"s":"alice","s":"eve"`, 1),                          // duplicate
		ok + ` `, ok + "\n", ` ` + ok, ok + `{}`, // trailing / leading
		`{"v":1,"t":"acme","w":"acme/export/x","k":"export","e":` + live + `}`,                               // a handle
		`{"v":1,"t":"acme","s":"bob","o":"list_jobs","f":"F","p":"AAEC/w==","e":` + live + `}`,               // a cursor
		`{"v":1,"t":"acme","w":"acme/export/x","s":"alice","k":"export","d":"` + dig + `","e":` + live + `}`, // extra k
	} {
		assertMalformedDownload(t, ring, signJSON(ring, downloadFormat, js), "payload "+js)
	}
	for _, p := range badBase64Payloads {
		assertMalformedDownload(t, ring, signPayload(ring, downloadFormat, p), "payload base64 "+p)
	}
}

// TestDownloadSizeLimits: Seal never produces what Open refuses, Validate
// agrees with Seal for the longest kid, the limit is reached exactly, and
// whatever tenant and workflow ID a handle can carry also fit a download
// token with a 256-byte subject.
func TestDownloadSizeLimits(t *testing.T) {
	longKID := strings.Repeat("K", MaxKIDLen)
	r16, _ := NewKeyring(longKID, map[string][]byte{longKID: testKey("k1")})
	for _, ring := range []*Keyring{testRing(t), r16} {
		checkSizeLimit(t, "download token, kid "+ring.current, 700, 1200, MaxDownloadLen, 3, func(n int) (error, string) {
			d := testDownload()
			d.WorkflowID = strings.Repeat("w", n)
			return d.Validate(), ring.SealDownload(d)
		}, func(s string) error { _, err := ring.OpenDownload(s, testNow); return err })
	}

	for n := 1; n < MaxHandleLen; n++ {
		h := Handle{Tenant: "acme", WorkflowID: strings.Repeat("w", n), Kind: strings.Repeat("k", maxKindLen), Expiry: testNow.Add(time.Hour)}
		if h.Validate() != nil {
			break
		}
		d := Download{Tenant: h.Tenant, WorkflowID: h.WorkflowID, Subject: strings.Repeat("s", 256), Digest: testDigest("x"), Expiry: h.Expiry}
		if err := d.Validate(); err != nil {
			t.Fatalf("a handle with a %d-byte workflow ID is valid, but a download token for it is not: %v", n, err)
		}
	}
}

// TestDownloadWireFormat pins the format, built from the documented recipe.
func TestDownloadWireFormat(t *testing.T) {
	ring := testRing(t)
	exp := time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC) // 1893542400
	dig := testDigest("artifact")
	d := Download{Tenant: "acme", WorkflowID: "acme/export/q3", Subject: "alice", Digest: dig, Expiry: exp}
	js := `{"v":1,"t":"acme","w":"acme/export/q3","s":"alice","d":"` + dig + `","e":1893542400}`
	want := signRecipe("jobgate-download-v1", "jgd1.k1."+base64.RawURLEncoding.EncodeToString([]byte(js)))
	if got := ring.SealDownload(d); got != want {
		t.Errorf("SealDownload:\n got %s\nwant %s", got, want)
	}
}

func BenchmarkOpenDownload(b *testing.B) {
	ring := testRing(b)
	s := ring.SealDownload(testDownload())
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if _, err := ring.OpenDownload(s, testNow); err != nil {
			b.Fatal(err)
		}
	}
}
