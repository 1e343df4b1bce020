package authz

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ScopeClaimDefault is the empty ClaimNames.Scope: read "scope" (a
// space-separated string, RFC 9068 §2.2.3) merged with "scp" (an array of
// strings), exactly as verifiers did before scope claims were configurable.
const ScopeClaimDefault = ""

// ClaimNames name the claims a [Principal] is read from. The bearer
// verifiers and the browser sign-in share them, so an operator configures
// an identity provider's claim names once and both read them alike.
type ClaimNames struct {
	// Tenant names the string claim holding the tenant.
	// Defaults to "tenant" (TenantClaimDefault).
	Tenant string
	// Scope names the one claim holding the scopes, given as a
	// space-separated string or an array of strings (IdPs differ: Entra's
	// "scp" is a string, Okta's an array). Empty (ScopeClaimDefault) means
	// "scope" as a string merged with "scp" as an array.
	// Defaults to "" (ScopeClaimDefault).
	Scope string
}

// withDefaults fills the tenant default and checks the names; an error starts with the name
// of the field at fault (tenantField or scopeField: how the caller's configuration spells it).
func (n ClaimNames) withDefaults(tenantField, scopeField string) (ClaimNames, error) {
	if n.Tenant == "" {
		n.Tenant = TenantClaimDefault
	}
	if err := checkTenantClaim(n.Tenant); err != nil {
		return n, fmt.Errorf("%s: %w", tenantField, err)
	}
	if n.Scope != "" {
		if err := checkClaimName(n.Scope); err != nil {
			return n, fmt.Errorf("%s: %w", scopeField, err)
		}
		if n.Scope == n.Tenant {
			return n, fmt.Errorf("%s: %q is also the tenant claim", scopeField, n.Scope)
		}
	}
	return n, nil
}

// checkClaimName refuses names of claims read for other purposes: the
// registered ones and those only ID tokens carry.
func checkClaimName(name string) error {
	switch name {
	case "iss", "sub", "aud", "exp", "nbf", "iat", "jti", "nonce", "at_hash", "c_hash":
		return fmt.Errorf("%q is a reserved claim name", name)
	}
	return nil
}

func reasonScopeClaimType(claim string) string {
	return fmt.Sprintf("%q (scope) claim is neither a space-separated string nor an array of strings", claim)
}

// PrincipalFromClaims reads the principal from claims already verified
// (signature, iss, aud, exp): sub (required, ValidSubject), the tenant
// claim (required string, ValidTenant) and the scope claim(s) named by
// names (optional; unknown scopes are dropped, the rest canonical).
//
// A failure wraps [ErrInvalidToken] and names the claims at fault, never
// their values. A bad ClaimNames is an error too (callers check it once at
// construction with the same rules).
func PrincipalFromClaims(claims map[string]any, names ClaimNames) (Principal, error) {
	names, err := names.withDefaults("tenant claim", "scope claim")
	if err != nil {
		return Principal{}, fmt.Errorf("authz: ClaimNames: %w", err)
	}
	var reasons []string
	var p Principal

	switch sub, ok := claims["sub"]; {
	case !ok || sub == nil || sub == "":
		reasons = append(reasons, reasonMissingSub)
	default:
		s, isString := sub.(string)
		switch {
		case !isString:
			reasons = append(reasons, reasonSubType)
		case ValidSubject(s) != nil:
			reasons = append(reasons, reasonSubInvalid)
		default:
			p.Subject = s
		}
	}

	switch ten, ok := claims[names.Tenant]; {
	case !ok || ten == nil || ten == "":
		reasons = append(reasons, reasonMissingTenant(names.Tenant))
	default:
		s, isString := ten.(string)
		switch {
		case !isString:
			reasons = append(reasons, reasonTenantType(names.Tenant))
		case ValidTenant(s) != nil:
			reasons = append(reasons, reasonTenantInvalid)
		default:
			p.Tenant = s
		}
	}

	var raw []string
	if names.Scope == "" {
		if sc, ok := claims["scope"]; ok && sc != nil {
			if s, isString := sc.(string); isString {
				raw = append(raw, strings.Fields(s)...)
			} else {
				reasons = append(reasons, reasonScopeType)
			}
		}
		if scp, ok := claims["scp"]; ok && scp != nil {
			list, ok := stringList(scp)
			if ok {
				raw = append(raw, list...)
			} else {
				reasons = append(reasons, reasonScpType)
			}
		}
	} else if sc, ok := claims[names.Scope]; ok && sc != nil {
		if s, isString := sc.(string); isString {
			raw = append(raw, strings.Fields(s)...)
		} else if list, ok := stringList(sc); ok {
			raw = append(raw, list...)
		} else {
			reasons = append(reasons, reasonScopeClaimType(names.Scope))
		}
	}
	if len(reasons) > 0 {
		return Principal{}, invalid(nil, reasons...)
	}
	p.Scopes = canonicalScopes(raw)
	if err := p.Valid(); err != nil { // unreachable: checked above
		return Principal{}, invalid(nil, reasonClaimsInvalid)
	}
	return p, nil
}

// stringList accepts a JSON array whose items are all strings.
func stringList(v any) ([]string, bool) {
	switch list := v.(type) {
	case []string:
		return list, true
	case []any:
		out := make([]string, 0, len(list))
		for _, item := range list {
			s, ok := item.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// Person is what a verified token may say of the person behind its principal beyond tenant
// and subject, for the record of a decision: every field optional (zero when the token has no
// usable value). Only identity providers put them in access tokens (name, email: OIDC
// standard claims; auth_time, amr, acr: OIDC Core §2), so most bearer tokens carry none.
type Person struct {
	Name     string
	Email    string
	AuthTime time.Time // second precision
	AMR      []string
	ACR      string
}

// Limits of PersonFromClaims: a value over them is dropped, not cut, so the record never
// holds half a name. They keep the frontend's resume seal, which carries them, within its
// bound (frontend/handle.MaxResumeLen) whatever a token holds.
const (
	MaxPersonFieldLen = 256 // bytes of name, email and acr
	MaxPersonAMRLen   = 32  // bytes of each amr value (RFC 8176 values are a few letters)
	MaxPersonAMR      = 8   // amr values
)

// PersonFromClaims reads Person from verified claims. It never fails: a claim of the wrong
// type, not printable UTF-8 or over the limits is left out, and so is an email whose
// email_verified claim is present but not true (these claims describe, they do
// not authorize, so a token is not refused for them).
func PersonFromClaims(claims map[string]any) Person {
	var p Person
	p.Name = personString(claims["name"], MaxPersonFieldLen)
	// An e-mail the provider says it has not verified is anyone's typing: a decision record must
	// not name it as the approver's. Absent email_verified keeps it (many providers never send
	// the claim for addresses they manage); false, as a boolean or the string some send, drops it.
	if v, ok := claims["email_verified"]; !ok || v == true || v == "true" {
		p.Email = personString(claims["email"], MaxPersonFieldLen)
	}
	p.ACR = personString(claims["acr"], MaxPersonFieldLen)
	var f float64
	switch v := claims["auth_time"].(type) {
	case float64:
		f = v
	case json.Number: // a parser decoding with UseNumber
		f, _ = v.Float64()
	}
	if f >= 1 && f < 1<<35 { // seconds since 1970, before the year 3058; NaN fails too
		p.AuthTime = time.Unix(int64(f), 0).UTC()
	}
	if list, ok := stringList(claims["amr"]); ok && len(list) <= MaxPersonAMR {
		for _, a := range list {
			if personString(a, MaxPersonAMRLen) == "" {
				return Person{Name: p.Name, Email: p.Email, AuthTime: p.AuthTime, ACR: p.ACR}
			}
		}
		if len(list) > 0 {
			p.AMR = slices.Clone(list) // never share the claims' slice
		}
	}
	return p
}

// personString is v if it is a printable UTF-8 string of 1 to max bytes, else "".
func personString(v any, max int) string {
	s, ok := v.(string)
	if !ok || len(s) > max || !Printable(s) {
		return ""
	}
	return s
}
