package authz

import (
	"context"
	"crypto/ed25519"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"

	"github.com/golang-jwt/jwt/v5"
)

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
	testenv.SeedCorpus(t, dir, seeds, false, true)
	for name, want := range seeds {
		_, err := v.Verify(context.Background(), want)
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
