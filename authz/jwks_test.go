package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// jwksKey is one key the test JWKS server publishes.
type jwksKey struct {
	kid string
	alg string // JWK "alg"; "" leaves it out
	use jwkset.USE
	pub any
}

// jwksServer is a local JWK Set endpoint whose keys, availability and fetch
// count the test controls.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []jwksKey
	raw     []byte // served instead of keys when set
	down    bool
	fetches atomic.Int64
}

func newJWKSServer(t testing.TB, keys ...jwksKey) *jwksServer {
	t.Helper()
	s := &jwksServer{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		down, keys, raw := s.down, s.keys, s.raw
		s.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if raw != nil {
			_, _ = w.Write(raw)
			return
		}
		_, _ = w.Write(jwksJSON(t, keys))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(keys ...jwksKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

func (s *jwksServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func jwksJSON(t testing.TB, keys []jwksKey) []byte {
	var set jwkset.JWKSMarshal
	for _, k := range keys {
		_, oct := k.pub.([]byte)
		j, err := jwkset.NewJWKFromKey(k.pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
			KID: k.kid, ALG: jwkset.ALG(k.alg), USE: k.use,
		}, Marshal: jwkset.JWKMarshalOptions{Private: oct}})
		if err != nil {
			t.Errorf("JWK %s: %v", k.kid, err)
			continue
		}
		set.Keys = append(set.Keys, j.Marshal())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Error(err)
	}
	return b
}

// testKeys holds one key per algorithm; generated once, RSA being slow.
var testKeys = sync.OnceValue(func() (k struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
	ed  ed25519.PrivateKey
}) {
	var err error
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	// Fixed seed: the fuzz seed corpus holds an EdDSA token signed with it.
	k.ed = ed25519.NewKeyFromSeed([]byte("jobgate-jwks-fuzz-seed-key-32-by"))
	return k
})

// signKid signs c with alg m and key, with kid in the header unless empty.
func signKid(t testing.TB, m jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type jwksOpt func(*JWKSOptions)

func newJWKS(t testing.TB, url string, mods ...jwksOpt) (*JWKSVerifier, error) {
	t.Helper()
	o := JWKSOptions{URL: url, Issuer: testIss, Audience: testAud, Now: fixedNow, HTTPTimeout: 2 * time.Second}
	for _, m := range mods {
		m(&o)
	}
	v, err := NewJWKSVerifier(context.Background(), o)
	if v != nil {
		t.Cleanup(func() { _ = v.Close() })
	}
	return v, err
}

func mustJWKS(t testing.TB, url string, mods ...jwksOpt) *JWKSVerifier {
	t.Helper()
	v, err := newJWKS(t, url, mods...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func allKeys() []jwksKey {
	k := testKeys()
	return []jwksKey{
		{kid: "rsa1", alg: "RS256", use: jwkset.UseSig, pub: &k.rsa.PublicKey},
		{kid: "ec1", alg: "ES256", use: jwkset.UseSig, pub: &k.ec.PublicKey},
		{kid: "ed1", alg: "EdDSA", use: jwkset.UseSig, pub: k.ed.Public()},
	}
}

func TestJWKSEachAlgorithm(t *testing.T) {
	k := testKeys()
	srv := newJWKSServer(t, allKeys()...)
	v := mustJWKS(t, srv.URL)
	for _, tc := range []struct {
		name string
		m    jwt.SigningMethod
		key  any
		kid  string
	}{
		{"RS256 RSA-2048", jwt.SigningMethodRS256, k.rsa, "rsa1"},
		{"ES256 P-256", jwt.SigningMethodES256, k.ec, "ec1"},
		{"EdDSA Ed25519", jwt.SigningMethodEdDSA, k.ed, "ed1"},
		{"RS256 without kid", jwt.SigningMethodRS256, k.rsa, ""},
		{"EdDSA without kid", jwt.SigningMethodEdDSA, k.ed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), signKid(t, tc.m, tc.key, tc.kid, baseClaims()))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if c.Principal.Tenant != "acme" || c.Principal.Subject != "alice" ||
				!slices.Equal(c.Principal.Scopes, []Scope{ScopeRead, ScopeWrite}) || !c.Expiry.Equal(testNow.Add(time.Hour)) {
				t.Fatalf("claims %+v", c)
			}
		})
	}
	// JWKs without alg (only kty) verify too.
	srv.set(jwksKey{kid: "rsa1", use: jwkset.UseSig, pub: &k.rsa.PublicKey}, jwksKey{kid: "ed1", pub: k.ed.Public()})
	v2 := mustJWKS(t, srv.URL)
	for _, tok := range []string{
		signKid(t, jwt.SigningMethodRS256, k.rsa, "rsa1", baseClaims()),
		signKid(t, jwt.SigningMethodEdDSA, k.ed, "ed1", baseClaims()),
	} {
		if _, err := v2.Verify(context.Background(), tok); err != nil {
			t.Fatalf("JWK without alg: %v", err)
		}
	}
}

func TestJWKSRotation(t *testing.T) {
	k := testKeys()
	newEd := ed25519.NewKeyFromSeed([]byte("jobgate-jwks-rotated-key-32-byte"))
	srv := newJWKSServer(t, jwksKey{kid: "old", alg: "EdDSA", pub: k.ed.Public()})
	v := mustJWKS(t, srv.URL, func(o *JWKSOptions) { o.UnknownKIDInterval = time.Hour })
	oldTok := signKid(t, jwt.SigningMethodEdDSA, k.ed, "old", baseClaims())
	newTok := signKid(t, jwt.SigningMethodEdDSA, newEd, "new", baseClaims())
	if _, err := v.Verify(context.Background(), oldTok); err != nil {
		t.Fatalf("old key before rotation: %v", err)
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("fetches at start-up: %d", n)
	}

	// The provider rotates: only the new key is published.
	srv.set(jwksKey{kid: "new", alg: "EdDSA", pub: newEd.Public()})
	if _, err := v.Verify(context.Background(), newTok); err != nil {
		t.Fatalf("new kid after rotation: %v", err)
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("fetches after one unknown kid: %d, want 2", n)
	}
	// That refresh replaced the set: the old kid is gone, and asking for it
	// again does not fetch (the limiter is spent).
	_, err := v.Verify(context.Background(), oldTok)
	checkFailure(t, oldTok, err, reasonKeyLookup)
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("fetches after the old kid: %d, want 2", n)
	}
	if _, err := v.Verify(context.Background(), newTok); err != nil {
		t.Fatalf("new kid again: %v", err)
	}
}

func TestJWKSRotationByBackgroundRefresh(t *testing.T) {
	k := testKeys()
	srv := newJWKSServer(t, jwksKey{kid: "ec1", alg: "ES256", pub: &k.ec.PublicKey})
	v := mustJWKS(t, srv.URL, func(o *JWKSOptions) { o.RefreshInterval = 20 * time.Millisecond })
	tok := signKid(t, jwt.SigningMethodES256, k.ec, "ec1", baseClaims())
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	srv.set(jwksKey{kid: "rsa1", alg: "RS256", pub: &k.rsa.PublicKey})
	start := srv.fetches.Load()
	deadline := time.Now().Add(5 * time.Second)
	for srv.fetches.Load() < start+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// The removed key is refused without waiting for a token to trigger anything.
	_, err := v.Verify(context.Background(), tok)
	checkFailure(t, tok, err, reasonKeyLookup)
}

func TestJWKSUnknownKIDRateLimited(t *testing.T) {
	k := testKeys()
	srv := newJWKSServer(t, allKeys()...)
	v := mustJWKS(t, srv.URL, func(o *JWKSOptions) { o.UnknownKIDInterval = time.Minute })
	before := srv.fetches.Load()
	var wg sync.WaitGroup
	var accepted atomic.Int64
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := signKid(t, jwt.SigningMethodEdDSA, k.ed, fmt.Sprintf("unknown-%d", i), baseClaims())
			_, err := v.Verify(context.Background(), tok)
			if err == nil {
				accepted.Add(1)
				return
			}
			if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), reasonKeyLookup) {
				t.Errorf("unknown kid: %v", err)
			}
		}()
	}
	wg.Wait()
	if accepted.Load() != 0 {
		t.Fatalf("%d tokens with unknown kids accepted", accepted.Load())
	}
	if extra := srv.fetches.Load() - before; extra > 1 {
		t.Fatalf("100 unknown kids caused %d fetches, want at most 1", extra)
	}
	// Known kids still verify without fetching.
	if _, err := v.Verify(context.Background(), signKid(t, jwt.SigningMethodRS256, k.rsa, "rsa1", baseClaims())); err != nil {
		t.Fatal(err)
	}
	if extra := srv.fetches.Load() - before; extra > 1 {
		t.Fatalf("fetches %d", extra)
	}
}

func TestJWKSStartupErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/jwks.json"
	ln.Close()

	down := newJWKSServer(t, allKeys()...)
	down.setDown(true)
	empty := newJWKSServer(t)
	encOnly := newJWKSServer(t, jwksKey{kid: "e", use: jwkset.UseEnc, pub: &testKeys().rsa.PublicKey})
	notJSON := newJWKSServer(t)
	notJSON.raw = []byte("<html>")
	huge := newJWKSServer(t)
	huge.raw = []byte(`{"keys":[],"pad":"` + strings.Repeat("x", MaxJWKSBytes) + `"}`)

	for _, tc := range []struct{ name, url, want string }{
		{"unreachable", dead, "cannot fetch the JWK Set at " + dead + " at start-up"},
		{"503", down.URL, "cannot fetch the JWK Set at " + down.URL + " at start-up"},
		{"not JSON", notJSON.URL, "cannot fetch the JWK Set at " + notJSON.URL},
		{"too large", huge.URL, "longer than"},
		{"no keys", empty.URL, "JWK Set at " + empty.URL + " holds no usable"},
		{"only enc keys", encOnly.URL, "holds no usable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := newJWKS(t, tc.url)
			if err == nil || v != nil {
				t.Fatalf("NewJWKSVerifier = %v, %v", v, err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q, want it to contain %q on one line", err, tc.want)
			}
		})
	}
}

func TestJWKSOutageKeepsCachedKeys(t *testing.T) {
	k := testKeys()
	srv := newJWKSServer(t, allKeys()...)
	var refreshErrs atomic.Int64
	v := mustJWKS(t, srv.URL, func(o *JWKSOptions) {
		o.RefreshInterval = 20 * time.Millisecond
		o.UnknownKIDInterval = 2 * time.Second
		o.RefreshError = func(u string, err error) {
			if u != srv.URL || err == nil {
				t.Errorf("RefreshError(%q, %v)", u, err)
			}
			refreshErrs.Add(1)
		}
	})
	srv.setDown(true)
	deadline := time.Now().Add(5 * time.Second)
	for refreshErrs.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if refreshErrs.Load() < 3 {
		t.Fatalf("only %d refresh errors reported", refreshErrs.Load())
	}
	for _, tok := range []string{
		signKid(t, jwt.SigningMethodRS256, k.rsa, "rsa1", baseClaims()),
		signKid(t, jwt.SigningMethodES256, k.ec, "ec1", baseClaims()),
		signKid(t, jwt.SigningMethodEdDSA, k.ed, "ed1", baseClaims()),
	} {
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatalf("cached key during outage: %v", err)
		}
	}
	// An unknown kid during the outage is refused (the refresh fails), quickly.
	start := time.Now()
	tok := signKid(t, jwt.SigningMethodEdDSA, k.ed, "unknown", baseClaims())
	_, err := v.Verify(context.Background(), tok)
	checkFailure(t, tok, err, reasonKeyLookup)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("unknown kid during outage took %v", d)
	}
	// Close stops the background refresh; the held keys still verify.
	_ = v.Close()
	if _, err := v.Verify(context.Background(), signKid(t, jwt.SigningMethodEdDSA, k.ed, "ed1", baseClaims())); err != nil {
		t.Fatal(err)
	}
}
