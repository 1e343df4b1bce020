package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

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
