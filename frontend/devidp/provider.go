package devidp

import (
	"crypto/x509"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/jobgate/jobgate/authz"
)

// User is one dev principal the picker offers.
type User struct {
	Subject string
	Tenant  string
	Scopes  []authz.Scope
}

// ScopeList is the user's scopes, space-separated (for the page).
func (u User) ScopeList() string {
	s := make([]string, len(u.Scopes))
	for i, sc := range u.Scopes {
		s[i] = string(sc)
	}
	return strings.Join(s, " ")
}

// Options configure [New].
type Options struct {
	// Issuer is the provider's issuer URL, e.g. http://localhost:8080/oidc.
	// http is allowed only for a loopback host. Required; no default.
	Issuer string
	// Resource is the MCP server's resource URI, put in every access token's
	// aud. Required; no default.
	Resource string
	// Users are the dev principals the picker offers. Required (at least one).
	Users []User
	// Dir holds the provider's state (signing key, crypto key, refresh
	// tokens), created 0700 if missing. Empty means ephemeral: everything in
	// memory, gone on restart. Default empty.
	Dir string
	// PagesRedirectURIs, when set, registers the confidential client
	// jobgate-pages (PagesClientID) with these redirect URIs, for jobgate's
	// own browser sign-in. Its secret is kept in Dir (see
	// IdP.PagesClientSecret). Default none: no confidential client.
	PagesRedirectURIs []string
	// PagesPostLogoutRedirectURIs are where jobgate-pages may send the browser after
	// RP-initiated logout at /end_session (frontend/pages uses <public URL>/auth/signed-out).
	// Default none: end_session then refuses a post_logout_redirect_uri.
	PagesPostLogoutRedirectURIs []string
	// DeviceCodeLifetime is how long a device code (RFC 8628) may be
	// approved. Defaults to 10 minutes (DeviceCodeLifetimeDefault).
	DeviceCodeLifetime time.Duration
	// DevicePollInterval is how long a device (RFC 8628) must wait between two polls of the
	// token endpoint. Defaults to 5 seconds, RFC 8628's default (DevicePollIntervalDefault);
	// tests shorten it.
	DevicePollInterval time.Duration
	// UnusedClientTTL is how long a dynamically registered client (/register) that has not yet
	// been issued a token stays registered: a registration nobody completes a sign-in with is
	// dropped then (from clients.json too), so junk registrations cannot hold the client cap.
	// A client once issued a token stays. Defaults to 24 hours (UnusedClientTTLDefault).
	UnusedClientTTL time.Duration
	// Now tells the time, for tests. Defaults to time.Now.
	Now func() time.Time
	// AllowRemote lets clients other than loopback ones use the human-facing
	// pages: the picker (/login), the device page (/device) and client
	// registration (/register). Default false: a request whose RemoteAddr is
	// not a loopback address gets 403 and a one-line page there, because
	// anyone who reaches the passwordless picker gets a token as any dev user
	// (a `jobgate dev --listen 0.0.0.0:8080` would hand them to the LAN).
	// Discovery, keys, token and the other protocol endpoints answer anyone:
	// they give nothing without a sign-in on those pages.
	AllowRemote bool
	// CIMDAllowLoopback lets Client ID Metadata Documents (an https client_id URL, cimd.go) be
	// fetched from loopback addresses. Default false: the fetch dials public addresses only
	// (the webhooks' rule, authz.PrivateIP, on the address actually dialed), as the draft's
	// SSRF rule asks. For development only: a client served on this machine, the tests' devpki
	// TLS server. It never lets private, link-local or other special-use addresses through.
	CIMDAllowLoopback bool
	// CIMDRootCAs are the roots trusted when fetching metadata documents over TLS. Default nil:
	// the system's. CIMDRootCAs builds the system's plus a dev CA.
	CIMDRootCAs *x509.CertPool
	// CIMDFetchTimeout bounds one metadata document fetch (connect, TLS, headers and body).
	// Defaults to 5 seconds (CIMDFetchTimeoutDefault).
	CIMDFetchTimeout time.Duration
}

// DeviceCodeLifetimeDefault is Options.DeviceCodeLifetime's default.
const DeviceCodeLifetimeDefault = 10 * time.Minute

// DevicePollIntervalDefault is Options.DevicePollInterval's default.
const DevicePollIntervalDefault = 5 * time.Second

// IdP is the dev OpenID Provider.
type IdP struct {
	provider    *op.Provider
	store       *storage
	issuer      string
	path        string // issuer path, e.g. "/oidc"
	origin      string // the issuer's scheme://host[:port], the one Origin /register accepts
	users       []User
	csrf        [32]byte
	pagesSecret string
	handler     http.Handler
	allowRemote bool // Options.AllowRemote
}

//go:embed templates/*.html
var templatesFS embed.FS

// The page comes first in each parse so it names the template; layout.html holds the head, the
// development-only banner and the user buttons both pages share.
var (
	loginTmpl  = template.Must(template.ParseFS(templatesFS, "templates/login.html", "templates/layout.html"))
	deviceTmpl = template.Must(template.ParseFS(templatesFS, "templates/device.html", "templates/layout.html"))
)

// New builds the provider, loading or creating its state in opts.Dir.
func New(opts Options) (*IdP, error) {
	u, err := opts.check()
	if err != nil {
		return nil, err
	}
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("devidp: %w", err)
		}
	}
	key, err := loadOrCreateKey(opts.Dir)
	if err != nil {
		return nil, err
	}
	cryptoKey, err := loadOrCreateSecret(opts.Dir, "crypto-key")
	if err != nil {
		return nil, err
	}
	path := strings.TrimSuffix(u.Path, "/")
	idp := &IdP{issuer: strings.TrimSuffix(opts.Issuer, "/"), path: path, origin: u.Scheme + "://" + u.Host,
		users: opts.Users, allowRemote: opts.AllowRemote}
	// The CSRF key need not survive a restart: a picker page from before one is simply re-shown.
	if _, err := randRead(idp.csrf[:]); err != nil {
		return nil, err
	}
	if idp.store, idp.pagesSecret, err = newStorage(opts, key, path); err != nil {
		return nil, err
	}
	cfg := &op.Config{
		CryptoKey:             cryptoKey,
		CodeMethodS256:        true,
		GrantTypeRefreshToken: true,
		AuthMethodPost:        true, // client_secret_post as well as basic, for jobgate-pages
		SupportedScopes: []string{oidc.ScopeOpenID, oidc.ScopeOfflineAccess,
			string(authz.ScopeRead), string(authz.ScopeWrite), string(authz.ScopeApprove), string(authz.ScopeAdmin)},
		DeviceAuthorization: op.DeviceAuthorizationConfig{
			Lifetime:     opts.DeviceCodeLifetime,
			PollInterval: opts.DevicePollInterval,
			// UserFormPath replaces the issuer URL's whole path, so it carries the prefix.
			UserFormPath: path + "/device",
			UserCode:     op.UserCodeBase20,
		},
	}
	// pkg/op's default CORS allows every origin, with credentials: a page on any site could
	// read device_authorization's device_code and the token endpoint's answers. No browser
	// client needs them here (the CLI and jobgate's pages call them server-side), so none.
	popts := []op.Option{op.WithCORSOptions(nil)}
	if u.Scheme == "http" {
		popts = append(popts, op.WithAllowInsecure())
	}
	p, err := op.NewProvider(cfg, idp.store, op.StaticIssuer(idp.issuer), popts...)
	if err != nil {
		return nil, fmt.Errorf("devidp: %w", err)
	}
	idp.provider = p
	idp.handler = idp.routes()
	return idp, nil
}

// check refuses options New cannot serve and fills in the defaults; it returns the parsed
// issuer URL.
func (opts *Options) check() (*url.URL, error) {
	u, err := url.Parse(opts.Issuer)
	switch {
	case opts.Issuer == "":
		return nil, errors.New("devidp: Options.Issuer is required")
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("devidp: Options.Issuer %q is not an http(s) URL without query", opts.Issuer)
	case u.Scheme == "http" && !authz.LoopbackHost(u.Hostname()):
		return nil, fmt.Errorf("devidp: Options.Issuer %q: http only for a loopback host", opts.Issuer)
	case opts.Resource == "":
		return nil, errors.New("devidp: Options.Resource is required")
	case len(opts.Users) == 0:
		return nil, errors.New("devidp: Options.Users is empty")
	}
	if opts.DeviceCodeLifetime < 0 {
		return nil, errors.New("devidp: Options.DeviceCodeLifetime is negative")
	}
	if opts.DevicePollInterval < 0 {
		return nil, errors.New("devidp: Options.DevicePollInterval is negative")
	}
	if opts.UnusedClientTTL < 0 {
		return nil, errors.New("devidp: Options.UnusedClientTTL is negative")
	}
	if opts.CIMDFetchTimeout < 0 {
		return nil, errors.New("devidp: Options.CIMDFetchTimeout is negative")
	}
	if opts.CIMDFetchTimeout == 0 {
		opts.CIMDFetchTimeout = CIMDFetchTimeoutDefault
	}
	if opts.UnusedClientTTL == 0 {
		opts.UnusedClientTTL = UnusedClientTTLDefault
	}
	if opts.DevicePollInterval == 0 {
		opts.DevicePollInterval = DevicePollIntervalDefault
	}
	if opts.DeviceCodeLifetime == 0 {
		opts.DeviceCodeLifetime = DeviceCodeLifetimeDefault
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return u, nil
}

// newStorage is the provider's state: the users, the built-in clients (the CLI's, and
// jobgate-pages' with its secret when opts.PagesRedirectURIs is set), and the registered
// clients and refresh tokens saved in opts.Dir.
func newStorage(opts Options, key *signingKey, path string) (s *storage, pagesSecret string, err error) {
	s = &storage{
		resource: opts.Resource, dir: opts.Dir, now: opts.Now, key: key, unusedClientTTL: opts.UnusedClientTTL,
		users: map[string]User{}, clients: map[string]*client{},
		authReqs: map[string]*authRequest{}, codes: map[string]string{}, refresh: map[string]*refreshToken{},
		devices: map[string]*deviceEntry{}, userCodes: map[string]string{},
	}
	for _, usr := range opts.Users {
		if _, dup := s.users[usr.Subject]; dup || usr.Subject == "" {
			return nil, "", fmt.Errorf("devidp: Options.Users: empty or duplicate subject %q", usr.Subject)
		}
		s.users[usr.Subject] = usr
	}
	s.loginURL = loginURLFor(path)
	s.cimd = newCIMDResolver(opts, s.loginURL)
	cli := cliClient(s.loginURL)
	s.clients[cli.id] = cli
	if len(opts.PagesRedirectURIs) > 0 {
		for _, u := range opts.PagesRedirectURIs {
			if err := checkRedirectURI(u); err != nil {
				return nil, "", fmt.Errorf("devidp: Options.PagesRedirectURIs: %w", err)
			}
		}
		sec, err := loadOrCreateSecret(opts.Dir, "pages-client-secret")
		if err != nil {
			return nil, "", err
		}
		pagesSecret = base64.RawURLEncoding.EncodeToString(sec[:])
		pc := pagesClient(s.loginURL, slices.Clone(opts.PagesRedirectURIs), pagesSecret)
		pc.postLogout = slices.Clone(opts.PagesPostLogoutRedirectURIs)
		s.clients[PagesClientID] = pc
	}
	if err := s.loadClients(); err != nil {
		return nil, "", err
	}
	if err := s.loadRefresh(); err != nil {
		return nil, "", err
	}
	return s, pagesSecret, nil
}

// routes serves the human-facing pages (loopback only unless AllowRemote), the RFC 8414
// metadata, and the provider under the issuer's path.
func (i *IdP) routes() http.Handler {
	path, p := i.path, i.provider
	mux := http.NewServeMux()
	local := i.loopbackOnly
	mux.Handle("GET "+path+"/login", local(http.HandlerFunc(i.loginPage)))
	mux.HandleFunc("GET "+path+"/.well-known/openid-configuration", i.discoveryHandler)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server"+path, i.discoveryHandler)
	mux.Handle("POST "+path+"/register", local(http.HandlerFunc(i.registerHandler)))
	mux.Handle("GET "+path+"/device", local(http.HandlerFunc(i.devicePage)))
	mux.Handle("POST "+path+"/device", local(http.NewCrossOriginProtection().Handler(http.HandlerFunc(i.deviceSubmit))))
	// Cross-site POSTs are refused by Sec-Fetch-Site/Origin as well as by the form token.
	mux.Handle("POST "+path+"/login", local(http.NewCrossOriginProtection().Handler(http.HandlerFunc(i.loginSubmit))))
	var provider http.Handler = p
	if path != "" {
		provider = http.StripPrefix(path, p)
	}
	mux.Handle(path+"/", provider)
	// A URL client_id (a Client ID Metadata Document) is resolved, and refused with its reason,
	// before pkg/op's authorize.
	mux.Handle(path+p.AuthorizationEndpoint().Relative(), i.cimdAuthorize(provider))
	// Browsers never call these: refused with a request naming an Origin, not only left
	// without CORS (a no-cors POST would still start a device flow).
	mux.Handle(path+p.TokenEndpoint().Relative(), noBrowser(provider))
	mux.Handle(path+p.DeviceAuthorizationEndpoint().Relative(), noBrowser(provider))
	return mux
}

// noBrowser refuses a request carrying an Origin header (any browser's fetch or form POST,
// "null" included) with 403; native clients and servers send none.
func noBrowser(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "invalid_request",
				"error_description": fmt.Sprintf("Origin: %q: browsers may not call this endpoint of the development identity provider", o)})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Handler serves the provider (discovery, keys, authorize, token, ...), the
// picker, the device page and client registration under the issuer's path,
// and the RFC 8414 metadata at /.well-known/oauth-authorization-server<path>.
// Mount it at "/" (or route both that path and the issuer's path to it).
func (i *IdP) Handler() http.Handler { return i.handler }

// Issuer is the issuer URL tokens carry.
func (i *IdP) Issuer() string { return i.issuer }

// PagesClientSecret is jobgate-pages' client secret ("" without
// Options.PagesRedirectURIs); stable across restarts with the same Dir.
func (i *IdP) PagesClientSecret() string { return i.pagesSecret }

// KeyID is the signing key's kid (stable across restarts with the same Dir).
func (i *IdP) KeyID() string { return i.store.key.id }

// RemoteOnlyMessage is the one-line page a non-loopback client gets from the picker, the
// device page and /register without Options.AllowRemote.
const RemoteOnlyMessage = "403: this development identity provider answers loopback clients only (devidp.Options.AllowRemote is off); open it from the machine it runs on"

// loopbackOnly refuses h to a client whose address is not loopback, unless AllowRemote.
// RemoteAddr is the TCP peer (http.Server sets it; no header is trusted), so a proxy on the
// same machine counts as loopback: the dev stack is not meant to sit behind one.
func (i *IdP) loopbackOnly(h http.Handler) http.Handler {
	if i.allowRemote {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authz.LoopbackPeer(r.RemoteAddr) {
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, RemoteOnlyMessage, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// UnusedClientTTLDefault is Options.UnusedClientTTL's default.
const UnusedClientTTLDefault = 24 * time.Hour
