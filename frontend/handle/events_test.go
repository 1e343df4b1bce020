package handle

import (
	"errors"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

func testEventPos() EventPos {
	return EventPos{Tenant: "acme", Subject: "alice", Target: "tasks:" + strings.Repeat("ab", 16),
		Jobs:   []JobPos{{Run: "0b6d0c8e-8b3a-4b8e-9f59-6f0a1d2c3b4a", Event: 42, Digest: "0123456789abcdef"}, {}},
		Expiry: testNow.Add(24 * time.Hour)}
}

// seedEventPositions are FuzzOpenEventPos's seeds; derived from fixed test keys, they double as
// a known-answer test of the wire format (TestEventPosSeedCorpus).
func seedEventPositions(t testing.TB) map[string]string {
	ring := testRing(t)
	old, _ := NewKeyring("k0", map[string][]byte{"k0": testKey("k0")})
	valid := ring.SealEventPos(testEventPos())
	one := EventPos{Tenant: "globex", Subject: "svc:bot \"ü\"", Target: "job:x", Jobs: []JobPos{{Run: "r", Event: 1}}, Expiry: fuzzNow.Add(time.Minute)}
	live := `,"e":` + strconv.FormatInt(fuzzNow.Add(time.Hour).Unix(), 10) + `}`
	raw := func(p string) string {
		return ring.sealAEAD(eventPosAEAD, []byte(`{"v":1,"t":"acme","s":"alice","g":"job:x","p":`+p+live), 1<<20)
	}
	return map[string]string{
		"valid":            valid,
		"valid_one":        ring.SealEventPos(one),
		"valid_old_kid":    old.SealEventPos(one),
		"expired":          ring.SealEventPos(EventPos{Tenant: "a", Subject: "s", Target: "g", Jobs: []JobPos{{}}, Expiry: fuzzNow}),
		"truncated":        valid[:len(valid)-10],
		"tampered_payload": tamper(valid, len("jge1.k1.")+40),
		"tampered_tag":     tamper(valid, len(valid)-1),
		"cursor_prefix":    CursorPrefix + valid[4:],
		"cursor":           ring.SealCursor(testCursor()),
		"unknown_kid":      strings.Replace(valid, ".k1.", ".k7.", 1),
		// Correctly encrypted, not canonical or out of syntax: the opener itself refuses them.
		"null_jobs":      raw(`null`),
		"no_jobs":        raw(`[]`),
		"negative_event": raw(`[{"r":"r","n":-1,"d":""}]`),
		"event_no_run":   raw(`[{"r":"","n":3,"d":""}]`),
		"upper_digest":   raw(`[{"r":"r","n":3,"d":"0123456789ABCDEF"}]`),
		"short_digest":   raw(`[{"r":"r","n":3,"d":"0123"}]`),
		"run_with_space": raw(`[{"r":"a b","n":3,"d":""}]`),
		"extra_field":    raw(`[{"r":"r","n":3,"d":"","x":1}]`),
		"as_cursor":      ring.sealAEAD(cursorAEAD, []byte(`{"v":1,"t":"acme","s":"alice","g":"job:x","p":[{"r":"r","n":3,"d":""}]`+live), 1<<20),
		"empty":          "",
		"too_long":       valid + strings.Repeat("A", MaxEventPosLen),
	}
}

// TestEventPosSeedCorpus keeps testdata/fuzz/FuzzOpenEventPos equal to the seeds above and
// checks each seed does what its name says. Run with -update-seeds to rewrite.
func TestEventPosSeedCorpus(t *testing.T) {
	ring := testRing(t)
	seeds := seedEventPositions(t)
	testenv.SeedCorpus(t, filepath.Join("testdata", "fuzz", "FuzzOpenEventPos"), seeds, *updateSeeds, true)
	for name, s := range seeds {
		_, err := ring.OpenEventPos(s, fuzzNow)
		switch {
		case strings.HasPrefix(name, "valid"):
			if err != nil {
				t.Errorf("%s: %v, want success", name, err)
			}
		case name == "expired":
			if err != ErrExpired {
				t.Errorf("%s: %v, want ErrExpired", name, err)
			}
		default:
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: %v, want ErrMalformed", name, err)
			}
		}
	}
}

func TestEventPosRoundTrip(t *testing.T) {
	ring := testRing(t)
	p := testEventPos()
	s := ring.SealEventPos(p)
	if !strings.HasPrefix(s, "jge1.k1.") {
		t.Fatalf("sealed position %q", s)
	}
	got, err := ring.OpenEventPos(s, testNow)
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("open: %+v, %v; want %+v", got, err, p)
	}
	// Encrypted: nothing of what it carries shows.
	for _, secret := range []string{"acme", "alice", "0b6d0c8e", "0123456789abcdef"} {
		if strings.Contains(s, secret) || strings.Contains(s, b64.EncodeToString([]byte(secret))) {
			t.Errorf("sealed position shows %q", secret)
		}
	}
	if _, err := ring.OpenCursor(s, testNow); !errors.Is(err, ErrMalformed) {
		t.Errorf("a position opened as a cursor: %v", err)
	}
	// The most jobs a position may name still seal, within the limit.
	p.Jobs = make([]JobPos, MaxEventPosJobs)
	for i := range p.Jobs {
		p.Jobs[i] = JobPos{Run: strings.Repeat("r", maxRunIDLen), Event: 1 << 40, Digest: "0123456789abcdef"}
	}
	if err := p.Validate(); err != nil || ring.SealEventPos(p) == "" {
		t.Errorf("a position of %d jobs: %v", MaxEventPosJobs, err)
	}
	p.Jobs = append(p.Jobs, JobPos{})
	if p.Validate() == nil || ring.SealEventPos(p) != "" {
		t.Error("a position of too many jobs sealed")
	}
}

func FuzzOpenEventPos(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ring.OpenEventPos(s, fuzzNow)
		expired, opened := openOutcome(t, err, !reflect.DeepEqual(p, EventPos{}), p)
		if !opened {
			return
		}
		if len(s) > MaxEventPosLen {
			t.Fatalf("opened a %d-byte position", len(s))
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("opened an invalid position %+v: %v", p, err)
		}
		again := ring.SealEventPos(p)
		p2, err2 := ring.OpenEventPos(again, fuzzNow)
		if !reflect.DeepEqual(p2, p) || errors.Is(err2, ErrExpired) != expired || (err2 != nil && !expired) {
			t.Fatalf("re-seal: %+v, %v; want %+v, %v", p2, err2, p, err)
		}
		if strings.HasPrefix(s, EventPosPrefix+"."+ring.CurrentKID()+".") && again != s {
			t.Fatalf("re-seal differs:\n%q\n%q", s, again)
		}
		if _, err := ring.OpenCursor(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a position opened as a cursor: %v", err)
		}
	})
}
