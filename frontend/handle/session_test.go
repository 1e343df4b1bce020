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

func testSession() Session {
	return Session{Issuer: "https://idp.example.com/realms/acme", Subject: "ana", Tenant: "acme",
		Scopes: []string{"jobs:read", "jobs:write"}, Name: "Ana Lima", Email: "ana@example.com",
		AuthTime: testNow.Add(-time.Minute), AMR: []string{"pwd", "otp"}, ACR: "urn:example:loa:2",
		CSRF: "q8Vb0i1xw2u5mV3yR7nK9g", Expiry: testNow.Add(8 * time.Hour)}
}

func testLoginState() LoginState {
	return LoginState{State: "st-3f9c2a", Nonce: "no-77a1b0", Verifier: strings.Repeat("v", 43), ReturnTo: "/approvals?x=1",
		MaxAge: 5 * time.Minute, Expiry: testNow.Add(LoginStateTTL)}
}

// seedSessions are FuzzOpenSession's seeds; derived from fixed test keys, they double as a
// known-answer test of the wire format (TestSessionSeedCorpus).
func seedSessions(t testing.TB) map[string]string {
	ring := testRing(t)
	old, _ := NewKeyring("k0", map[string][]byte{"k0": testKey("k0")})
	valid := ring.SealSession(testSession())
	min := Session{Issuer: "http://localhost:8080/oidc", Subject: "bo", Tenant: "acme", CSRF: "c", Expiry: fuzzNow.Add(time.Minute)}
	live := `,"e":` + strconv.FormatInt(fuzzNow.Add(time.Hour).Unix(), 10) + `}`
	return map[string]string{
		"valid":            valid,
		"valid_minimal":    ring.SealSession(min),
		"valid_old_kid":    old.SealSession(min),
		"expired":          ring.SealSession(Session{Issuer: "i", Subject: "s", Tenant: "t", CSRF: "c", Expiry: fuzzNow}),
		"truncated":        valid[:len(valid)-10],
		"tampered_payload": tamper(valid, len("jgx1.k1.")+40),
		"tampered_tag":     tamper(valid, len(valid)-1),
		"cursor_prefix":    CursorPrefix + valid[4:],
		"login_prefix":     LoginStatePrefix + valid[4:],
		"login_state":      ring.SealLoginState(testLoginState()),
		"cursor":           ring.SealCursor(testCursor()),
		"unknown_kid":      strings.Replace(valid, ".k1.", ".k7.", 1),
		// Correctly encrypted, not canonical or out of syntax: the opener itself refuses them.
		"null_scopes": ring.sealAEAD(sessionAEAD, []byte(`{"v":1,"i":"i","s":"s","t":"t","p":null,"n":"","m":"","a":0,"r":[],"c":"","x":"c"`+live), 1<<20),
		"no_csrf":     ring.sealAEAD(sessionAEAD, []byte(`{"v":1,"i":"i","s":"s","t":"t","p":[],"n":"","m":"","a":0,"r":[],"c":"","x":""`+live), 1<<20),
		"extra_field": ring.sealAEAD(sessionAEAD, []byte(`{"v":1,"i":"i","s":"s","t":"t","p":[],"n":"","m":"","a":0,"r":[],"c":"","x":"c","z":1`+live), 1<<20),
		"as_cursor":   ring.sealAEAD(cursorAEAD, []byte(`{"v":1,"i":"i","s":"s","t":"t","p":[],"n":"","m":"","a":0,"r":[],"c":"","x":"c"`+live), 1<<20),
		"empty":       "",
		"too_long":    valid + strings.Repeat("A", MaxSessionLen),
	}
}

func seedLoginStates(t testing.TB) map[string]string {
	ring := testRing(t)
	valid := ring.SealLoginState(testLoginState())
	live := `,"e":` + strconv.FormatInt(fuzzNow.Add(time.Minute).Unix(), 10) + `}`
	return map[string]string{
		"valid":            valid,
		"valid_no_max_age": ring.SealLoginState(LoginState{State: "s", Nonce: "n", Verifier: "v", ReturnTo: "/me", Expiry: fuzzNow.Add(time.Minute)}),
		"expired":          ring.SealLoginState(LoginState{State: "s", Nonce: "n", Verifier: "v", ReturnTo: "/me", Expiry: fuzzNow}),
		"truncated":        valid[:len(valid)-10],
		"tampered":         tamper(valid, len("jgl1.k1.")+20),
		"session_prefix":   SessionPrefix + valid[4:],
		"session":          ring.SealSession(testSession()),
		"negative_max_age": ring.sealAEAD(loginStateAEAD, []byte(`{"v":1,"s":"s","n":"n","k":"v","r":"/","m":-1`+live), 1<<20),
		"empty_state":      ring.sealAEAD(loginStateAEAD, []byte(`{"v":1,"s":"","n":"n","k":"v","r":"/","m":0`+live), 1<<20),
		"empty":            "",
		"too_long":         valid + strings.Repeat("A", MaxLoginStateLen),
	}
}

// TestSessionSeedCorpus keeps testdata/fuzz/FuzzOpen{Session,LoginState} equal to the seeds
// above (a known-answer test: the wire format and the key derivation may not drift) and checks
// each seed does what its name says. Run with -update-seeds to rewrite.
func TestSessionSeedCorpus(t *testing.T) {
	ring := testRing(t)
	for target, c := range map[string]struct {
		seeds map[string]string
		open  func(string) error
	}{
		"FuzzOpenSession":    {seedSessions(t), func(s string) error { _, err := ring.OpenSession(s, fuzzNow); return err }},
		"FuzzOpenLoginState": {seedLoginStates(t), func(s string) error { _, err := ring.OpenLoginState(s, fuzzNow); return err }},
	} {
		testenv.SeedCorpus(t, filepath.Join("testdata", "fuzz", target), c.seeds, *updateSeeds, true)
		for name, s := range c.seeds {
			err := c.open(s)
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

func TestSessionRoundTrip(t *testing.T) {
	ring := testRing(t)
	s := testSession()
	str := ring.SealSession(s)
	if !strings.HasPrefix(str, "jgx1.k1.") {
		t.Fatalf("sealed session %q", str)
	}
	got, err := ring.OpenSession(str, testNow)
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("open: %+v, %v; want %+v", got, err, s)
	}
	// Encrypted: nothing of it is readable.
	for _, secret := range []string{"ana", "acme", "Ana Lima", "example.com", "jobs:", s.CSRF} {
		if strings.Contains(str, secret) {
			t.Errorf("sealed session reveals %q", secret)
		}
	}
	// Expired: the decoded session comes back with ErrExpired.
	if got, err := ring.OpenSession(str, s.Expiry); err != ErrExpired || got.Subject != "ana" {
		t.Errorf("at expiry: %+v, %v", got, err)
	}
	// Every byte of the ciphertext is authenticated.
	for i := len("jgx1.k1."); i < len(str); i++ {
		if got, err := ring.OpenSession(tamper(str, i), testNow); !errors.Is(err, ErrMalformed) || got.Subject != "" {
			t.Fatalf("byte %d tampered: %+v, %v", i, got, err)
		}
	}
	// Another ring (another deployment) opens nothing.
	other, _ := NewKeyring("k1", map[string][]byte{"k1": testKey("other")})
	if _, err := other.OpenSession(str, testNow); !errors.Is(err, ErrMalformed) {
		t.Errorf("another ring opened it: %v", err)
	}
	// The same payload under the cursor's or the login state's keys does not open as a session.
	js := []byte(`{"v":1,"i":"i","s":"s","t":"t","p":[],"n":"","m":"","a":0,"r":[],"c":"","x":"c","e":1924992000}`)
	if _, err := ring.OpenSession(ring.sealAEAD(sessionAEAD, js, 1<<20), testNow); err != nil {
		t.Fatalf("control: %v", err)
	}
	for _, a := range []*aeadSealer{cursorAEAD, loginStateAEAD} {
		forged := SessionPrefix + strings.TrimPrefix(ring.sealAEAD(a, js, 1<<20), a.prefix)
		if _, err := ring.OpenSession(forged, testNow); !errors.Is(err, errSealed) {
			t.Errorf("sealed with %s keys: %v, want errSealed", a.prefix, err)
		}
	}
}

func TestSessionSize(t *testing.T) {
	ring := testRing(t)
	s := testSession()
	s.Scopes = []string{"jobs:read", "jobs:write", "jobs:approve", "jobs:admin"}
	s.Name = strings.Repeat("n", 1000)
	s.Email = strings.Repeat("e", 1000)
	if err := s.Validate(); err != nil {
		t.Fatalf("a session with 1000-byte name and e-mail: %v", err)
	}
	if n := len(ring.SealSession(s)); n > MaxSessionLen {
		t.Fatalf("sealed %d bytes", n)
	}
	s.Name = strings.Repeat("n", 2000)
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "limit 3800") {
		t.Errorf("oversized session: %v", err)
	}
	if str := ring.SealSession(s); str != "" {
		t.Errorf("oversized session sealed to %d bytes", len(str))
	}
	// The cookie it rides in stays within a browser's 4096 bytes.
	if MaxSessionLen+len("__Host-jobgate_session=; Path=/; Max-Age=28800; HttpOnly; Secure; SameSite=Lax") > 4096 {
		t.Errorf("MaxSessionLen %d leaves no room for the cookie's name and attributes", MaxSessionLen)
	}
	for name, bad := range map[string]func(*Session){
		"no issuer":   func(s *Session) { s.Issuer = "" },
		"no tenant":   func(s *Session) { s.Tenant = "" },
		"no csrf":     func(s *Session) { s.CSRF = "" },
		"empty scope": func(s *Session) { s.Scopes = []string{""} },
		"bad utf8":    func(s *Session) { s.Name = "\xff" },
		"no expiry":   func(s *Session) { s.Expiry = time.Time{} },
		"old auth":    func(s *Session) { s.AuthTime = time.Unix(-5, 0) },
	} {
		s := testSession()
		bad(&s)
		if err := s.Validate(); err == nil || ring.SealSession(s) != "" {
			t.Errorf("%s: sealed", name)
		}
	}
}

func TestLoginStateRoundTrip(t *testing.T) {
	ring := testRing(t)
	l := testLoginState()
	str := ring.SealLoginState(l)
	got, err := ring.OpenLoginState(str, testNow)
	if err != nil || got != l {
		t.Fatalf("open: %+v, %v", got, err)
	}
	if strings.Contains(str, "vvvv") || strings.Contains(str, "approvals") {
		t.Error("login state readable")
	}
	if _, err := ring.OpenLoginState(str, testNow.Add(LoginStateTTL)); err != ErrExpired {
		t.Errorf("after its TTL: %v", err)
	}
	if _, err := ring.OpenSession(str, testNow); !errors.Is(err, ErrMalformed) {
		t.Errorf("a login state opened as a session: %v", err)
	}
	l.MaxAge = 1500 * time.Millisecond
	if l.Validate() == nil {
		t.Error("fractional max age accepted")
	}
}

func FuzzOpenSession(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, s string) {
		sess, err := ring.OpenSession(s, fuzzNow)
		expired, opened := openOutcome(t, err, !reflect.DeepEqual(sess, Session{}), sess)
		if !opened {
			return
		}
		if len(s) > MaxSessionLen {
			t.Fatalf("opened a %d-byte session", len(s))
		}
		if err := sess.Validate(); err != nil {
			t.Fatalf("opened an invalid session %+v: %v", sess, err)
		}
		again := ring.SealSession(sess)
		s2, err2 := ring.OpenSession(again, fuzzNow)
		if !reflect.DeepEqual(s2, sess) || errors.Is(err2, ErrExpired) != expired || (err2 != nil && !expired) {
			t.Fatalf("re-seal: %+v, %v; want %+v, %v", s2, err2, sess, err)
		}
		if strings.HasPrefix(s, SessionPrefix+"."+ring.CurrentKID()+".") && again != s {
			t.Fatalf("re-seal differs:\n%q\n%q", s, again)
		}
		if _, err := ring.OpenLoginState(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a session opened as a login state: %v", err)
		}
		if _, err := ring.OpenCursor(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a session opened as a cursor: %v", err)
		}
	})
}

func FuzzOpenLoginState(f *testing.F) {
	ring := testRing(f)
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ring.OpenLoginState(s, fuzzNow)
		expired, opened := openOutcome(t, err, l != (LoginState{}), l)
		if !opened {
			return
		}
		if len(s) > MaxLoginStateLen {
			t.Fatalf("opened a %d-byte login state", len(s))
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("opened an invalid login state %+v: %v", l, err)
		}
		again := ring.SealLoginState(l)
		l2, err2 := ring.OpenLoginState(again, fuzzNow)
		if l2 != l || errors.Is(err2, ErrExpired) != expired || (err2 != nil && !expired) {
			t.Fatalf("re-seal: %+v, %v; want %+v, %v", l2, err2, l, err)
		}
		if strings.HasPrefix(s, LoginStatePrefix+"."+ring.CurrentKID()+".") && again != s {
			t.Fatalf("re-seal differs:\n%q\n%q", s, again)
		}
		if _, err := ring.OpenSession(s, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a login state opened as a session: %v", err)
		}
	})
}
