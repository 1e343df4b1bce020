package authz

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	testIss = "https://issuer.example"
	testAud = "https://jobs.example/mcp"
)

var (
	testSecret = []byte("0123456789abcdef0123456789abcdef") // 32 bytes
	testNow    = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
)

func fixedNow() time.Time { return testNow }

func newTestVerifier(t testing.TB) *JWTVerifier {
	t.Helper()
	v, err := NewJWTVerifier(JWTOptions{
		Issuer:   testIss,
		Audience: testAud,
		Methods:  []string{"HS256"},
		Keyfunc:  func(*jwt.Token) (any, error) { return testSecret, nil },
		Now:      fixedNow,
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// baseClaims are valid for newTestVerifier.
func baseClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"iss":    testIss,
		"aud":    testAud,
		"sub":    "alice",
		"tenant": "acme",
		"iat":    testNow.Add(-time.Minute).Unix(),
		"exp":    testNow.Add(time.Hour).Unix(),
		"scope":  "jobs:read jobs:write",
	}
}

func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(string)
		if kv[i+1] == nil {
			delete(c, k)
		} else {
			c[k] = kv[i+1]
		}
	}
	return c
}

func sign(t testing.TB, m jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// noneToken is an unsigned token with the given alg header.
func noneToken(alg string) string {
	return b64(`{"alg":"`+alg+`","typ":"JWT"}`) + "." +
		b64(`{"iss":"`+testIss+`","aud":"`+testAud+`","sub":"alice","tenant":"acme","exp":1893553445,"scope":"jobs:admin"}`) + "."
}

// checkFailure asserts err is a safe Verify failure mentioning want.
func checkFailure(t *testing.T, token string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Verify succeeded, want failure %q", want)
	}
	if !errors.Is(err, ErrInvalidToken) {
		t.Errorf("error %q does not wrap ErrInvalidToken", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, want) {
		t.Errorf("error %q does not contain %q", msg, want)
	}
	assertNoEcho(t, token, msg)
}

// assertNoEcho fails if msg contains the token or any sizeable piece of it.
func assertNoEcho(t testing.TB, token, msg string) {
	t.Helper()
	if len(token) >= 8 && strings.Contains(msg, token) {
		t.Errorf("error %q echoes the token", msg)
	}
	for _, seg := range strings.Split(token, ".") {
		if len(seg) >= 8 && strings.Contains(msg, seg) {
			t.Errorf("error %q echoes token segment %q", msg, seg)
		}
	}
}

func TestVerifyValid(t *testing.T) {
	v := newTestVerifier(t)
	tok := sign(t, jwt.SigningMethodHS256, testSecret, baseClaims())
	c, err := v.Verify(context.Background(), tok)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := Principal{Tenant: "acme", Subject: "alice", Scopes: []Scope{ScopeRead, ScopeWrite}}
	if c.Principal.Tenant != want.Tenant || c.Principal.Subject != want.Subject || !slices.Equal(c.Principal.Scopes, want.Scopes) {
		t.Errorf("Principal = %+v, want %+v", c.Principal, want)
	}
	if !c.Expiry.Equal(testNow.Add(time.Hour)) {
		t.Errorf("Expiry = %v, want %v", c.Expiry, testNow.Add(time.Hour))
	}
}

func TestVerifyFailures(t *testing.T) {
	v := newTestVerifier(t)
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, testSecret, c) }
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	valid := hs(baseClaims())

	tests := []struct {
		name  string
		token string
		want  string
	}{
		{"empty", "", reasonEmpty},
		{"oversized", valid + "." + strings.Repeat("A", MaxTokenBytes), reasonTooLarge},
		{"garbage", "not a token at all", reasonMalformed},
		{"two segments", "abc.def", reasonMalformed},
		{"bad base64 header", "!!!." + strings.SplitN(valid, ".", 2)[1], reasonMalformed},
		{"header not json", b64("nope") + "." + strings.SplitN(valid, ".", 2)[1], reasonMalformed},
		{"truncated signature", valid[:len(valid)-5], ""},
		{"signature dropped", valid[:strings.LastIndex(valid, ".")+1], reasonSignature},
		{"non-canonical base64", valid[:len(valid)-1] + string(valid[len(valid)-1]^1), ""},
		{"alg none", noneToken("none"), reasonAlgNotAllowed},
		{"alg None", noneToken("None"), reasonUnknownAlg},
		{"alg missing", b64(`{"typ":"JWT"}`) + "." + b64(`{}`) + ".", reasonUnknownAlg},
		{"HS384 when only HS256 allowed", sign(t, jwt.SigningMethodHS384, testSecret, baseClaims()), reasonAlgNotAllowed},
		{"HS512 when only HS256 allowed", sign(t, jwt.SigningMethodHS512, testSecret, baseClaims()), reasonAlgNotAllowed},
		{"RS256 when only HS256 allowed", sign(t, jwt.SigningMethodRS256, rsaKey, baseClaims()), reasonAlgNotAllowed},
		{"wrong secret", sign(t, jwt.SigningMethodHS256, []byte("ffffffffffffffffffffffffffffffff"), baseClaims()), reasonSignature},
		{"tampered payload", strings.Replace(valid, strings.Split(valid, ".")[1], b64(`{"iss":"`+testIss+`","aud":"`+testAud+`","sub":"alice","tenant":"acme","exp":1893553445,"scope":"jobs:admin"}`), 1), reasonSignature},
		{"expired beyond leeway", hs(with(baseClaims(), "exp", testNow.Add(-31*time.Second).Unix())), reasonExpired},
		{"expired long ago", hs(with(baseClaims(), "exp", testNow.Add(-24*time.Hour).Unix(), "iat", testNow.Add(-25*time.Hour).Unix())), reasonExpired},
		{"nbf in future", hs(with(baseClaims(), "nbf", testNow.Add(time.Minute).Unix())), reasonNotYetValid},
		{"iat in future", hs(with(baseClaims(), "iat", testNow.Add(time.Minute).Unix())), reasonIssuedFuture},
		{"wrong iss", hs(with(baseClaims(), "iss", "https://evil.example")), reasonIssuer},
		{"iss prefix", hs(with(baseClaims(), "iss", testIss+"/")), reasonIssuer},
		{"missing iss", hs(with(baseClaims(), "iss", nil)), reasonMissingIss},
		{"wrong aud", hs(with(baseClaims(), "aud", "https://other.example/mcp")), reasonAudience},
		{"aud array without us", hs(with(baseClaims(), "aud", []string{"a", "b"})), reasonAudience},
		{"missing aud", hs(with(baseClaims(), "aud", nil)), reasonMissingAud},
		{"empty aud", hs(with(baseClaims(), "aud", "")), reasonMissingAud},
		{"aud number", hs(with(baseClaims(), "aud", 7)), reasonMissingAud}, // jwt ignores non-string aud
		{"aud array with number", hs(with(baseClaims(), "aud", []any{testAud, 7})), reasonClaimType},
		{"nbf string", hs(with(baseClaims(), "nbf", "soon")), reasonClaimType},
		{"missing exp", hs(with(baseClaims(), "exp", nil)), reasonMissingExp},
		{"exp zero", hs(with(baseClaims(), "exp", 0)), reasonMissingExp},
		{"exp string", hs(with(baseClaims(), "exp", "tomorrow")), reasonClaimType},
		{"missing exp and iss", hs(with(baseClaims(), "exp", nil, "iss", nil)), reasonMissingExp + "; " + reasonMissingIss},
		{"missing sub", hs(with(baseClaims(), "sub", nil)), reasonMissingSub},
		{"empty sub", hs(with(baseClaims(), "sub", "")), reasonMissingSub},
		{"sub number", hs(with(baseClaims(), "sub", 42)), reasonSubType},
		{"sub control char", hs(with(baseClaims(), "sub", "al\nice")), reasonSubInvalid},
		{"sub too long", hs(with(baseClaims(), "sub", strings.Repeat("s", 257))), reasonSubInvalid},
		{"missing tenant", hs(with(baseClaims(), "tenant", nil)), reasonMissingTenant("tenant")},
		{"empty tenant", hs(with(baseClaims(), "tenant", "")), reasonMissingTenant("tenant")},
		{"tenant number", hs(with(baseClaims(), "tenant", 5)), reasonTenantType("tenant")},
		{"tenant array", hs(with(baseClaims(), "tenant", []string{"acme"})), reasonTenantType("tenant")},
		{"tenant with slash", hs(with(baseClaims(), "tenant", "acme/evil")), reasonTenantInvalid},
		{"tenant upper case", hs(with(baseClaims(), "tenant", "ACME")), reasonTenantInvalid},
		{"tenant leading dash", hs(with(baseClaims(), "tenant", "-acme")), reasonTenantInvalid},
		{"missing sub and tenant", hs(with(baseClaims(), "sub", nil, "tenant", nil)), reasonMissingSub + "; " + reasonMissingTenant("tenant")},
		{"scope array", hs(with(baseClaims(), "scope", []string{"jobs:read"})), reasonScopeType},
		{"scp string", hs(with(baseClaims(), "scope", nil, "scp", "jobs:read")), reasonScpType},
		{"scp mixed", hs(with(baseClaims(), "scope", nil, "scp", []any{"jobs:read", 1})), reasonScpType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), tt.token)
			if tt.want == "" { // any failure will do
				if err == nil {
					t.Fatalf("Verify succeeded: %+v", c)
				}
				checkFailure(t, tt.token, err, "invalid token: ")
				return
			}
			checkFailure(t, tt.token, err, tt.want)
			if c.Principal.Tenant != "" || c.Principal.Subject != "" || c.Principal.Scopes != nil {
				t.Errorf("failed Verify returned principal %+v", c.Principal)
			}
		})
	}
}

func TestVerifyErrorsWrapCauses(t *testing.T) {
	v := newTestVerifier(t)
	_, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), "exp", testNow.Add(-time.Hour).Unix(), "iat", nil)))
	if !errors.Is(err, jwt.ErrTokenExpired) || !errors.Is(err, ErrInvalidToken) {
		t.Errorf("expired error %v does not wrap jwt.ErrTokenExpired and ErrInvalidToken", err)
	}
	if got, want := err.Error(), "invalid token: token expired"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestVerifyLeewayAndOptionalClaims(t *testing.T) {
	v := newTestVerifier(t)
	for name, c := range map[string]jwt.MapClaims{
		"exp within leeway": with(baseClaims(), "exp", testNow.Add(-29*time.Second).Unix()),
		"nbf within leeway": with(baseClaims(), "nbf", testNow.Add(29*time.Second).Unix()),
		"nbf in past":       with(baseClaims(), "nbf", testNow.Add(-time.Hour).Unix()),
		"iat within leeway": with(baseClaims(), "iat", testNow.Add(29*time.Second).Unix()),
		"no iat":            with(baseClaims(), "iat", nil),
		"aud array with us": with(baseClaims(), "aud", []string{"https://other.example", testAud}),
		"aud single array":  with(baseClaims(), "aud", []string{testAud}),
		"fractional exp":    with(baseClaims(), "exp", float64(testNow.Add(time.Hour).Unix())+0.5),
		"extra claims":      with(baseClaims(), "jti", "abc", "azp", "client", "roles", []string{"x"}),
		"null scope":        with(baseClaims(), "scope", nil),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, testSecret, c)); err != nil {
				t.Errorf("Verify: %v", err)
			}
		})
	}
}

func TestVerifyScopes(t *testing.T) {
	v := newTestVerifier(t)
	for _, tt := range []struct {
		name string
		kv   []any
		want []Scope
	}{
		{"scope string", []any{"scope", "jobs:read jobs:approve"}, []Scope{ScopeRead, ScopeApprove}},
		{"scp array", []any{"scope", nil, "scp", []string{"jobs:admin", "jobs:write"}}, []Scope{ScopeWrite, ScopeAdmin}},
		{"scope and scp merge", []any{"scope", "jobs:read", "scp", []string{"jobs:approve"}}, []Scope{ScopeRead, ScopeApprove}},
		{"unknown scopes dropped", []any{"scope", "openid profile jobs:read jobs:root JOBS:ADMIN jobs:admin:x"}, []Scope{ScopeRead}},
		{"unknown scp dropped", []any{"scope", nil, "scp", []string{"offline_access", "jobs:write"}}, []Scope{ScopeWrite}},
		{"duplicates and odd spacing", []any{"scope", "  jobs:write\tjobs:read  jobs:write\n"}, []Scope{ScopeRead, ScopeWrite}},
		{"comma is not a separator in tokens", []any{"scope", "jobs:read,jobs:write"}, []Scope{}},
		{"no scope claims", []any{"scope", nil}, []Scope{}},
		{"empty scope", []any{"scope", ""}, []Scope{}},
		{"empty scp", []any{"scope", nil, "scp", []string{}}, []Scope{}},
		{"all", []any{"scope", "jobs:admin jobs:approve jobs:write jobs:read"}, AllScopes()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), tt.kv...)))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if !slices.Equal(c.Principal.Scopes, tt.want) || c.Principal.Scopes == nil {
				t.Errorf("Scopes = %#v, want %v", c.Principal.Scopes, tt.want)
			}
		})
	}
}

func TestVerifyTokenSizeLimit(t *testing.T) {
	if !strings.Contains(reasonTooLarge, strconv.Itoa(MaxTokenBytes)) {
		t.Errorf("reason %q disagrees with MaxTokenBytes %d", reasonTooLarge, MaxTokenBytes)
	}
	v := newTestVerifier(t)
	c := baseClaims()
	tok := sign(t, jwt.SigningMethodHS256, testSecret, c)
	// Pad a claim so the token is exactly MaxTokenBytes: accepted.
	pad := MaxTokenBytes - len(tok)
	for i := 0; i < 8; i++ {
		c["pad"] = strings.Repeat("p", max(pad, 0))
		tok = sign(t, jwt.SigningMethodHS256, testSecret, c)
		if len(tok) == MaxTokenBytes {
			break
		}
		pad += (MaxTokenBytes - len(tok)) * 3 / 4
		if (MaxTokenBytes-len(tok))*3/4 == 0 {
			pad += map[bool]int{true: 1, false: -1}[len(tok) < MaxTokenBytes]
		}
	}
	if len(tok) != MaxTokenBytes {
		t.Fatalf("could not build a token of exactly %d bytes (got %d): the padding loop needs fixing, not skipping", MaxTokenBytes, len(tok))
	}
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Errorf("token of exactly MaxTokenBytes rejected: %v", err)
	}
	_, err := v.Verify(context.Background(), tok+"A")
	checkFailure(t, tok+"A", err, reasonTooLarge)
}

func TestVerifyCustomTenantClaim(t *testing.T) {
	v, err := NewJWTVerifier(JWTOptions{Issuer: testIss, Audience: testAud, TenantClaim: "org", Methods: []string{"HS256"},
		Keyfunc: func(*jwt.Token) (any, error) { return testSecret, nil }, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), "tenant", "ignored", "org", "globex")))
	if err != nil || c.Principal.Tenant != "globex" {
		t.Fatalf("Verify = %+v, %v; want tenant globex", c, err)
	}
	_, err = v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, testSecret, baseClaims()))
	checkFailure(t, "", err, `missing "org" (tenant) claim`)
}

func TestHS256Verifier(t *testing.T) {
	if _, err := NewHS256Verifier(testIss, testAud, testSecret[:31], ""); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Errorf("short secret: err = %v", err)
	}
	secret := slices.Clone(testSecret)
	v, err := NewHS256Verifier(testIss, testAud, secret, "")
	if err != nil {
		t.Fatal(err)
	}
	secret[0] ^= 0xff // the verifier keeps its own copy
	tok, err := MintHS256(testSecret, MintOptions{Issuer: testIss, Audience: testAud, Tenant: "acme", Subject: "alice", Scopes: []Scope{ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(context.Background(), tok)
	if err != nil || c.Principal.Subject != "alice" {
		t.Fatalf("Verify = %+v, %v", c, err)
	}
	_, err = v.Verify(context.Background(), sign(t, jwt.SigningMethodHS384, testSecret, with(baseClaims(), "exp", time.Now().Add(time.Hour).Unix(), "iat", nil)))
	checkFailure(t, "", err, reasonAlgNotAllowed)
	if _, err := NewHS256Verifier("", testAud, testSecret, ""); err == nil || !strings.Contains(err.Error(), "Issuer") {
		t.Errorf("empty issuer: err = %v", err)
	}
}
