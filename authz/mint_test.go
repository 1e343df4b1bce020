package authz

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func mintOpts() MintOptions {
	return MintOptions{Issuer: testIss, Audience: testAud, Tenant: "acme", Subject: "alice", Now: fixedNow}
}

func TestMintRoundTrip(t *testing.T) {
	v := newTestVerifier(t)
	for _, tt := range []struct {
		name   string
		scopes []Scope
		want   []Scope
	}{
		{"no scopes", nil, []Scope{}},
		{"one", []Scope{ScopeApprove}, []Scope{ScopeApprove}},
		{"dedup and order", []Scope{ScopeAdmin, ScopeRead, ScopeAdmin}, []Scope{ScopeRead, ScopeAdmin}},
		{"all", AllScopes(), AllScopes()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := mintOpts()
			o.Scopes = tt.scopes
			tok, err := MintHS256(testSecret, o)
			if err != nil {
				t.Fatal(err)
			}
			c, err := v.Verify(context.Background(), tok)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if c.Principal.Tenant != "acme" || c.Principal.Subject != "alice" || !slices.Equal(c.Principal.Scopes, tt.want) {
				t.Errorf("Principal = %+v, want scopes %v", c.Principal, tt.want)
			}
			if !c.Expiry.Equal(testNow.Add(MintTTLDefault)) {
				t.Errorf("Expiry = %v, want now+1h", c.Expiry)
			}
		})
	}
}

func TestMintClaims(t *testing.T) {
	o := mintOpts()
	o.TTL = 5 * time.Minute
	o.TenantClaim = "org"
	o.Scopes = []Scope{ScopeWrite, ScopeRead}
	tok, err := MintHS256(testSecret, o)
	if err != nil {
		t.Fatal(err)
	}
	mc := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(tok, mc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"iss": testIss, "aud": testAud, "sub": "alice", "org": "acme",
		"scope": "jobs:read jobs:write",
		"iat":   float64(testNow.Unix()), "exp": float64(testNow.Add(5 * time.Minute).Unix()),
	}
	if len(mc) != len(want) {
		t.Errorf("claims = %v, want %v", mc, want)
	}
	for k, w := range want {
		if mc[k] != w {
			t.Errorf("claim %s = %#v, want %#v", k, mc[k], w)
		}
	}

	// The default verifier (tenant claim "tenant") refuses it; one configured for "org" accepts it.
	_, err = newTestVerifier(t).Verify(context.Background(), tok)
	checkFailure(t, tok, err, reasonMissingTenant("tenant"))
	v, err := NewJWTVerifier(JWTOptions{Issuer: testIss, Audience: testAud, TenantClaim: "org", Methods: []string{"HS256"},
		Keyfunc: func(*jwt.Token) (any, error) { return testSecret, nil }, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Errorf("Verify with org tenant claim: %v", err)
	}
	// It expires after its TTL (plus leeway).
	later := func() time.Time { return testNow.Add(5*time.Minute + LeewayDefault + time.Second) }
	v2, err := NewJWTVerifier(JWTOptions{Issuer: testIss, Audience: testAud, TenantClaim: "org", Methods: []string{"HS256"},
		Keyfunc: func(*jwt.Token) (any, error) { return testSecret, nil }, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v2.Verify(context.Background(), tok)
	checkFailure(t, tok, err, reasonExpired)
}

func TestMintErrors(t *testing.T) {
	for _, tt := range []struct {
		name   string
		secret []byte
		edit   func(*MintOptions)
		want   string
	}{
		{"short secret", testSecret[:31], func(*MintOptions) {}, "32 bytes"},
		{"no issuer", testSecret, func(o *MintOptions) { o.Issuer = "" }, "Issuer"},
		{"no audience", testSecret, func(o *MintOptions) { o.Audience = "" }, "Audience"},
		{"bad tenant", testSecret, func(o *MintOptions) { o.Tenant = "a/b" }, "Tenant"},
		{"empty tenant", testSecret, func(o *MintOptions) { o.Tenant = "" }, "Tenant"},
		{"bad subject", testSecret, func(o *MintOptions) { o.Subject = "a\x00" }, "Subject"},
		{"unknown scope", testSecret, func(o *MintOptions) { o.Scopes = []Scope{ScopeRead, "jobs:root"} }, `"jobs:root"`},
		{"negative ttl", testSecret, func(o *MintOptions) { o.TTL = -time.Second }, "TTL"},
		{"reserved tenant claim", testSecret, func(o *MintOptions) { o.TenantClaim = "exp" }, "TenantClaim"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := mintOpts()
			tt.edit(&o)
			tok, err := MintHS256(tt.secret, o)
			if err == nil || tok != "" {
				t.Fatalf("MintHS256 = %q, %v; want error", tok, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestMintDefaultsToWallClock(t *testing.T) {
	o := mintOpts()
	o.Now = nil
	tok, err := MintHS256(testSecret, o)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewHS256Verifier(testIss, testAud, testSecret, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(c.Expiry); d < 59*time.Minute || d > time.Hour {
		t.Errorf("expiry %v from now, want about 1h", d)
	}
}
