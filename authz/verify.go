package authz

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims is what a [Verifier] proves about a bearer token.
type Claims struct {
	// Principal is the verified caller. It always passes [Principal.Valid]
	// and holds only known scopes, in [AllScopes] order.
	Principal Principal
	// Expiry is the token's exp claim.
	Expiry time.Time
	// Issuer is the token's iss claim (equal to the verifier's issuer), so
	// a record of who acted can say which identity provider vouched.
	Issuer string
	// Person is what the token says of the person (name, email, auth_time, amr, acr), when
	// it does (PersonFromClaims); it goes to decision records, never to authorization.
	Person Person
}

// Verifier checks a bearer token (without the "Bearer " prefix).
//
// Every failure wraps [ErrInvalidToken]. The message gives the reason
// (expired, bad signature, wrong audience, ...) and never contains the token
// or any value taken from it.
type Verifier interface {
	Verify(ctx context.Context, token string) (Claims, error)
}

// ErrInvalidToken is wrapped by every error a [Verifier] returns. The HTTP
// layer answers it with 401.
var ErrInvalidToken = errors.New("invalid token")

// Defaults and limits of [JWTOptions].
const (
	// TenantClaimDefault is the claim carrying the tenant unless configured otherwise.
	TenantClaimDefault = "tenant"
	// LeewayDefault is the clock skew allowed on exp, nbf and iat unless configured otherwise.
	LeewayDefault = 30 * time.Second
	// MaxLeeway is the largest Leeway NewJWTVerifier accepts.
	MaxLeeway = 5 * time.Minute
	// MaxTokenBytes is the longest token Verify will parse; longer ones are
	// rejected before any decoding.
	MaxTokenBytes = 8 << 10
)

// JWTOptions configure a [JWTVerifier] (see [NewJWTVerifier]).
type JWTOptions struct {
	// Issuer is the exact iss every token must carry. Required; no default.
	Issuer string
	// Audience is this server's resource URI; a token's aud (a string or an
	// array of strings) must contain it. Required; no default.
	Audience string
	// TenantClaim names the string claim holding the tenant. It may not be a
	// registered claim (iss, sub, aud, exp, nbf, iat, jti) or scope/scp.
	// Defaults to "tenant" (TenantClaimDefault).
	TenantClaim string
	// ScopeClaim names the one claim holding the scopes, a space-separated
	// string or an array of strings (see [ClaimNames]). It may not be a
	// registered claim or the tenant claim. Empty means "scope" (a string)
	// merged with "scp" (an array).
	// Defaults to "" (ScopeClaimDefault).
	ScopeClaim string
	// Methods is the allow-list of JWS algorithms ("HS256", "RS256", "ES256",
	// "EdDSA", ...); a token whose header names any other is rejected before
	// its key is looked up. "none" and unregistered names are refused, and so
	// is mixing HMAC (HS*) with public-key algorithms in one verifier.
	// Required; no default.
	Methods []string
	// Keyfunc resolves the verification key for a token whose alg is allowed
	// (an HS256 secret now; a JWKS-backed keyfunc later). Its error text is
	// never shown in Verify's message but is wrapped for errors.Is.
	// Required unless KeyfuncContext is given; no default.
	Keyfunc jwt.Keyfunc
	// KeyfuncContext is Keyfunc with Verify's context, for a keyfunc that
	// may do I/O (a JWKS refresh; see [NewJWKSVerifier]). Give exactly one
	// of Keyfunc and KeyfuncContext.
	KeyfuncContext func(ctx context.Context, t *jwt.Token) (any, error)
	// Leeway is the clock skew tolerated on exp, nbf and iat; 0 means the
	// default, negative or above MaxLeeway (5m) is refused.
	// Defaults to 30s (LeewayDefault).
	Leeway time.Duration
	// Now tells the time, for tests. Defaults to time.Now.
	Now func() time.Time
}

// JWTVerifier verifies JWT bearer tokens (RFC 7519, RFC 9068 style). It is
// safe for concurrent use. Build it with [NewJWTVerifier] or [NewHS256Verifier].
type JWTVerifier struct {
	issuer      string
	tenantClaim string
	scopeClaim  string
	keyfunc     func(context.Context, *jwt.Token) (any, error)
	parser      *jwt.Parser
	now         func() time.Time
}

var _ Verifier = (*JWTVerifier)(nil)

// NewJWTVerifier validates opts, applies defaults and returns a verifier. An
// error names the offending field.
func NewJWTVerifier(opts JWTOptions) (*JWTVerifier, error) {
	if opts.Issuer == "" {
		return nil, errors.New("authz: JWTOptions.Issuer is required")
	}
	if opts.Audience == "" {
		return nil, errors.New("authz: JWTOptions.Audience is required")
	}
	names, err := ClaimNames{Tenant: opts.TenantClaim, Scope: opts.ScopeClaim}.withDefaults(
		"authz: JWTOptions.TenantClaim", "authz: JWTOptions.ScopeClaim")
	if err != nil {
		return nil, err
	}
	opts.TenantClaim = names.Tenant
	if err := checkMethods(opts.Methods); err != nil {
		return nil, fmt.Errorf("authz: JWTOptions.Methods: %w", err)
	}
	keyfunc := opts.KeyfuncContext
	switch {
	case opts.Keyfunc != nil && keyfunc != nil:
		return nil, errors.New("authz: JWTOptions.Keyfunc and KeyfuncContext are exclusive")
	case opts.Keyfunc != nil:
		kf := opts.Keyfunc
		keyfunc = func(_ context.Context, t *jwt.Token) (any, error) { return kf(t) }
	case keyfunc == nil:
		return nil, errors.New("authz: JWTOptions.Keyfunc is required")
	}
	switch {
	case opts.Leeway == 0:
		opts.Leeway = LeewayDefault
	case opts.Leeway < 0 || opts.Leeway > MaxLeeway:
		return nil, fmt.Errorf("authz: JWTOptions.Leeway %v is out of range (0, %v]", opts.Leeway, MaxLeeway)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	methods := append([]string(nil), opts.Methods...)
	return &JWTVerifier{
		issuer:      opts.Issuer,
		tenantClaim: opts.TenantClaim,
		scopeClaim:  opts.ScopeClaim,
		keyfunc:     keyfunc,
		now:         opts.Now,
		parser: jwt.NewParser(
			jwt.WithValidMethods(methods),
			jwt.WithIssuer(opts.Issuer),
			jwt.WithAudience(opts.Audience),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(opts.Leeway),
			jwt.WithTimeFunc(opts.Now),
			jwt.WithStrictDecoding(),
		),
	}, nil
}

// MinHS256SecretBytes is the shortest HS256 secret accepted (RFC 7518 §3.2).
const MinHS256SecretBytes = 32

// NewHS256Verifier returns a verifier for HS256 tokens signed with secret
// (at least 32 bytes; it is copied). An empty tenantClaim means "tenant".
// Leeway and clock take their defaults. Meant for dev stacks and tests;
// production uses public-key algorithms with a JWKS keyfunc via NewJWTVerifier.
func NewHS256Verifier(issuer, audience string, secret []byte, tenantClaim string) (*JWTVerifier, error) {
	if len(secret) < MinHS256SecretBytes {
		return nil, fmt.Errorf("authz: HS256 secret must be at least %d bytes, got %d", MinHS256SecretBytes, len(secret))
	}
	key := append([]byte(nil), secret...)
	return NewJWTVerifier(JWTOptions{
		Issuer:      issuer,
		Audience:    audience,
		TenantClaim: tenantClaim,
		Methods:     []string{jwt.SigningMethodHS256.Alg()},
		Keyfunc: func(t *jwt.Token) (any, error) {
			// The parser already enforced the allow-list; this is a second lock.
			if t.Method != jwt.SigningMethodHS256 {
				return nil, errors.New("unexpected signing method")
			}
			return key, nil
		},
	})
}

// Reasons shown in Verify errors. Each is fixed text or built only from
// configuration, never from the token.
const (
	reasonEmpty         = "empty token"
	reasonTooLarge      = "token longer than 8192 bytes"
	reasonMalformed     = "malformed token"
	reasonUnknownAlg    = "unknown or missing signing algorithm"
	reasonAlgNotAllowed = "signing algorithm not allowed"
	reasonKeyLookup     = "signing key lookup failed"
	reasonSignature     = "signature verification failed"
	reasonMissingExp    = "missing exp claim"
	reasonMissingIss    = "missing iss claim"
	reasonMissingAud    = "missing aud claim"
	reasonMissingClaim  = "missing required claim"
	reasonClaimType     = "exp, nbf, iat, iss or aud claim has the wrong type"
	reasonExpired       = "token expired"
	reasonNotYetValid   = "token not valid yet (nbf)"
	reasonIssuedFuture  = "token issued in the future (iat)"
	reasonIssuer        = "wrong issuer"
	reasonAudience      = "audience does not include this server"
	reasonClaimsInvalid = "invalid claims"
	reasonMissingSub    = "missing sub claim"
	reasonSubType       = "sub claim is not a string"
	reasonSubInvalid    = "sub claim: subject must be 1-256 printable UTF-8 characters"
	reasonTenantInvalid = "tenant claim: tenant must be 1-63 characters of [a-z0-9_-], starting with a letter or digit"
	reasonScopeType     = "scope claim is not a space-separated string"
	reasonScpType       = "scp claim is not an array of strings"
	reasonNilVerifier   = "verifier not configured"
	reasonTyp           = "typ header is not JWT or at+jwt"
	reasonIDToken       = "an ID token is not an access token"
)

func reasonMissingTenant(claim string) string { return fmt.Sprintf("missing %q (tenant) claim", claim) }
func reasonTenantType(claim string) string {
	return fmt.Sprintf("%q (tenant) claim is not a string", claim)
}

// tokenError is a Verify failure. Error shows only the reasons; Unwrap exposes
// ErrInvalidToken and the underlying causes (jwt sentinels, keyfunc errors)
// for errors.Is, whose own texts may quote token content and so are not shown.
type tokenError struct {
	reasons []string
	causes  []error
}

func (e *tokenError) Error() string {
	return ErrInvalidToken.Error() + ": " + strings.Join(e.reasons, "; ")
}

func (e *tokenError) Unwrap() []error {
	return append([]error{ErrInvalidToken}, e.causes...)
}

func invalid(cause error, reasons ...string) error {
	e := &tokenError{reasons: reasons}
	if cause != nil {
		e.causes = []error{cause}
	}
	return e
}

// typAllowed: the JOSE header has no typ, or a typ naming a JWT (RFC 7519 §5.1) or an OAuth
// access token (RFC 9068 §2.1), compared case-insensitively with the optional "application/"
// prefix (RFC 7515 §4.1.9). Any other typ (an ID token's "id_token+jwt"? a logout token's
// "logout+jwt", a JWS of another kind) is a token made for another purpose with the same keys.
func typAllowed(h map[string]any) bool {
	raw, ok := h["typ"]
	if !ok {
		return true
	}
	typ, ok := raw.(string)
	if !ok {
		return false
	}
	if len(typ) > len("application/") && strings.EqualFold(typ[:len("application/")], "application/") {
		typ = typ[len("application/"):]
	}
	return strings.EqualFold(typ, "JWT") || strings.EqualFold(typ, "at+jwt")
}

// Verify checks token and returns the principal it proves. ctx is only
// handed to a KeyfuncContext; this verifier does no I/O of its own (a
// keyfunc may).
//
// It checks, in order: length (at most MaxTokenBytes), structure, the alg
// allow-list, the signature, the typ header (absent, JWT or at+jwt), exp (required), nbf and iat (optional) with
// leeway, iss (exact), aud (must contain the configured audience), sub
// (required string, ValidSubject), the tenant claim (required string,
// ValidTenant), then the scope claim(s) (see [ClaimNames]; optional).
// Unknown scopes are dropped. A token with nonce, at_hash or c_hash is an
// ID token and is refused. Claims are read by [PrincipalFromClaims].
func (v *JWTVerifier) Verify(ctx context.Context, token string) (Claims, error) {
	if v == nil || v.parser == nil {
		return Claims{}, invalid(nil, reasonNilVerifier)
	}
	if token == "" {
		return Claims{}, invalid(nil, reasonEmpty)
	}
	if len(token) > MaxTokenBytes {
		return Claims{}, invalid(nil, reasonTooLarge)
	}

	keyfuncCalled := false
	mc := jwt.MapClaims{}
	tok, err := v.parser.ParseWithClaims(token, mc, func(t *jwt.Token) (any, error) {
		keyfuncCalled = true
		if ctx == nil {
			ctx = context.Background()
		}
		return v.keyfunc(ctx, t)
	})
	if err != nil {
		return Claims{}, classify(err, mc, keyfuncCalled)
	}
	if !typAllowed(tok.Header) {
		return Claims{}, invalid(nil, reasonTyp)
	}

	if idTokenShaped(mc) {
		return Claims{}, invalid(nil, reasonIDToken)
	}
	p, err := PrincipalFromClaims(mc, ClaimNames{Tenant: v.tenantClaim, Scope: v.scopeClaim})
	if err != nil {
		return Claims{}, err
	}

	exp, err := mc.GetExpirationTime()
	if err != nil || exp == nil { // unreachable: the parser required and checked exp
		return Claims{}, invalid(err, reasonMissingExp)
	}
	iss, _ := mc.GetIssuer() // the parser checked it equals the configured issuer
	return Claims{Principal: p, Expiry: exp.Time, Issuer: iss, Person: PersonFromClaims(mc)}, nil
}

// idTokenShaped: the claims hold nonce, at_hash or c_hash, which only OIDC
// ID tokens carry (OIDC Core §2, §3.1.3.6, §3.3.2.11). An IdP may sign ID
// tokens with the access tokens' key and, like zitadel's OP, put the resource
// in their aud and typ JWT, so without this check a client's ID token would
// pass as a bearer: the confusion RFC 9068 §2.1 and §4 guard against with
// typ at+jwt, which many IdPs do not set.
func idTokenShaped(mc jwt.MapClaims) bool {
	for _, c := range [...]string{"nonce", "at_hash", "c_hash"} {
		if _, ok := mc[c]; ok {
			return true
		}
	}
	return false
}

// classify turns a jwt parse error into a tokenError with fixed reasons.
func classify(err error, mc jwt.MapClaims, keyfuncCalled bool) error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return invalid(err, reasonMalformed)
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		if keyfuncCalled {
			return invalid(err, reasonKeyLookup)
		}
		return invalid(err, reasonUnknownAlg)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if keyfuncCalled {
			return invalid(err, reasonSignature)
		}
		return invalid(err, reasonAlgNotAllowed)
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		var reasons []string
		if errors.Is(err, jwt.ErrTokenRequiredClaimMissing) {
			n := len(reasons)
			if exp, e := mc.GetExpirationTime(); e == nil && exp == nil {
				reasons = append(reasons, reasonMissingExp)
			}
			if iss, e := mc.GetIssuer(); e == nil && iss == "" {
				reasons = append(reasons, reasonMissingIss)
			}
			if aud, e := mc.GetAudience(); e == nil && (len(aud) == 0 || len(aud) == 1 && aud[0] == "") {
				reasons = append(reasons, reasonMissingAud)
			}
			if len(reasons) == n {
				reasons = append(reasons, reasonMissingClaim)
			}
		}
		for _, c := range []struct {
			target error
			reason string
		}{
			{jwt.ErrInvalidType, reasonClaimType},
			{jwt.ErrTokenExpired, reasonExpired},
			{jwt.ErrTokenNotValidYet, reasonNotYetValid},
			{jwt.ErrTokenUsedBeforeIssued, reasonIssuedFuture},
			{jwt.ErrTokenInvalidIssuer, reasonIssuer},
			{jwt.ErrTokenInvalidAudience, reasonAudience},
		} {
			if errors.Is(err, c.target) {
				reasons = append(reasons, c.reason)
			}
		}
		if len(reasons) == 0 {
			reasons = append(reasons, reasonClaimsInvalid)
		}
		return invalid(err, reasons...)
	}
	return invalid(err, reasonMalformed)
}

// checkTenantClaim refuses names that would collide with claims Verify reads
// for other purposes.
func checkTenantClaim(name string) error {
	if name == "scope" || name == "scp" {
		return fmt.Errorf("%q is a reserved claim name", name)
	}
	return checkClaimName(name)
}

func checkMethods(methods []string) error {
	if len(methods) == 0 {
		return errors.New("at least one algorithm is required")
	}
	var hmac, public bool
	for _, m := range methods {
		if strings.EqualFold(m, "none") {
			return errors.New(`"none" is never allowed`)
		}
		sm := jwt.GetSigningMethod(m)
		if sm == nil {
			return fmt.Errorf("unknown algorithm %q", m)
		}
		if _, ok := sm.(*jwt.SigningMethodHMAC); ok {
			hmac = true
		} else {
			public = true
		}
	}
	if hmac && public {
		return errors.New("HMAC and public-key algorithms may not be mixed in one verifier")
	}
	return nil
}

// ResourceMetadataURL is the RFC 9728 metadata URL of a resource URI: the well-known path
// inserted before the resource's path (https://h/mcp → https://h/.well-known/oauth-protected-resource/mcp).
// The frontend's and the codec server's 401 and 403 challenges name it; "" for a resource
// URI without a host.
func ResourceMetadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource" + strings.TrimRight(u.Path, "/")
}
