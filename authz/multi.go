package authz

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/golang-jwt/jwt/v5"
)

// IssuerVerifier is a [Verifier] for the tokens of exactly one issuer.
// [JWTVerifier] and [JWKSVerifier] are both.
type IssuerVerifier interface {
	Verifier
	// Issuer is the exact iss the verifier accepts.
	Issuer() string
}

// Issuer is the exact iss v accepts.
func (v *JWTVerifier) Issuer() string {
	if v == nil {
		return ""
	}
	return v.issuer
}

// Issuer is the exact iss v accepts.
func (v *JWKSVerifier) Issuer() string {
	if v == nil {
		return ""
	}
	return v.jwt.Issuer()
}

// MultiVerifier accepts the tokens of several issuers, each checked by its
// own verifier: it reads iss from the token without trusting it, picks the
// one verifier for that issuer and lets it do every check (its alg
// allow-list, its keys, the iss again). So `jobgate token` HS256 tokens keep
// working beside an identity provider's JWKS, which one [JWTVerifier] cannot
// do (HMAC and public-key algorithms are never mixed in one verifier), and a
// token naming issuer A is only ever checked against A's keys. Safe for
// concurrent use.
type MultiVerifier struct {
	byIssuer map[string]Verifier
	issuers  []string
}

var _ IssuerVerifier = (*JWTVerifier)(nil)
var _ IssuerVerifier = (*JWKSVerifier)(nil)
var _ Verifier = (*MultiVerifier)(nil)

// NewMultiVerifier returns a verifier that dispatches on iss to vs. Each
// must be non-nil with a non-empty issuer, and no two may share one.
func NewMultiVerifier(vs ...IssuerVerifier) (*MultiVerifier, error) {
	if len(vs) == 0 {
		return nil, errors.New("authz: NewMultiVerifier: at least one verifier is required")
	}
	m := &MultiVerifier{byIssuer: make(map[string]Verifier, len(vs))}
	for i, v := range vs {
		if v == nil {
			return nil, fmt.Errorf("authz: NewMultiVerifier: verifier %d is nil", i)
		}
		iss := v.Issuer()
		if iss == "" {
			return nil, fmt.Errorf("authz: NewMultiVerifier: verifier %d has no issuer", i)
		}
		if _, dup := m.byIssuer[iss]; dup {
			return nil, fmt.Errorf("authz: NewMultiVerifier: issuer %q is given twice", iss)
		}
		m.byIssuer[iss] = v
		m.issuers = append(m.issuers, iss)
	}
	sort.Strings(m.issuers)
	return m, nil
}

// Issuers lists the accepted issuers, sorted.
func (m *MultiVerifier) Issuers() []string {
	if m == nil {
		return nil
	}
	return append([]string(nil), m.issuers...)
}

// peekParser only decodes; it is never used to trust anything. Strict
// decoding matches the verifiers', so both read the same iss.
var peekParser = jwt.NewParser(jwt.WithStrictDecoding())

// Verify reads the token's iss unverified, then returns what the verifier of
// that issuer returns. An unknown issuer is "wrong issuer"; errors carry the
// fixed reasons of [JWTVerifier.Verify] and never the token.
func (m *MultiVerifier) Verify(ctx context.Context, token string) (Claims, error) {
	if m == nil || len(m.byIssuer) == 0 {
		return Claims{}, invalid(nil, reasonNilVerifier)
	}
	if token == "" {
		return Claims{}, invalid(nil, reasonEmpty)
	}
	if len(token) > MaxTokenBytes {
		return Claims{}, invalid(nil, reasonTooLarge)
	}
	mc := jwt.MapClaims{}
	// An unknown or missing alg is ErrTokenUnverifiable with the claims
	// decoded: dispatch anyway, so the answer is the chosen verifier's.
	if _, _, err := peekParser.ParseUnverified(token, mc); err != nil && !errors.Is(err, jwt.ErrTokenUnverifiable) {
		return Claims{}, invalid(err, reasonMalformed)
	}
	raw, ok := mc["iss"]
	if !ok || raw == nil || raw == "" {
		return Claims{}, invalid(nil, reasonMissingIss)
	}
	iss, ok := raw.(string)
	if !ok {
		return Claims{}, invalid(nil, reasonClaimType)
	}
	v, ok := m.byIssuer[iss]
	if !ok {
		return Claims{}, invalid(jwt.ErrTokenInvalidIssuer, reasonIssuer)
	}
	c, err := v.Verify(ctx, token)
	if err != nil {
		return Claims{}, err
	}
	// The chosen verifier checked iss itself; this guards a Verifier that
	// does not report it.
	switch c.Issuer {
	case iss:
	case "":
		c.Issuer = iss
	default:
		return Claims{}, invalid(jwt.ErrTokenInvalidIssuer, reasonIssuer)
	}
	return c, nil
}
