package authz

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

func TestPrincipalFromClaims(t *testing.T) {
	base := func(kv ...any) map[string]any {
		m := map[string]any{"sub": "ana", "tenant": "acme"}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		return m
	}
	for _, tt := range []struct {
		name   string
		claims map[string]any
		names  ClaimNames
		want   []Scope
		reason string // "" means success
	}{
		{"default: scope string", base("scope", "jobs:read jobs:write"), ClaimNames{}, []Scope{ScopeRead, ScopeWrite}, ""},
		{"default: scp array", base("scp", []any{"jobs:admin"}), ClaimNames{}, []Scope{ScopeAdmin}, ""},
		{"default: scope and scp merge", base("scope", "jobs:read", "scp", []any{"jobs:approve"}), ClaimNames{}, []Scope{ScopeRead, ScopeApprove}, ""},
		{"default: scope array refused", base("scope", []any{"jobs:read"}), ClaimNames{}, nil, reasonScopeType},
		{"default: scp string refused", base("scp", "jobs:read"), ClaimNames{}, nil, reasonScpType},
		{"default: no scopes", base(), ClaimNames{}, []Scope{}, ""},
		{"named scope as string", base("perms", "jobs:read  jobs:approve"), ClaimNames{Scope: "perms"}, []Scope{ScopeRead, ScopeApprove}, ""},
		{"named scope as array", base("perms", []any{"jobs:write", "openid"}), ClaimNames{Scope: "perms"}, []Scope{ScopeWrite}, ""},
		{"named scope as []string", base("perms", []string{"jobs:read"}), ClaimNames{Scope: "perms"}, []Scope{ScopeRead}, ""},
		{"named scp as string (Entra)", base("scp", "jobs:read jobs:write"), ClaimNames{Scope: "scp"}, []Scope{ScopeRead, ScopeWrite}, ""},
		{"named scope ignores the default pair", base("scope", "jobs:admin", "scp", []any{"jobs:admin"}, "perms", "jobs:read"), ClaimNames{Scope: "perms"}, []Scope{ScopeRead}, ""},
		{"named scope absent", base("scope", "jobs:admin"), ClaimNames{Scope: "perms"}, []Scope{}, ""},
		{"named scope number", base("perms", 1.0), ClaimNames{Scope: "perms"}, nil, reasonScopeClaimType("perms")},
		{"named scope mixed array", base("perms", []any{"jobs:read", 1.0}), ClaimNames{Scope: "perms"}, nil, reasonScopeClaimType("perms")},
		{"named tenant", base("tenant", nil, "org", "umbrella"), ClaimNames{Tenant: "org"}, []Scope{}, ""},
		{"named tenant missing", base(), ClaimNames{Tenant: "org"}, nil, reasonMissingTenant("org")},
		{"tenant not a string", base("tenant", []any{"acme"}), ClaimNames{}, nil, reasonTenantType("tenant")},
		{"tenant invalid", base("tenant", "Acme Corp"), ClaimNames{}, nil, reasonTenantInvalid},
		{"no sub", base("sub", nil), ClaimNames{}, nil, reasonMissingSub},
		{"sub not a string", base("sub", 7.0), ClaimNames{}, nil, reasonSubType},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PrincipalFromClaims(tt.claims, tt.names)
			if tt.reason != "" {
				if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), tt.reason) {
					t.Fatalf("err = %v, want reason %q", err, tt.reason)
				}
				if p.Subject != "" || p.Tenant != "" || p.Scopes != nil {
					t.Fatalf("failure returned %+v", p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Scopes, tt.want) || p.Scopes == nil {
				t.Fatalf("scopes = %#v, want %v", p.Scopes, tt.want)
			}
			if p.Subject != "ana" || (p.Tenant != "acme" && p.Tenant != "umbrella") {
				t.Fatalf("principal %+v", p)
			}
		})
	}
}

func TestClaimNamesRefused(t *testing.T) {
	for _, n := range []ClaimNames{
		{Tenant: "sub"}, {Tenant: "scope"}, {Tenant: "scp"}, {Tenant: "nonce"},
		{Scope: "iss"}, {Scope: "at_hash"}, {Scope: "tenant"}, {Tenant: "org", Scope: "org"},
	} {
		if _, err := PrincipalFromClaims(map[string]any{"sub": "ana", "tenant": "acme", "org": "acme"}, n); err == nil || errors.Is(err, ErrInvalidToken) {
			t.Errorf("%+v: err = %v, want a configuration error", n, err)
		}
	}
	kf := func(*jwt.Token) (any, error) { return testSecret, nil }
	for _, tt := range []struct{ tenant, scope, field string }{
		{"", "exp", "ScopeClaim"},
		{"", "tenant", "ScopeClaim"},
		{"org", "org", "ScopeClaim"},
		{"c_hash", "", "TenantClaim"},
	} {
		_, err := NewJWTVerifier(JWTOptions{Issuer: testIss, Audience: testAud, Methods: []string{"HS256"}, Keyfunc: kf, TenantClaim: tt.tenant, ScopeClaim: tt.scope})
		if err == nil || !strings.Contains(err.Error(), "JWTOptions."+tt.field) {
			t.Errorf("tenant %q scope %q: err = %v, want one naming %s", tt.tenant, tt.scope, err, tt.field)
		}
	}
}

// TestVerifyScopeClaim: a verifier configured with a scope claim reads that
// one claim, string or array, and Claims carries the issuer.
func TestVerifyScopeClaim(t *testing.T) {
	v, err := NewJWTVerifier(JWTOptions{
		Issuer: testIss, Audience: testAud, Methods: []string{"HS256"},
		Keyfunc:    func(*jwt.Token) (any, error) { return testSecret, nil },
		ScopeClaim: "scp", Now: fixedNow,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, scp := range []any{"jobs:read jobs:write", []string{"jobs:write", "jobs:read"}} {
		c, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), "scope", "jobs:admin", "scp", scp)))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Principal.Scopes, []Scope{ScopeRead, ScopeWrite}) || c.Issuer != testIss {
			t.Fatalf("claims %+v", c)
		}
	}
}

// TestVerifyRefusesIDTokens: a JWT with any claim only ID tokens carry is not
// a bearer, even when signed by the right key for the right audience.
func TestVerifyRefusesIDTokens(t *testing.T) {
	v := newTestVerifier(t)
	c, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, testSecret, baseClaims()))
	if err != nil || c.Issuer != testIss {
		t.Fatalf("plain access token: %+v, %v", c, err)
	}
	for _, claim := range []string{"nonce", "at_hash", "c_hash"} {
		for _, val := range []any{"n-0S6_WzA2Mj", "", 0.0} {
			tok := sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), claim, val))
			c, err := v.Verify(context.Background(), tok)
			if !errors.Is(err, ErrInvalidToken) || err.Error() != "invalid token: "+reasonIDToken {
				t.Errorf("%s=%v: err = %v, want %q", claim, val, err, reasonIDToken)
			}
			if c.Principal.Subject != "" || c.Principal.Scopes != nil || c.Issuer != "" || !c.Expiry.IsZero() {
				t.Errorf("%s: claims %+v on failure", claim, c)
			}
		}
	}
}

// TestPersonFromClaims: the person's claims are read when usable and dropped (never refused)
// when not.
func TestPersonFromClaims(t *testing.T) {
	p := PersonFromClaims(map[string]any{"name": "Stew Ard", "email": "steward@acme.example",
		"auth_time": float64(1764575000), "amr": []any{"pwd", "otp"}, "acr": "urn:acme:loa:2"})
	if p.Name != "Stew Ard" || p.Email != "steward@acme.example" || p.AuthTime.Unix() != 1764575000 ||
		len(p.AMR) != 2 || p.AMR[1] != "otp" || p.ACR != "urn:acme:loa:2" {
		t.Errorf("got %+v", p)
	}
	bad := PersonFromClaims(map[string]any{"name": "a\u202eb", "email": 7, "auth_time": "1764575000",
		"amr": []any{"pwd", 3}, "acr": strings.Repeat("x", MaxPersonFieldLen+1)})
	if bad.Name != "" || bad.Email != "" || !bad.AuthTime.IsZero() || bad.AMR != nil || bad.ACR != "" {
		t.Errorf("kept unusable values: %+v", bad)
	}
	// An e-mail the provider has not verified is not recorded as the approver's; a verified one
	// (boolean or the string some providers send) and one without the claim are.
	for v, keep := range map[any]bool{false: false, "false": false, "no": false, 0.0: false, true: true, "true": true} {
		got := PersonFromClaims(map[string]any{"email": "mallory@acme.example", "email_verified": v})
		if (got.Email != "") != keep {
			t.Errorf("email_verified %#v: email %q, want kept=%v", v, got.Email, keep)
		}
	}
}
