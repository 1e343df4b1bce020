package authz

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MintTTLDefault is the lifetime of a minted token unless configured otherwise.
const MintTTLDefault = time.Hour

// MintOptions describe a dev token for [MintHS256].
type MintOptions struct {
	// Issuer becomes iss. Required; no default.
	Issuer string
	// Audience becomes aud (a single string): the server's resource URI.
	// Required; no default.
	Audience string
	// Tenant becomes the tenant claim; must pass ValidTenant. Required; no default.
	Tenant string
	// Subject becomes sub; must pass ValidSubject. Required; no default.
	Subject string
	// Scopes become the space-separated scope claim, deduplicated and in
	// AllScopes order; an unknown scope is an error. Defaults to none (no
	// scope claim).
	Scopes []Scope
	// TTL is the token's lifetime: exp = iat + TTL. Negative is refused.
	// Defaults to 1 hour (MintTTLDefault).
	TTL time.Duration
	// TenantClaim names the claim carrying Tenant; it must match the
	// verifier's. Defaults to "tenant" (TenantClaimDefault).
	TenantClaim string
	// Now tells the time (iat), for tests. Defaults to time.Now.
	Now func() time.Time
}

// MintHS256 returns an HS256-signed JWT carrying iss, aud, sub, the tenant
// claim, scope (when any), iat and exp, that a verifier from
// [NewHS256Verifier] with the same secret, issuer, audience and tenant claim
// accepts. secret must be at least 32 bytes. It is for `jobgate token`,
// `jobgate dev` and tests, not a production issuer.
func MintHS256(secret []byte, opts MintOptions) (string, error) {
	if len(secret) < MinHS256SecretBytes {
		return "", fmt.Errorf("authz: HS256 secret must be at least %d bytes, got %d", MinHS256SecretBytes, len(secret))
	}
	if opts.Issuer == "" {
		return "", errors.New("authz: MintOptions.Issuer is required")
	}
	if opts.Audience == "" {
		return "", errors.New("authz: MintOptions.Audience is required")
	}
	if err := ValidTenant(opts.Tenant); err != nil {
		return "", fmt.Errorf("authz: MintOptions.Tenant: %w", err)
	}
	if err := ValidSubject(opts.Subject); err != nil {
		return "", fmt.Errorf("authz: MintOptions.Subject: %w", err)
	}
	var seen [4]bool
	for _, s := range opts.Scopes {
		i := scopeIndex(s)
		if i < 0 {
			return "", fmt.Errorf("authz: MintOptions.Scopes: unknown scope %q", string(s))
		}
		seen[i] = true
	}
	scopes := collect(seen)
	switch {
	case opts.TTL == 0:
		opts.TTL = MintTTLDefault
	case opts.TTL < 0:
		return "", fmt.Errorf("authz: MintOptions.TTL %v is negative", opts.TTL)
	}
	if opts.TenantClaim == "" {
		opts.TenantClaim = TenantClaimDefault
	}
	if err := checkTenantClaim(opts.TenantClaim); err != nil {
		return "", fmt.Errorf("authz: MintOptions.TenantClaim: %w", err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}

	now := opts.Now()
	claims := jwt.MapClaims{
		"iss":            opts.Issuer,
		"aud":            opts.Audience,
		"sub":            opts.Subject,
		opts.TenantClaim: opts.Tenant,
		"iat":            jwt.NewNumericDate(now),
		"exp":            jwt.NewNumericDate(now.Add(opts.TTL)),
	}
	if len(scopes) > 0 {
		claims["scope"] = joinScopes(scopes)
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("authz: signing token: %w", err)
	}
	return signed, nil
}
