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
