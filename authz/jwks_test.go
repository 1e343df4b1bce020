package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
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

func TestJWKSAlgConfusion(t *testing.T) {
	k := testKeys()
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	pkcs1 := x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)
	edPub := []byte(k.ed.Public().(ed25519.PublicKey))

	srv := newJWKSServer(t, append(allKeys(),
		jwksKey{kid: "rsa-noalg", pub: &k.rsa.PublicKey},                        // kty RSA, no alg
		jwksKey{kid: "ec-noalg", pub: &k.ec.PublicKey},                          // kty EC, no alg
		jwksKey{kid: "rsa1024", alg: "RS256", pub: &small.PublicKey},            // too small
		jwksKey{kid: "p384", pub: &p384.PublicKey},                              // wrong curve for ES256
		jwksKey{kid: "enc", use: jwkset.UseEnc, pub: &k.ec.PublicKey},           // not for signatures
		jwksKey{kid: "oct", alg: "HS256", pub: []byte(strings.Repeat("k", 32))}, // symmetric
	)...)
	v := mustJWKS(t, srv.URL, func(o *JWKSOptions) { o.UnknownKIDInterval = time.Hour })
	hs := func(secret []byte, kid string) string {
		return signKid(t, jwt.SigningMethodHS256, secret, kid, baseClaims())
	}

	for _, tc := range []struct {
		name, token, want string
		is                error // a cause the error must wrap, when set
	}{
		{"HS256 with RSA public key PEM as secret", hs(pemBytes, "rsa1"), reasonAlgNotAllowed, nil},
		{"HS256 with RSA public key DER as secret", hs(der, "rsa1"), reasonAlgNotAllowed, nil},
		{"HS256 with RSA public key PKCS1 as secret", hs(pkcs1, "rsa-noalg"), reasonAlgNotAllowed, nil},
		{"HS256 with RSA PEM, no kid", hs(pemBytes, ""), reasonAlgNotAllowed, nil},
		{"HS256 with Ed25519 public key as secret", hs(edPub, "ed1"), reasonAlgNotAllowed, nil},
		{"HS256 with the JWKS oct key", hs([]byte(strings.Repeat("k", 32)), "oct"), reasonAlgNotAllowed, nil},
		{"HS384", signKid(t, jwt.SigningMethodHS384, pemBytes, "rsa1", baseClaims()), reasonAlgNotAllowed, nil},
		{"none", noneToken("none"), reasonAlgNotAllowed, nil},
		{"none with kid", b64(`{"alg":"none","kid":"rsa1"}`) + "." + strings.Split(noneToken("none"), ".")[1] + ".", reasonAlgNotAllowed, nil},
		{"PS256 (not allowed)", signKid(t, jwt.SigningMethodPS256, k.rsa, "rsa1", baseClaims()), reasonAlgNotAllowed, nil},
		{"RS512 (not allowed)", signKid(t, jwt.SigningMethodRS512, k.rsa, "rsa1", baseClaims()), reasonAlgNotAllowed, nil},
		{"ES256 token naming an RS256 JWK", signKid(t, jwt.SigningMethodES256, k.ec, "rsa1", baseClaims()), reasonKeyLookup, keyfunc.ErrKeyfunc},
		{"EdDSA token naming an ES256 JWK", signKid(t, jwt.SigningMethodEdDSA, k.ed, "ec1", baseClaims()), reasonKeyLookup, keyfunc.ErrKeyfunc},
		{"ES256 token naming an RSA JWK without alg", signKid(t, jwt.SigningMethodES256, k.ec, "rsa-noalg", baseClaims()), reasonKeyLookup, errKeyMismatch},
		{"RS256 token naming an EC JWK without alg", signKid(t, jwt.SigningMethodRS256, k.rsa, "ec-noalg", baseClaims()), reasonKeyLookup, errKeyMismatch},
		{"RS256 token naming the oct JWK", signKid(t, jwt.SigningMethodRS256, k.rsa, "oct", baseClaims()), reasonKeyLookup, keyfunc.ErrKeyfunc},
		{"RS256 with a 1024-bit key", signKid(t, jwt.SigningMethodRS256, small, "rsa1024", baseClaims()), reasonKeyLookup, errKeyMismatch},
		{"ES256 token naming a P-384 JWK", signKid(t, jwt.SigningMethodES256, k.ec, "p384", baseClaims()), reasonKeyLookup, errKeyMismatch},
		{"key marked use=enc", signKid(t, jwt.SigningMethodES256, k.ec, "enc", baseClaims()), reasonKeyLookup, keyfunc.ErrKeyfunc},
		{"kid not a string", b64(`{"alg":"EdDSA","kid":7}`) + ".e30.AAAA", reasonKeyLookup, nil},
		{"right kid, wrong key", signKid(t, jwt.SigningMethodEdDSA, ed25519.NewKeyFromSeed(make([]byte, 32)), "ed1", baseClaims()), reasonSignature, nil},
		{"no kid, no key fits", signKid(t, jwt.SigningMethodEdDSA, ed25519.NewKeyFromSeed(make([]byte, 32)), "", baseClaims()), reasonSignature, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), tc.token)
			checkFailure(t, tc.token, err, tc.want)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error does not wrap %v", tc.is)
			}
			if c.Principal.Tenant != "" || !c.Expiry.IsZero() {
				t.Fatalf("claims on failure: %+v", c)
			}
		})
	}
	// The right algorithms with the right keys still pass on this mixed set.
	for _, tok := range []string{
		signKid(t, jwt.SigningMethodRS256, k.rsa, "rsa-noalg", baseClaims()),
		signKid(t, jwt.SigningMethodES256, k.ec, "ec-noalg", baseClaims()),
		signKid(t, jwt.SigningMethodES256, k.ec, "", baseClaims()),
	} {
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatalf("valid token on mixed set: %v", err)
		}
	}
}

func TestJWKSClaims(t *testing.T) {
	k := testKeys()
	srv := newJWKSServer(t, allKeys()...)
	v := mustJWKS(t, srv.URL)
	ed := func(c jwt.MapClaims) string { return signKid(t, jwt.SigningMethodEdDSA, k.ed, "ed1", c) }
	for _, tc := range []struct{ name, token, want string }{
		{"wrong issuer", ed(with(baseClaims(), "iss", "https://evil.example")), reasonIssuer},
		{"missing issuer", ed(with(baseClaims(), "iss", nil)), reasonMissingIss},
		{"wrong audience", ed(with(baseClaims(), "aud", "https://other.example/mcp")), reasonAudience},
		{"audience array without us", ed(with(baseClaims(), "aud", []string{"a", "b"})), reasonAudience},
		{"expired", ed(with(baseClaims(), "exp", testNow.Add(-time.Hour).Unix(), "iat", testNow.Add(-2*time.Hour).Unix())), reasonExpired},
		{"missing exp", ed(with(baseClaims(), "exp", nil)), reasonMissingExp},
		{"nbf in future", ed(with(baseClaims(), "nbf", testNow.Add(time.Hour).Unix())), reasonNotYetValid},
		{"missing sub", ed(with(baseClaims(), "sub", nil)), reasonMissingSub},
		{"missing tenant", ed(with(baseClaims(), "tenant", nil)), reasonMissingTenant("tenant")},
		{"tenant with slash", ed(with(baseClaims(), "tenant", "a/b")), reasonTenantInvalid},
		{"scp not a list", ed(with(baseClaims(), "scope", nil, "scp", "jobs:read")), reasonScpType},
		{"empty", "", reasonEmpty},
		{"oversized", strings.Repeat("a", MaxTokenBytes+1), reasonTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), tc.token)
			checkFailure(t, tc.token, err, tc.want)
		})
	}
	// scp and a custom tenant claim work as with HS256.
	v2 := mustJWKS(t, srv.URL, func(o *JWKSOptions) { o.TenantClaim = "org" })
	c, err := v2.Verify(context.Background(), ed(with(baseClaims(), "tenant", nil, "org", "umbrella", "scope", nil, "scp", []string{"jobs:admin", "x"})))
	if err != nil || c.Principal.Tenant != "umbrella" || !slices.Equal(c.Principal.Scopes, []Scope{ScopeAdmin}) {
		t.Fatalf("custom tenant claim: %+v, %v", c, err)
	}
}

func TestNewJWKSVerifierOptions(t *testing.T) {
	srv := newJWKSServer(t, allKeys()...)
	for _, tc := range []struct {
		name string
		mod  jwksOpt
		want string
	}{
		{"no URL", func(o *JWKSOptions) { o.URL = "" }, "URL is required"},
		{"not http", func(o *JWKSOptions) { o.URL = "file:///etc/jwks.json" }, "not an http(s) URL"},
		{"no host", func(o *JWKSOptions) { o.URL = "https:///jwks" }, "not an http(s) URL"},
		{"no issuer", func(o *JWKSOptions) { o.Issuer = "" }, "Issuer is required"},
		{"no audience", func(o *JWKSOptions) { o.Audience = "" }, "Audience is required"},
		{"reserved tenant claim", func(o *JWKSOptions) { o.TenantClaim = "sub" }, "reserved claim"},
		{"leeway", func(o *JWKSOptions) { o.Leeway = time.Hour }, "Leeway"},
		{"negative refresh", func(o *JWKSOptions) { o.RefreshInterval = -1 }, "RefreshInterval"},
		{"negative timeout", func(o *JWKSOptions) { o.HTTPTimeout = -1 }, "HTTPTimeout"},
		{"unknown-kid interval below timeout", func(o *JWKSOptions) { o.UnknownKIDInterval = time.Second }, "UnknownKIDInterval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := srv.fetches.Load()
			_, err := newJWKS(t, srv.URL, tc.mod)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if srv.fetches.Load() != before {
				t.Fatal("bad options still fetched the JWK Set")
			}
		})
	}
	var nilV *JWKSVerifier
	if _, err := nilV.Verify(context.Background(), "x"); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("nil verifier: %v", err)
	}
	if err := nilV.Close(); err != nil {
		t.Fatal(err)
	}
	if got := JWKSAlgorithms(); !slices.Equal(got, []string{"RS256", "ES256", "EdDSA"}) {
		t.Fatalf("JWKSAlgorithms %v", got)
	}
}

func TestJWKSContextEnds(t *testing.T) {
	k := testKeys()
	srv := newJWKSServer(t, allKeys()...)
	ctx, cancel := context.WithCancel(context.Background())
	v, err := NewJWKSVerifier(ctx, JWKSOptions{URL: srv.URL, Issuer: testIss, Audience: testAud, Now: fixedNow,
		RefreshInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(50 * time.Millisecond)
	n := srv.fetches.Load()
	time.Sleep(100 * time.Millisecond)
	if srv.fetches.Load() != n {
		t.Fatal("background refresh continued after ctx ended")
	}
	if _, err := v.Verify(context.Background(), signKid(t, jwt.SigningMethodEdDSA, k.ed, "ed1", baseClaims())); err != nil {
		t.Fatal(err)
	}
	// A cancelled request context fails an unknown-kid lookup, without a fetch.
	rctx, rcancel := context.WithCancel(context.Background())
	rcancel()
	tok := signKid(t, jwt.SigningMethodEdDSA, k.ed, "unknown", baseClaims())
	_, err = v.Verify(rctx, tok)
	checkFailure(t, tok, err, reasonKeyLookup)
	if srv.fetches.Load() != n {
		t.Fatal("cancelled request fetched")
	}
}

// fuzzJWKSValid is the "valid" seed of FuzzJWKSVerify: deterministic, since
// Ed25519 signatures are and the key comes from a fixed seed.
func fuzzJWKSValid(t testing.TB) string {
	return signKid(t, jwt.SigningMethodEdDSA, testKeys().ed, "ed1", jwt.MapClaims{
		"iss": testIss, "aud": testAud, "sub": "alice", "tenant": "acme",
		"iat": testNow.Unix(), "exp": testNow.Add(time.Hour).Unix(), "scope": "jobs:read jobs:write jobs:approve jobs:admin",
	})
}

// fuzzJWKSSeeds are the committed seeds of FuzzJWKSVerify
// (testdata/fuzz/FuzzJWKSVerify); all are deterministic (fixed key, fixed
// time, Ed25519 and HMAC signatures).
func fuzzJWKSSeeds(t testing.TB) map[string]string {
	valid := fuzzJWKSValid(t)
	parts := strings.Split(valid, ".")
	edPub := []byte(testKeys().ed.Public().(ed25519.PublicKey))
	return map[string]string{
		"valid":       valid,
		"truncated":   valid[:len(valid)/2],
		"bad_sig":     parts[0] + "." + parts[1] + "." + b64("not a signature of 64 bytes, not a signature of 64 bytes, abcdef"),
		"unknown_kid": signKid(t, jwt.SigningMethodEdDSA, testKeys().ed, "nope", baseClaims()),
		"no_kid":      signKid(t, jwt.SigningMethodEdDSA, testKeys().ed, "", baseClaims()),
		"hs256_pub":   signKid(t, jwt.SigningMethodHS256, edPub, "ed1", baseClaims()),
		"alg_none":    b64(`{"alg":"none","kid":"ed1"}`) + "." + parts[1] + ".",
		"kid_array":   b64(`{"alg":"EdDSA","kid":["ed1"]}`) + "." + parts[1] + "." + parts[2],
		"garbage":     "a.b.c",
	}
}

func FuzzJWKSVerify(f *testing.F) {
	srv := newJWKSServer(f, allKeys()...)
	v := mustJWKS(f, srv.URL)
	for _, s := range fuzzJWKSSeeds(f) {
		f.Add(s)
	}
	allowed := allowedReasons()
	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Verify(context.Background(), token)
		checkVerifyResult(t, token, c, err, allowed)
	})
}

// TestJWKSFuzzSeedCorpus keeps the committed corpus of FuzzJWKSVerify equal
// to fuzzJWKSSeeds, with only "valid" and "no_kid" verifying.
func TestJWKSFuzzSeedCorpus(t *testing.T) {
	srv := newJWKSServer(t, allKeys()...)
	v := mustJWKS(t, srv.URL)
	dir := filepath.Join("testdata", "fuzz", "FuzzJWKSVerify")
	seeds := fuzzJWKSSeeds(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(seeds) {
		t.Errorf("%d corpus files, want %d", len(entries), len(seeds))
	}
	for name, want := range seeds {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("seed %s: %v", name, err)
			continue
		}
		if string(b) != "go test fuzz v1\nstring("+strconv.Quote(want)+")\n" {
			t.Errorf("seed %s differs from fuzzJWKSSeeds (all are deterministic)", name)
		}
		_, err = v.Verify(context.Background(), want)
		if (name == "valid" || name == "no_kid") != (err == nil) {
			t.Errorf("seed %s: Verify error = %v", name, err)
		}
	}
}

// TestJWKSURLMustBeHTTPSExceptLoopback: a JWK Set decides who anyone is, so it is fetched over
// https; plain http only to a loopback address (a sidecar or a test IdP on the same host). A
// refused URL is refused before any fetch; an allowed one that does not answer fails fetching.
func TestJWKSURLMustBeHTTPSExceptLoopback(t *testing.T) {
	const refused = "must be https"
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://idp.example.com/jwks.json", false},
		{"http://10.0.0.7:8080/jwks.json", false},
		{"http://0.0.0.0:1/jwks.json", false},
		{"http://localhost.example.com/jwks.json", false},
		{"http://[fe80::1]:1/jwks.json", false},
		{"HTTP://idp.example.com/jwks.json", false},
		{"http://127.0.0.1:1/jwks.json", true},
		{"http://127.9.9.9:1/jwks.json", true},
		{"http://[::1]:1/jwks.json", true},
		{"http://LOCALHOST:1/jwks.json", true},
		{"https://127.0.0.1:1/jwks.json", true},
	} {
		_, err := newJWKS(t, tc.url, func(o *JWKSOptions) { o.HTTPTimeout = 500 * time.Millisecond })
		if err == nil {
			t.Fatalf("%s: nothing listens there, yet NewJWKSVerifier succeeded", tc.url)
		}
		if got := strings.Contains(err.Error(), refused); got == tc.ok {
			t.Errorf("%s: %v (want refused=%v)", tc.url, err, !tc.ok)
		}
	}
}
