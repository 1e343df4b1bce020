package authz

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzPrincipalFromClaims decodes arbitrary JSON objects, as a verifier
// would after the signature check, and reads them with a named scope claim
// (the string-or-array path FuzzVerifyPayload, on the default names, never
// takes) and with the defaults. Seeds: testdata/fuzz/FuzzPrincipalFromClaims.
func FuzzPrincipalFromClaims(f *testing.F) {
	allowed := allowedReasons()
	for _, r := range []string{reasonScopeClaimType("perms"), reasonMissingTenant("org"), reasonTenantType("org")} {
		allowed[r] = true
	}
	f.Fuzz(func(t *testing.T, payload string) {
		var claims map[string]any
		if json.Unmarshal([]byte(payload), &claims) != nil {
			return
		}
		for _, names := range []ClaimNames{{}, {Scope: "perms"}, {Tenant: "org", Scope: "scp"}} {
			p, err := PrincipalFromClaims(claims, names)
			if err != nil {
				var te *tokenError
				if !errors.Is(err, ErrInvalidToken) || !errors.As(err, &te) {
					t.Fatalf("%+v: error %v is not a token error", names, err)
				}
				for _, r := range te.reasons {
					if !allowed[r] {
						t.Fatalf("%+v: reason %q not in the fixed set", names, r)
					}
				}
				if p.Subject != "" || p.Tenant != "" || p.Scopes != nil {
					t.Fatalf("failure returned %+v", p)
				}
				continue
			}
			if err := p.Valid(); err != nil || p.Scopes == nil || strings.Contains(p.Tenant, "/") {
				t.Fatalf("%+v: accepted invalid principal %+v (%v)", names, p, err)
			}
			for _, s := range p.Scopes {
				if scopeIndex(s) < 0 {
					t.Fatalf("unknown scope %q kept", s)
				}
			}
		}
	})
}

// FuzzPersonFromClaims: any JSON object yields a Person within the limits (printable UTF-8,
// bounded), never a panic; it is a pure function of the claims. Seeds:
// testdata/fuzz/FuzzPersonFromClaims.
func FuzzPersonFromClaims(f *testing.F) {
	f.Fuzz(func(t *testing.T, payload string) {
		var claims map[string]any
		if json.Unmarshal([]byte(payload), &claims) != nil {
			return
		}
		p := PersonFromClaims(claims)
		for _, s := range []string{p.Name, p.Email, p.ACR} {
			if s != "" && personString(s, MaxPersonFieldLen) != s {
				t.Fatalf("kept %q", s)
			}
		}
		for _, s := range p.AMR {
			if personString(s, MaxPersonAMRLen) != s {
				t.Fatalf("kept amr %q", s)
			}
		}
		if len(p.AMR) > MaxPersonAMR || p.AMR != nil && len(p.AMR) == 0 {
			t.Fatalf("amr %v", p.AMR)
		}
		for _, a := range p.AMR {
			if a == "" {
				t.Fatalf("empty amr value kept: %v", p.AMR)
			}
		}
		if !p.AuthTime.IsZero() && (p.AuthTime.Unix() < 1 || p.AuthTime.Nanosecond() != 0) {
			t.Fatalf("auth_time %v", p.AuthTime)
		}
	})
}
