package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// JWKSAlgorithms returns the allow-list of a [JWKSVerifier]: public-key
// algorithms only, never HS* and never "none".
func JWKSAlgorithms() []string { return append([]string(nil), jwksAlgs[:]...) }

var jwksAlgs = [...]string{"RS256", "ES256", "EdDSA"}

// Defaults and limits of [JWKSOptions].
const (
	// JWKSRefreshIntervalDefault is how often the key set is re-fetched in the
	// background unless configured otherwise.
	JWKSRefreshIntervalDefault = time.Hour
	// JWKSUnknownKIDIntervalDefault is the least time between two re-fetches
	// caused by tokens naming an unknown kid, unless configured otherwise.
	JWKSUnknownKIDIntervalDefault = 5 * time.Minute
	// JWKSHTTPTimeoutDefault bounds one fetch of the key set unless configured otherwise.
	JWKSHTTPTimeoutDefault = 10 * time.Second
	// MaxJWKSBytes is the largest key set document read; a longer one fails the fetch.
	MaxJWKSBytes = 1 << 20
	// MinRSABits is the smallest RSA modulus a JWKSVerifier accepts for RS256.
	MinRSABits = 2048
)

// JWKSOptions configure a [JWKSVerifier] (see [NewJWKSVerifier]).
type JWKSOptions struct {
	// URL is the identity provider's JWK Set (jwks_uri): https, or http to a loopback
	// address (localhost, 127.0.0.0/8, ::1) only.
	// Required; no default.
	URL string
	// Issuer is the exact iss every token must carry. Required; no default.
	Issuer string
	// Audience is this server's resource URI; a token's aud must contain it.
	// Required; no default.
	Audience string
	// TenantClaim names the string claim holding the tenant, as in
	// [JWTOptions]. Defaults to "tenant" (TenantClaimDefault).
	TenantClaim string
	// ScopeClaim names the one claim holding the scopes, as in
	// [JWTOptions]. Defaults to "" ("scope" string merged with "scp" array).
	ScopeClaim string
	// Leeway is the clock skew tolerated on exp, nbf and iat, as in
	// [JWTOptions]. Defaults to 30s (LeewayDefault).
	Leeway time.Duration
	// Now tells the time, for tests. Defaults to time.Now.
	Now func() time.Time
	// RefreshInterval is how often the key set is re-fetched in the
	// background; a failed re-fetch keeps the keys already held. Negative is
	// refused. Defaults to 1 hour (JWKSRefreshIntervalDefault).
	RefreshInterval time.Duration
	// UnknownKIDInterval rate-limits re-fetches caused by a token whose kid
	// is not in the held set: the first such token re-fetches at once, later
	// ones within this interval are refused without a fetch. It must be at
	// least HTTPTimeout (a token may otherwise wait for the limiter).
	// Defaults to 5 minutes (JWKSUnknownKIDIntervalDefault).
	UnknownKIDInterval time.Duration
	// HTTPTimeout bounds one fetch. Negative is refused.
	// Defaults to 10s (JWKSHTTPTimeoutDefault).
	HTTPTimeout time.Duration
	// HTTPClient fetches the key set; its Transport is wrapped to cap the
	// document at MaxJWKSBytes. Defaults to one using http.DefaultTransport.
	HTTPClient *http.Client
	// RefreshError, if set, is told about every failed re-fetch after
	// start-up (the held keys stay in use). The error never contains a token.
	RefreshError func(url string, err error)
}

// JWKSVerifier verifies JWT bearer tokens signed with RS256, ES256 or EdDSA
// by keys from an identity provider's JWK Set, fetched with keyfunc/v3. It
// applies exactly the claim checks of [JWTVerifier] and additionally refuses
// a key whose type (or JWK alg, when the set gives one) does not fit the
// token's alg, an RSA key under 2048 bits, and a key marked for anything but
// signatures. Safe for concurrent use.
type JWKSVerifier struct {
	jwt    *JWTVerifier
	kf     keyfunc.Keyfunc
	cancel context.CancelFunc
}

var _ Verifier = (*JWKSVerifier)(nil)

// NewJWKSVerifier validates opts, fetches the key set once and returns a
// verifier that keeps it fresh in the background until ctx ends or Close is
// called. An unreachable or unusable key set at start-up is an error naming
// the URL; later outages keep the keys last fetched.
func NewJWKSVerifier(ctx context.Context, opts JWKSOptions) (*JWKSVerifier, error) {
	u, err := url.Parse(opts.URL)
	switch {
	case opts.URL == "":
		return nil, errors.New("authz: JWKSOptions.URL is required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return nil, fmt.Errorf("authz: JWKSOptions.URL %q is not an http(s) URL", opts.URL)
	case u.Scheme == "http" && !LoopbackHost(u.Hostname()):
		// The key set decides who anyone is: over plain http, whoever is on the path can
		// substitute keys and mint any principal.
		return nil, fmt.Errorf("authz: JWKSOptions.URL %q must be https (plain http only to a loopback address)", opts.URL)
	}
	switch {
	case opts.RefreshInterval == 0:
		opts.RefreshInterval = JWKSRefreshIntervalDefault
	case opts.RefreshInterval < 0:
		return nil, fmt.Errorf("authz: JWKSOptions.RefreshInterval %v is negative", opts.RefreshInterval)
	}
	switch {
	case opts.HTTPTimeout == 0:
		opts.HTTPTimeout = JWKSHTTPTimeoutDefault
	case opts.HTTPTimeout < 0:
		return nil, fmt.Errorf("authz: JWKSOptions.HTTPTimeout %v is negative", opts.HTTPTimeout)
	}
	if opts.UnknownKIDInterval == 0 {
		opts.UnknownKIDInterval = JWKSUnknownKIDIntervalDefault
	}
	if opts.UnknownKIDInterval < opts.HTTPTimeout {
		return nil, fmt.Errorf("authz: JWKSOptions.UnknownKIDInterval %v is shorter than HTTPTimeout %v", opts.UnknownKIDInterval, opts.HTTPTimeout)
	}
	if ctx == nil {
		ctx = context.Background()
	}

	client := &http.Client{}
	if opts.HTTPClient != nil {
		c := *opts.HTTPClient
		client = &c
	}
	base := client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	client.Transport = capTransport{base: base, max: MaxJWKSBytes}

	// The claim checks are JWTVerifier's; build it first so bad options fail
	// before any fetch.
	v := &JWKSVerifier{}
	jv, err := NewJWTVerifier(JWTOptions{
		Issuer:         opts.Issuer,
		Audience:       opts.Audience,
		TenantClaim:    opts.TenantClaim,
		ScopeClaim:     opts.ScopeClaim,
		Methods:        JWKSAlgorithms(),
		KeyfuncContext: v.key,
		Leeway:         opts.Leeway,
		Now:            opts.Now,
	})
	if err != nil {
		return nil, err
	}
	v.jwt = jv

	ctx, cancel := context.WithCancel(ctx)
	noStartErr := false
	refreshErr := func(string) func(context.Context, error) { return func(context.Context, error) {} }
	if opts.RefreshError != nil {
		refreshErr = func(u string) func(context.Context, error) {
			return func(_ context.Context, err error) { opts.RefreshError(u, err) }
		}
	}
	base0, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{opts.URL}, keyfunc.Override{
		Client:                    client,
		HTTPTimeout:               opts.HTTPTimeout,
		NoErrorReturnFirstHTTPReq: &noStartErr,
		// Bounds the limiter wait and the fetch it allows; a wait longer than
		// this (the limiter is empty) fails at once instead of blocking.
		RateLimitWaitMax:        opts.HTTPTimeout,
		RefreshErrorHandlerFunc: refreshErr,
		RefreshInterval:         opts.RefreshInterval,
		RefreshUnknownKID:       rate.NewLimiter(rate.Every(opts.UnknownKIDInterval), 1),
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("authz: cannot fetch the JWK Set at %s at start-up: %s", opts.URL, oneLine(err))
	}
	// Same storage, but keys whose "use" says anything other than sig are skipped.
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: base0.Storage(), UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("authz: JWK Set at %s: %s", opts.URL, oneLine(err))
	}
	v.kf, v.cancel = kf, cancel
	if n, err := v.usableKeys(ctx); err != nil || n == 0 {
		cancel()
		return nil, fmt.Errorf("authz: the JWK Set at %s holds no usable %s signing key", opts.URL, strings.Join(jwksAlgs[:], "/"))
	}
	return v, nil
}

// Verify checks token exactly like [JWTVerifier.Verify], with the key taken
// from the JWK Set by the token's kid (or, without a kid, every held key that
// fits its alg). An unknown kid re-fetches the set at most once per
// UnknownKIDInterval, bounded by ctx and HTTPTimeout.
func (v *JWKSVerifier) Verify(ctx context.Context, token string) (Claims, error) {
	if v == nil || v.jwt == nil {
		return Claims{}, invalid(nil, reasonNilVerifier)
	}
	return v.jwt.Verify(ctx, token)
}

// Close stops the background refresh. Verify keeps working on the keys held.
func (v *JWKSVerifier) Close() error {
	if v != nil && v.cancel != nil {
		v.cancel()
	}
	return nil
}

var (
	errKeyMismatch = errors.New("authz: JWK does not fit the token's alg")
	errNoKey       = errors.New("authz: no JWK fits the token's alg")
)

// key is the KeyfuncContext: keyfunc/v3 finds the JWK (by kid, refreshing on
// an unknown one, and checking the JWK's own alg against the token's), then
// the key type is checked against the token's alg.
func (v *JWKSVerifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	if v.kf == nil {
		return nil, errNoKey
	}
	k, err := v.kf.KeyfuncCtx(ctx)(t)
	if err != nil {
		return nil, err
	}
	switch k := k.(type) {
	case jwt.VerificationKeySet: // no kid: every held key keyfunc found for the alg
		var fit jwt.VerificationKeySet
		for _, key := range k.Keys {
			if keyFits(t.Method, key) {
				fit.Keys = append(fit.Keys, key)
			}
		}
		if len(fit.Keys) == 0 {
			return nil, errNoKey
		}
		return fit, nil
	default:
		if !keyFits(t.Method, k) {
			return nil, errKeyMismatch
		}
		return k, nil
	}
}

// keyFits reports whether key is a public key of the type and size alg m
// needs (the kty check against alg confusion).
func keyFits(m jwt.SigningMethod, key any) bool {
	if m == nil {
		return false
	}
	switch m.Alg() {
	case "RS256":
		k, ok := key.(*rsa.PublicKey)
		return ok && k != nil && k.N != nil && k.N.BitLen() >= MinRSABits
	case "ES256":
		k, ok := key.(*ecdsa.PublicKey)
		return ok && k != nil && k.Curve == elliptic.P256()
	case "EdDSA":
		k, ok := key.(ed25519.PublicKey)
		return ok && len(k) == ed25519.PublicKeySize
	}
	return false
}

// usableKeys counts held keys that fit one of the allowed algorithms.
func (v *JWKSVerifier) usableKeys(ctx context.Context) (int, error) {
	set, err := v.kf.VerificationKeySet(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, key := range set.Keys {
		for _, alg := range jwksAlgs {
			if keyFits(jwt.GetSigningMethod(alg), key) {
				n++
				break
			}
		}
	}
	return n, nil
}

// MaxMetadataBytes bounds an identity provider's metadata document; real ones are a few KiB.
const MaxMetadataBytes = 1 << 20

// FetchMetadata GETs an identity provider's metadata document (OpenID Connect Discovery or RFC
// 8414) at u with hc: the body of a 200 answer, at most MaxMetadataBytes. An error is one line
// and does not repeat u, which the caller names. serve's issuer discovery and the dev Web UI's
// provider check read discovery documents with it.
func FetchMetadata(ctx context.Context, hc *http.Client, u string) ([]byte, error) {
	flat := func(err error) error { return errors.New(strings.Join(strings.Fields(err.Error()), " ")) }
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is already named by the caller
		}
		return nil, flat(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxMetadataBytes+1))
	if err != nil {
		return nil, flat(err)
	}
	if len(b) > MaxMetadataBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxMetadataBytes)
	}
	return b, nil
}

// LoopbackHost reports whether host (a URL's Hostname(), no brackets) is "localhost" or a
// loopback IP literal (127.0.0.0/8, ::1, IPv4-mapped too; no zone), without a lookup, so the
// DNS name 127.evil.example is not one: the one place plain http is allowed for a URL that
// decides trust or carries credentials (--jwks-url here, serve's --issuer discovery, the
// pages' issuer and public URL, the CLI's login metadata, the dev IdP's issuer and redirect
// URIs), since nothing leaves the machine.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}

// LoopbackPeer reports whether remoteAddr (an http.Request's RemoteAddr, "ip:port": the TCP
// peer, which no header sets) is a loopback address, IPv4-mapped included; anything
// unparseable is not. The dev identity provider and the dev codec server's operator serve only
// such peers.
func LoopbackPeer(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// capTransport makes a response body fail once it exceeds max bytes.
type capTransport struct {
	base http.RoundTripper
	max  int64
}

func (c capTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err != nil || resp == nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &cappedBody{ReadCloser: resp.Body, left: c.max}
	return resp, nil
}

var errJWKSTooLarge = fmt.Errorf("JWK Set document longer than %d bytes", MaxJWKSBytes)

type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errJWKSTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errJWKSTooLarge
	}
	return n, err
}
