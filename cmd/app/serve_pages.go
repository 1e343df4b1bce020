package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/codecserver"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/frontend/pages"
)

// PagesConfig configures browser sign-in for jobgate's own pages (frontend/pages): an OpenID
// Connect relying party against any issuer. Without Issuer the pages are off (their paths 404).
type PagesConfig struct {
	// Issuer is the OpenID Provider's issuer URL. Defaults to none: pages off.
	Issuer string
	// ClientID is jobgate's client at the provider. Required with Issuer.
	ClientID string
	// ClientSecretFile holds the client secret (confidential client); ClientSecret, if set, is
	// used instead (dev). Defaults to none: a public client with PKCE only.
	ClientSecretFile, ClientSecret string
	// PublicURL is the browser-facing base URL; the redirect URI is PublicURL/auth/callback.
	// Defaults to the origin (scheme://host) of --resource-uri.
	PublicURL string
	// TenantClaim and ScopeClaim name the claims read for tenant and scopes (authz.ClaimNames).
	// Default "tenant", and "" (scope string merged with scp array).
	TenantClaim, ScopeClaim string
	// Scopes requested, space-separated. Defaults to pages.DefaultScopes(): openid profile
	// email and the jobs:* scopes.
	Scopes string
	// SessionTTL is how long a browser session lasts. Defaults to 8h; at most 24h.
	SessionTTL time.Duration
	// ApprovalMaxAge is how recent a person's sign-in must be to approve a sensitive scope on
	// the /approvals pages (older: signed in again with prompt=login). Defaults to 5m
	// (frontend.ApprovalMaxAgeDefault).
	ApprovalMaxAge time.Duration
	// HTTPClient calls the provider (no flag: dev sets one that dials its own listener,
	// devPagesConfig). Defaults to nil: pages.Config's default client.
	HTTPClient *http.Client
}

// Flags registers the pages' flags on serve.
func (c *PagesConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Issuer, "oidc-issuer", "", "OpenID Provider issuer URL for browser sign-in to jobgate's pages (/login, /me); without it the pages are off")
	fs.StringVar(&c.ClientID, "oidc-client-id", "", "jobgate's client ID at --oidc-issuer (required with it)")
	fs.StringVar(&c.ClientSecretFile, "oidc-client-secret-file", "", "file holding the client secret; without it jobgate is a public client (PKCE only)")
	fs.StringVar(&c.PublicURL, "public-url", "", "browser-facing base URL of this server (the redirect URI is <public-url>/auth/callback); default: the origin of --resource-uri")
	fs.StringVar(&c.TenantClaim, "oidc-tenant-claim", authz.TenantClaimDefault, "ID/access token claim naming the tenant of a person signing in")
	fs.StringVar(&c.ScopeClaim, "oidc-scope-claim", authz.ScopeClaimDefault, "claim holding the scopes (string or array); default: scope (string) merged with scp (array)")
	fs.StringVar(&c.Scopes, "oidc-scopes", strings.Join(pages.DefaultScopes(), " "), "scopes requested at sign-in, space-separated (openid is always added)")
	fs.DurationVar(&c.SessionTTL, "session-ttl", pages.SessionTTLDefault, "how long a browser session lasts (at most 24h)")
	fs.DurationVar(&c.ApprovalMaxAge, "approval-max-age", frontend.ApprovalMaxAgeDefault, "how recent a sign-in must be to approve a sensitive scope on /approvals or the MCP Apps approval card (older: sign in again)")
}

// devPagesConfig is the pages' configuration for `jobgate dev`: its identity provider (issuer,
// e.g. http://localhost:8080/oidc, served on the same listener ln) with the confidential client
// jobgate-pages and its secret (devidp.IdP.PagesClientSecret), on the listener's base URL
// (http://localhost:8080). Register base+pages.PathCallback as devidp.Options.PagesRedirectURIs
// and base+pages.PathSignedOut as PagesPostLogoutRedirectURIs. The pages reach the provider
// through listenerClient, so a --listen on a specific non-loopback address (where nothing
// answers at localhost) still starts. The other fields' zero values are their defaults.
func devPagesConfig(issuer, secret, base string, ln net.Addr) (PagesConfig, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" {
		return PagesConfig{}, fmt.Errorf("dev identity provider issuer %q: not a URL", issuer)
	}
	return PagesConfig{Issuer: issuer, ClientID: devidp.PagesClientID, ClientSecret: secret, PublicURL: base,
		HTTPClient: listenerClient(u.Host, ln)}, nil
}

// listenerClient is an HTTP client that dials the listener ln (at its loopback address when
// it listens on all interfaces, loopbackBase) whenever a URL names host (e.g. localhost:8080,
// the dev issuer's), and dials everything else as usual. devVerifier does the same for the
// key set. No proxy: the provider is this very process.
func listenerClient(host string, ln net.Addr) *http.Client {
	target := strings.TrimPrefix(loopbackBase(ln), "http://")
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == host {
			addr = target
		}
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{Timeout: pages.HTTPTimeoutDefault, Transport: tr}
}

// buildPages makes the pages when --oidc-issuer is set (nil otherwise). It needs build's
// verifier and keys: the access token of a person signing in is checked by the MCP endpoint's
// own bearer verifier, and the session cookie is sealed with the handle keys.
func (m *ServeMain) buildPages() (*pages.Pages, error) {
	c := m.Config.Pages
	if c.Issuer == "" {
		if c.ClientID != "" || c.ClientSecretFile != "" {
			return nil, errors.New("--oidc-client-id and --oidc-client-secret-file need --oidc-issuer")
		}
		return nil, nil
	}
	if c.ClientID == "" {
		return nil, errors.New("--oidc-client-id is required with --oidc-issuer")
	}
	secret := c.ClientSecret
	if c.ClientSecretFile != "" {
		b, err := readSecretFile(c.ClientSecretFile, "--oidc-client-secret-file")
		if err != nil {
			return nil, err
		}
		if err := refuseDevOnly(m.Config.DevDeployment, "--oidc-client-secret-file", c.ClientSecretFile, b); err != nil {
			return nil, err
		}
		secret = string(b)
	}
	public := c.PublicURL
	if public == "" {
		u, err := url.Parse(m.Config.ResourceURI)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("--public-url: not given, and --resource-uri %q has no origin to default to", m.Config.ResourceURI)
		}
		public = u.Scheme + "://" + u.Host
	}
	p, err := pages.New(pages.Config{Issuer: c.Issuer, ClientID: c.ClientID, ClientSecret: secret, PublicURL: public,
		Resource: m.Config.ResourceURI, Scopes: strings.Fields(c.Scopes),
		Claims:         authz.ClaimNames{Tenant: c.TenantClaim, Scope: c.ScopeClaim},
		AccessVerifier: m.Verifier, SessionTTL: c.SessionTTL, Keys: m.Keys, HTTPClient: c.HTTPClient, Now: m.Now, Logger: m.Logger})
	if err != nil {
		return nil, fmt.Errorf("browser sign-in (--oidc-*, --public-url): %s", strings.TrimPrefix(err.Error(), "pages: "))
	}
	return p, nil
}

// withPages serves the pages' paths (sign-in, and the frontend's /approvals and /jobs behind
// it) beside f's handler, when they are on.
func (m *ServeMain) withPages(f *frontend.Frontend) (http.Handler, error) {
	h := f.Handler()
	p, err := m.buildPages()
	if err != nil || p == nil {
		return h, err
	}
	m.pages = p
	mux := http.NewServeMux()
	for _, pat := range pages.Patterns() {
		mux.Handle(pat, p.Handler())
	}
	people := f.PagesHandler(p, m.Config.Pages.ApprovalMaxAge)
	for _, pat := range frontend.PagePatterns() {
		mux.Handle(pat, people)
	}
	mux.Handle("/", h)
	return mux, nil
}

// checkPages runs the pages' discovery once the server is serving (the dev identity provider
// may be served by this very listener), so a wrong issuer fails start-up with one line.
func (m *ServeMain) checkPages(ctx context.Context) error {
	if m.pages == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := m.pages.Check(ctx); err != nil {
		return fmt.Errorf("--oidc-issuer: %w", err)
	}
	return nil
}

// codecMount is mounts plus the Web UI's codec server (frontend/codecserver) at /codec/, the
// other browser-facing surface beside the pages. It is served whenever payloads are sealed
// (with no key store there is nothing to open); the UI reaches it cross-origin only from
// --codec-cors-origin.
func (m *ServeMain) codecMount(mounts map[string]http.Handler) (map[string]http.Handler, error) {
	keys := m.Config.Temporal.PayloadKeys()
	if keys == nil {
		return mounts, nil
	}
	var origins []string
	for _, o := range strings.Split(m.Config.CodecCORSOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			origins = append(origins, strings.TrimSuffix(o, "/"))
		}
	}
	h, err := codecserver.New(codecserver.Options{Verifier: m.Verifier, Codec: payloadcrypt.NewCodec(keys),
		AllowOrigins: origins, ResourceURI: m.Config.ResourceURI, DevOperator: m.CodecDevOperator, Logger: m.Logger.Named("codec"),
		Metrics: m.metrics.registerer()})
	if err != nil {
		return nil, fmt.Errorf("--codec-cors-origin: %w", err)
	}
	out := make(map[string]http.Handler, len(mounts)+1)
	for p, x := range mounts {
		out[p] = x
	}
	out[codecserver.PathPrefix] = h
	return out, nil
}
