package authz

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// allowedReasons is the closed set of texts a Verify error may show for the
// verifier newTestVerifier builds. Since none is derived from the token, an
// error built only from these cannot echo it.
func allowedReasons() map[string]bool {
	m := map[string]bool{}
	for _, r := range []string{
		reasonEmpty, reasonTooLarge, reasonMalformed, reasonUnknownAlg, reasonAlgNotAllowed,
		reasonKeyLookup, reasonSignature, reasonMissingExp, reasonMissingIss, reasonMissingAud,
		reasonMissingClaim, reasonClaimType, reasonExpired, reasonNotYetValid, reasonIssuedFuture,
		reasonIssuer, reasonAudience, reasonClaimsInvalid, reasonMissingSub, reasonSubType,
		reasonSubInvalid, reasonTenantInvalid, reasonScopeType, reasonScpType, reasonNilVerifier, reasonIDToken,
		reasonMissingTenant(TenantClaimDefault), reasonTenantType(TenantClaimDefault),
	} {
		m[r] = true
	}
	return m
}

func checkVerifyResult(t *testing.T, token string, c Claims, err error, allowed map[string]bool) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("error does not wrap ErrInvalidToken: %v", err)
		}
		var te *tokenError
		if !errors.As(err, &te) {
			t.Fatalf("error is %T, want *tokenError", err)
		}
		if len(te.reasons) == 0 {
			t.Fatal("error without a reason")
		}
		for _, r := range te.reasons {
			if !allowed[r] {
				t.Fatalf("reason %q not in the fixed set", r)
			}
		}
		if want := "invalid token: " + strings.Join(te.reasons, "; "); err.Error() != want {
			t.Fatalf("Error() = %q, want %q", err.Error(), want)
		}
		if c.Principal.Tenant != "" || c.Principal.Subject != "" || c.Principal.Scopes != nil || !c.Expiry.IsZero() {
			t.Fatalf("failure returned non-zero claims %+v", c)
		}
		return
	}
	p := c.Principal
	if err := p.Valid(); err != nil {
		t.Fatalf("accepted token yields invalid principal %+v: %v", p, err)
	}
	if strings.Contains(p.Tenant, "/") {
		t.Fatalf("tenant %q contains '/'", p.Tenant)
	}
	if p.Scopes == nil {
		t.Fatal("nil scopes")
	}
	last := -1
	for _, s := range p.Scopes {
		i := scopeIndex(s)
		if i < 0 {
			t.Fatalf("unknown scope %q kept", s)
		}
		if i <= last {
			t.Fatalf("scopes %v not canonical", p.Scopes)
		}
		last = i
	}
	if !c.Expiry.After(testNow.Add(-LeewayDefault)) {
		t.Fatalf("accepted token expired at %v", c.Expiry)
	}
	if len(token) > MaxTokenBytes {
		t.Fatalf("accepted a %d-byte token", len(token))
	}
}

func FuzzVerify(f *testing.F) {
	valid, err := MintHS256(testSecret, MintOptions{Issuer: testIss, Audience: testAud, Tenant: "acme", Subject: "alice", Scopes: AllScopes(), Now: fixedNow})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(noneToken("none"))
	f.Add(sign(f, jwt.SigningMethodHS256, testSecret, with(baseClaims(), "scope", nil, "scp", []string{"jobs:read", "x"})))
	f.Add("")
	f.Add("a.b.c")

	v := newTestVerifier(f)
	allowed := allowedReasons()
	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Verify(context.Background(), token)
		checkVerifyResult(t, token, c, err, allowed)
	})
}

// TestFuzzSeedCorpus keeps the committed seed corpus meaningful: the "valid"
// seed must still verify under the fuzz verifier and the others must fail.
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzVerify")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	v := newTestVerifier(t)
	seen := map[string]bool{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "string(") || !strings.HasSuffix(lines[1], ")") {
			t.Fatalf("%s: not a single-string corpus file", e.Name())
		}
		token, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		seen[e.Name()] = true
		_, err = v.Verify(context.Background(), token)
		if (e.Name() == "valid") != (err == nil) {
			t.Errorf("seed %s: Verify error = %v", e.Name(), err)
		}
	}
	for _, name := range []string{"valid", "truncated", "alg_none", "garbage"} {
		if !seen[name] {
			t.Errorf("seed %s missing", name)
		}
	}
	// The valid seed is exactly what MintHS256 produces for the fuzz setup.
	want, err := MintHS256(testSecret, MintOptions{Issuer: testIss, Audience: testAud, Tenant: "acme", Subject: "alice", Scopes: AllScopes(), Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "valid"))
	if !strings.Contains(string(b), strconv.Quote(want)) {
		t.Errorf("valid seed differs from MintHS256 output %q", want)
	}
}

// FuzzVerifyPayload signs arbitrary claim payloads with the right key, so the
// fuzzer exercises claim handling behind the signature check, which
// FuzzVerify's random strings almost never pass.
func FuzzVerifyPayload(f *testing.F) {
	for _, c := range []jwt.MapClaims{
		baseClaims(),
		with(baseClaims(), "scope", nil, "scp", []any{"jobs:admin", "jobs:read"}),
		with(baseClaims(), "aud", []any{"x", testAud}, "nbf", testNow.Unix()),
		with(baseClaims(), "tenant", "a/b"),
		with(baseClaims(), "sub", 1.5),
	} {
		b, err := json.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(`{"iss":"https://issuer.example","aud":"https://jobs.example/mcp","sub":"alice","tenant":"acme","exp":1e300,"scope":"jobs:read"}`)
	f.Add(`{"iss":"https://issuer.example","aud":"https://jobs.example/mcp","sub":"\u202e","tenant":"acme","exp":1893557045,"scope":null,"scp":[null]}`)

	v := newTestVerifier(f)
	allowed := allowedReasons()
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	f.Fuzz(func(t *testing.T, payload string) {
		signing := header + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
		sig, err := jwt.SigningMethodHS256.Sign(signing, testSecret)
		if err != nil {
			t.Fatal(err)
		}
		token := signing + "." + base64.RawURLEncoding.EncodeToString(sig)
		c, err := v.Verify(context.Background(), token)
		checkVerifyResult(t, token, c, err, allowed)
	})
}
