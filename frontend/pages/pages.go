package pages

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
)

// Defaults and limits of [Config].
const (
	// SessionTTLDefault is Config.SessionTTL's default: a working day.
	SessionTTLDefault = 8 * time.Hour
	// MaxSessionTTL is the longest Config.SessionTTL New accepts: a session is a sealed cookie
	// nobody can revoke, so its lifetime is what bounds a stolen one.
	MaxSessionTTL = 24 * time.Hour
	// HTTPTimeoutDefault bounds each call to the identity provider when Config.HTTPClient is nil.
	HTTPTimeoutDefault = 10 * time.Second
	// authTimeLeeway is the clock skew allowed when checking auth_time against max_age.
	authTimeLeeway = time.Minute
)

// Paths the handler serves (see Patterns).
const (
	PathLogin     = "/login"
	PathCallback  = "/auth/callback"
	PathLogout    = "/logout"
	PathMe        = "/me"
	PathSignedOut = "/auth/signed-out"
)

// DefaultScopes are requested when Config.Scopes is empty: OpenID with profile and e-mail (for
// the name shown), and every jobs:* scope, which identity providers that scope access tokens by
// request (Keycloak, Okta, Auth0) need before they put them in.
func DefaultScopes() []string {
	return append([]string{oidc.ScopeOpenID, "profile", "email"}, authz.ScopeStrings(authz.AllScopes())...)
}

// Config configures [New].
type Config struct {
	// Issuer is the identity provider's issuer URL, exactly as its discovery document and its
	// tokens spell it. Required.
	Issuer string
	// ClientID is this relying party's client at the provider. Required.
	ClientID string
	// ClientSecret authenticates a confidential client at the token endpoint. Empty (the
	// default) is a public client: PKCE alone, client_id in the token request.
	ClientSecret string
	// PublicURL is the external base URL of these pages (scheme and host, and a path prefix if
	// a proxy adds one); the redirect URI is PublicURL + "/auth/callback". https, or http for a
	// loopback host only. Required.
	PublicURL string
	// Resource, when set, is sent as the RFC 8707 resource indicator (the MCP resource URI), so
	// providers that issue audience-bound access tokens issue one the bearer verifier accepts.
	// Default none.
	Resource string
	// Scopes requested. Defaults to DefaultScopes(); "openid" is always added.
	Scopes []string
	// Claims name the tenant and scope claims (authz.PrincipalFromClaims). Defaults: tenant
	// claim "tenant", scopes from "scope" (string) and "scp" (array).
	Claims authz.ClaimNames
	// AccessVerifier, when set, verifies the access token (give it the MCP endpoint's bearer
	// verifier) to read tenant and scopes when the ID token lacks them. Its issuer must be
	// Issuer and its subject the ID token's. Default none: the ID token alone.
	AccessVerifier authz.Verifier
	// SessionTTL is how long a session lasts from sign-in. Defaults to SessionTTLDefault (8h);
	// at most MaxSessionTTL (24h). A session does not follow the ID token's exp: an ID token
	// proves one authentication, often valid for minutes only.
	SessionTTL time.Duration
	// Keys seal the cookies: the handle keyring every replica shares. Required.
	Keys *handle.Keyring
	// HTTPClient calls the provider (discovery, keys, token endpoint). Defaults to a client
	// with HTTPTimeoutDefault.
	HTTPClient *http.Client
	// Now tells the time (tests move it to test expiry and skew). Defaults to time.Now.
	Now func() time.Time
	// Logger gets the detail of every failure the pages only summarise. Defaults to a no-op.
	Logger *zap.Logger
}

// Pages is the relying party and its pages. Safe for concurrent use.
type Pages struct {
	cfg           Config
	base          string // PublicURL without a trailing slash
	redirectURL   string
	secure        bool
	sessionCookie string
	loginCookie   string
	handler       http.Handler

	mu       sync.Mutex
	disc     *discovered // memoised once discovery succeeded
	lastErr  error       // the last failed discovery, answered again for failureMemo
	lastFail time.Time
}

// failureMemo is how long a failed discovery is answered from memory, so that a provider that is
// down costs one request (and one timeout) per few seconds, not one per page view.
const failureMemo = 5 * time.Second

// discovered is what the provider's discovery document gave.
type discovered struct {
	oauth      *oauth2.Config
	verifier   *oidc.IDTokenVerifier
	endSession string
	// issParam: the provider advertises authorization_response_iss_parameter_supported, so
	// every authorization response must carry iss (RFC 9207 §2.4).
	issParam bool
}

// New checks cfg and builds the pages. It does not contact the provider: discovery happens on
// first use (and is memoised once it succeeds) or when Check is called.
func New(cfg Config) (*Pages, error) {
	if err := checkProvider(cfg); err != nil {
		return nil, err
	}
	pu, err := checkPublicURL(cfg.PublicURL)
	if err != nil {
		return nil, err
	}
	if _, err := authz.PrincipalFromClaims(map[string]any{}, cfg.Claims); err != nil && !errors.Is(err, authz.ErrInvalidToken) {
		return nil, fmt.Errorf("pages: %w", err)
	}
	if cfg, err = withDefaults(cfg); err != nil {
		return nil, err
	}
	p := &Pages{cfg: cfg, base: strings.TrimSuffix(cfg.PublicURL, "/"), secure: pu.Scheme == "https"}
	p.redirectURL = p.base + PathCallback
	p.sessionCookie, p.loginCookie = "jobgate_session", "jobgate_login"
	if p.secure {
		// __Host-: Secure, Path=/, no Domain, so no sibling subdomain can plant one (a planted
		// login cookie would carry an attacker's state, nonce and PKCE verifier: login CSRF).
		p.sessionCookie, p.loginCookie = "__Host-jobgate_session", "__Host-jobgate_login"
	}
	p.handler = p.routes()
	return p, nil
}

// checkProvider checks what names the OIDC provider and this client: issuer, client ID, keyring.
func checkProvider(cfg Config) error {
	iu, err := url.Parse(cfg.Issuer)
	switch {
	case cfg.Issuer == "":
		return errors.New("pages: the OIDC issuer is required")
	case err != nil || iu.Host == "" || (iu.Scheme != "https" && iu.Scheme != "http") || iu.RawQuery != "" || iu.Fragment != "":
		return fmt.Errorf("pages: OIDC issuer %q is not an http(s) URL without query or fragment", cfg.Issuer)
	case iu.Scheme == "http" && !authz.LoopbackHost(iu.Hostname()):
		return fmt.Errorf("pages: OIDC issuer %q: http only for a loopback host", cfg.Issuer)
	case cfg.ClientID == "":
		return errors.New("pages: the OIDC client ID is required")
	case cfg.Keys == nil:
		return errors.New("pages: the handle keyring (Keys) is required")
	}
	return nil
}

// checkPublicURL parses the public URL the pages are served under.
func checkPublicURL(publicURL string) (*url.URL, error) {
	pu, err := url.Parse(publicURL)
	switch {
	case publicURL == "":
		return nil, errors.New("pages: the public URL is required")
	case err != nil || pu.Host == "" || (pu.Scheme != "https" && pu.Scheme != "http") || pu.RawQuery != "" || pu.Fragment != "" || pu.User != nil:
		return nil, fmt.Errorf("pages: public URL %q is not an http(s) URL without query, fragment or user", publicURL)
	case pu.Scheme == "http" && !authz.LoopbackHost(pu.Hostname()):
		// A session cookie over plain http off loopback would travel in the clear.
		return nil, fmt.Errorf("pages: public URL %q: http only for a loopback host (sessions need https)", publicURL)
	}
	return pu, nil
}

// withDefaults checks the session TTL and fills in what cfg leaves unset.
func withDefaults(cfg Config) (Config, error) {
	switch {
	case cfg.SessionTTL == 0:
		cfg.SessionTTL = SessionTTLDefault
	case cfg.SessionTTL < time.Minute || cfg.SessionTTL > MaxSessionTTL:
		return cfg, fmt.Errorf("pages: session TTL %s is outside 1m..%s", cfg.SessionTTL, MaxSessionTTL)
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = DefaultScopes()
	}
	if !slices.Contains(cfg.Scopes, oidc.ScopeOpenID) {
		cfg.Scopes = append([]string{oidc.ScopeOpenID}, cfg.Scopes...)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: HTTPTimeoutDefault}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return cfg, nil
}

// Patterns are the net/http.ServeMux patterns Handler serves, to mount it on the server's mux.
func Patterns() []string {
	return []string{"GET " + PathLogin, "GET " + PathCallback, "POST " + PathLogout, "GET " + PathMe, "GET " + PathSignedOut}
}

// Handler serves GET /login?return=, GET /auth/callback, POST /logout, GET /me and
// GET /auth/signed-out.
func (p *Pages) Handler() http.Handler { return p.handler }

func (p *Pages) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathLogin, p.login)
	mux.HandleFunc("GET "+PathCallback, p.callback)
	mux.HandleFunc("POST "+PathLogout, p.logout)
	mux.Handle("GET "+PathMe, p.RequireSession(0, http.HandlerFunc(p.me)))
	mux.HandleFunc("GET "+PathSignedOut, p.signedOut)
	return securityHeaders(crossOrigin(mux))
}

// Check runs discovery now (serve calls it at start-up, to fail fast on a wrong issuer) and
// returns a one-line error naming the issuer.
func (p *Pages) Check(ctx context.Context) error {
	_, err := p.discover(ctx)
	return err
}

// discover fetches the provider's metadata once; a failure is remembered for failureMemo, then
// tried again.
func (p *Pages) discover(ctx context.Context) (*discovered, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.disc != nil {
		return p.disc, nil
	}
	if p.lastErr != nil && time.Since(p.lastFail) < failureMemo {
		return nil, p.lastErr
	}
	d, err := p.fetchDiscovery(ctx)
	if err != nil {
		p.lastErr, p.lastFail = err, time.Now()
		return nil, err
	}
	p.disc, p.lastErr = d, nil
	return d, nil
}

func (p *Pages) fetchDiscovery(ctx context.Context) (*discovered, error) {
	// The provider keeps the HTTP client (not the context) for fetching its keys later.
	prov, err := oidc.NewProvider(oidc.ClientContext(ctx, p.cfg.HTTPClient), p.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("OIDC issuer %s: discovery failed: %s", p.cfg.Issuer, oneLine(err.Error()))
	}
	var meta struct {
		EndSession string   `json:"end_session_endpoint"`
		Challenges []string `json:"code_challenge_methods_supported"`
		IssParam   bool     `json:"authorization_response_iss_parameter_supported"`
	}
	if err := prov.Claims(&meta); err != nil {
		return nil, fmt.Errorf("OIDC issuer %s: discovery document: %s", p.cfg.Issuer, oneLine(err.Error()))
	}
	if len(meta.Challenges) > 0 && !slices.Contains(meta.Challenges, "S256") {
		return nil, fmt.Errorf("OIDC issuer %s does not support PKCE S256 (code_challenge_methods_supported: %s)", p.cfg.Issuer, strings.Join(meta.Challenges, " "))
	}
	ep := prov.Endpoint()
	if p.cfg.ClientSecret == "" {
		ep.AuthStyle = oauth2.AuthStyleInParams // a public client names itself in the body
	}
	return &discovered{
		oauth: &oauth2.Config{ClientID: p.cfg.ClientID, ClientSecret: p.cfg.ClientSecret, Endpoint: ep,
			RedirectURL: p.redirectURL, Scopes: p.cfg.Scopes},
		verifier:   prov.Verifier(&oidc.Config{ClientID: p.cfg.ClientID, Now: p.cfg.Now}),
		endSession: meta.EndSession,
		issParam:   meta.IssParam,
	}, nil
}

// oneLine keeps an error on one line of bounded length (providers put HTML in error bodies).
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
