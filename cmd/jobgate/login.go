package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
)

// `jobgate login`: a person signs in at the server's identity provider and the CLI keeps the
// tokens (tokenstore.go). The device authorization grant (RFC 8628) by default, since it works
// over ssh and in containers; authorization code + PKCE with a loopback redirect (RFC 8252) with
// --browser. The issuer comes from the server's RFC 9728 metadata unless --issuer names it.
//
// Discovery is done here rather than with coreos/go-oidc: go-oidc reads only OpenID discovery,
// while an OAuth authorization server may publish only RFC 8414 metadata (and MCP clients try
// that first), and go-oidc would add nothing else the CLI uses — the CLI verifies no ID token
// (the server verifies the access token on every call). Both documents are tried in the order
// MCP's authorization spec gives, and the issuer they name must be the one asked for.

const loginSummary = `Signs you in at the server's identity provider and keeps the tokens for the client commands
(jobs, approvals), which use them whenever --token, --token-file and JOBGATE_TOKEN are absent.
By default it prints a code to enter on a page you open anywhere (device authorization, RFC 8628);
--browser signs in through this machine's browser instead (authorization code + PKCE, RFC 8252).
Tokens are kept in <user config dir>/jobgate/tokens.json (mode 0600) and refreshed when expired.`

const defaultClientID = "jobgate-cli"

// loginHTTPTimeout bounds each request to the server's metadata and the identity provider.
const loginHTTPTimeout = 30 * time.Second

type loginOpts struct {
	url, issuer, resource, clientID, secretFile, scope, tenantClaim string
	browser, open                                                   bool
	timeout                                                         time.Duration
}

func runLogin(args []string, stdout, stderr io.Writer) error {
	var o loginOpts
	fs := newFlagSet("login", loginSummary, stderr)
	fs.StringVar(&o.url, "url", envOr("JOBGATE_URL", defaultURL), "MCP endpoint to sign in for (env JOBGATE_URL)")
	fs.StringVar(&o.issuer, "issuer", "", "identity provider's issuer URL (default: the first authorization server in the server's RFC 9728 metadata)")
	fs.StringVar(&o.resource, "resource", "", "the server's resource URI, put in the token's aud (default: the resource the server's metadata names, which must be --url)")
	fs.StringVar(&o.clientID, "client-id", defaultClientID, "OAuth client ID registered at the identity provider (a public client unless --client-secret-file)")
	fs.StringVar(&o.secretFile, "client-secret-file", "", "file holding the client secret, for a confidential client (default none: a public client)")
	fs.StringVar(&o.scope, "scope", "", "space-separated scopes to ask for (default: the server's scopes_supported plus openid offline_access)")
	fs.StringVar(&o.tenantClaim, "tenant-claim", "tenant", "access-token claim holding the tenant (as the server's --tenant-claim)")
	fs.BoolVar(&o.browser, "browser", false, "sign in with this machine's browser (authorization code + PKCE on a 127.0.0.1 redirect) instead of a device code")
	fs.BoolVar(&o.open, "open", true, "with --browser: open the sign-in URL with xdg-open (open on macOS) when there is one; the URL is printed either way")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "with --browser: how long to wait for the sign-in")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("login: unexpected argument %q", fs.Arg(0))
	}
	if o.timeout <= 0 {
		return errors.New("login: --timeout must be positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return login(ctx, o, stdout)
}

// resourceMetadata is the part of RFC 9728 metadata login reads.
type resourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

// serverMetadata is the part of RFC 8414 / OpenID discovery metadata login reads.
type serverMetadata struct {
	Issuer                      string   `json:"issuer"`
	AuthorizationEndpoint       string   `json:"authorization_endpoint"`
	TokenEndpoint               string   `json:"token_endpoint"`
	DeviceAuthorizationEndpoint string   `json:"device_authorization_endpoint"`
	RevocationEndpoint          string   `json:"revocation_endpoint"`
	CodeChallengeMethods        []string `json:"code_challenge_methods_supported"`
	// IssInResponse: the IdP puts iss in every authorization response (RFC 9207 §3).
	IssInResponse bool `json:"authorization_response_iss_parameter_supported"`
}

func login(ctx context.Context, o loginOpts, stdout io.Writer) error {
	hc := &http.Client{Timeout: loginHTTPTimeout}
	if _, ok := normURL(o.url); !ok {
		return fmt.Errorf("login: --url %q is not an http(s) URL", o.url)
	}
	// The commands send the stored token to --url: refuse before the person signs in.
	if err := secureURL("--url", o.url); err != nil {
		return fmt.Errorf("login: %w; the token would cross the network in clear", err)
	}
	// The server's RFC 9728 metadata: issuer, resource and scopes. With --issuer and --resource
	// it is optional (a server that publishes none can still be signed in to).
	prm, prmErr := fetchResourceMetadata(ctx, hc, o.url)
	if prmErr != nil && (o.issuer == "" || o.resource == "") {
		return prmErr
	}
	resource := o.resource
	switch {
	case prm != nil && resource == "" && !sameURL(prm.Resource, o.url):
		// RFC 9728 §3.3: metadata naming another resource must not be used, or a server could
		// collect tokens meant for another. Behind a proxy the operator says so with --resource.
		return fmt.Errorf("login: the server at %s names its resource %q, not %s; if that is right (a proxy or another spelling), pass --resource %s",
			o.url, prm.Resource, o.url, prm.Resource)
	case prm != nil && resource != "" && !sameURL(prm.Resource, resource):
		return fmt.Errorf("login: --resource %s, but the server at %s names its resource %q", resource, o.url, prm.Resource)
	case resource == "":
		resource = prm.Resource
	}
	issuer := o.issuer
	if issuer == "" {
		if len(prm.AuthorizationServers) == 0 || prm.AuthorizationServers[0] == "" {
			return fmt.Errorf("login: the server at %s names no authorization server in its RFC 9728 metadata; pass --issuer", o.url)
		}
		issuer = prm.AuthorizationServers[0]
	}
	var scopes []string
	if o.scope != "" {
		scopes = strings.Fields(o.scope)
	} else {
		if prm != nil {
			scopes = slices.Clone(prm.ScopesSupported)
		} else {
			scopes = authz.ScopeStrings(authz.AllScopes())
		}
		// openid: standard IdPs key consent and sessions on it; offline_access: a refresh token.
		for _, s := range []string{"openid", "offline_access"} {
			if !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
	}
	meta, err := discoverIssuer(ctx, hc, issuer)
	if err != nil {
		return err
	}
	secret, err := readClientSecret(o.secretFile)
	if err != nil {
		return err
	}
	path, err := tokenStorePath()
	if err != nil {
		return err
	}
	// Read the store before signing in, so a broken store fails before the person's effort.
	if _, err := loadTokens(path); err != nil {
		return err
	}
	cfg := oauthConfig(meta, o.clientID, secret, scopes)
	ictx := idpContext(ctx, meta, o.clientID, secret, resource)
	var tok *oauth2.Token
	if o.browser {
		tok, err = browserLogin(ictx, cfg, meta, resource, o, stdout)
	} else {
		tok, err = deviceLogin(ictx, cfg, meta, stdout)
	}
	if err != nil {
		return err
	}
	info, err := checkAccessToken(tok.AccessToken, issuer, resource, o.tenantClaim, time.Now())
	if err != nil {
		return err
	}
	l := storedLogin{
		Issuer: meta.Issuer, Resource: resource, URL: o.url, ClientID: o.clientID, TokenEndpoint: meta.TokenEndpoint,
		RevocationEndpoint: meta.RevocationEndpoint, TenantClaim: o.tenantClaim,
		AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, Expiry: info.expiry(tok.Expiry), SavedAt: time.Now().UTC(),
	}
	if o.secretFile != "" {
		l.ClientSecretFile = absPath(o.secretFile)
	}
	// Re-read: another command may have refreshed another login meanwhile.
	tf, err := loadTokens(path)
	if err != nil {
		return err
	}
	tf.put(l)
	if err := saveTokens(path, tf); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Signed in to %s as %s (tenant %s; scopes %s) for %s.\n", cleanText(meta.Issuer), cleanText(info.Subject), cleanText(info.Tenant),
		cleanText(orNone(info.Scopes)), resource)
	refresh := "no refresh token: run 'jobgate login' again when it expires"
	if tok.RefreshToken != "" {
		refresh = "refreshed automatically"
	}
	fmt.Fprintf(stdout, "Token saved in %s (expires %s, %s).\n", path, l.Expiry.Local().Format(time.RFC3339), refresh)
	return nil
}

// fetchResourceMetadata reads the RFC 9728 metadata of the MCP endpoint u: first at the
// path-inserted well-known URL (/.well-known/oauth-protected-resource/mcp), then at the root.
func fetchResourceMetadata(ctx context.Context, hc *http.Client, u string) (*resourceMetadata, error) {
	pu, _ := url.Parse(u)
	origin := pu.Scheme + "://" + pu.Host
	var urls []string
	if p := strings.TrimSuffix(pu.EscapedPath(), "/"); p != "" {
		urls = append(urls, origin+"/.well-known/oauth-protected-resource"+p)
	}
	urls = append(urls, origin+"/.well-known/oauth-protected-resource")
	var m resourceMetadata
	found, err := getFirstJSON(ctx, hc, urls, &m)
	switch {
	case err != nil:
		return nil, fmt.Errorf("login: cannot read the server's metadata: %w", err)
	case !found:
		return nil, fmt.Errorf("login: the server at %s publishes no RFC 9728 metadata (%s); pass --issuer and --resource", u, urls[len(urls)-1])
	case m.Resource == "":
		return nil, fmt.Errorf("login: the server's RFC 9728 metadata at %s has no resource", origin)
	}
	return &m, nil
}

// discoverIssuer reads the issuer's metadata, trying (as MCP clients do) RFC 8414 then OpenID
// discovery, path-inserted first, and checks the document names the issuer asked for.
func discoverIssuer(ctx context.Context, hc *http.Client, issuer string) (*serverMetadata, error) {
	iu, err := url.Parse(issuer)
	if err != nil || iu.Host == "" || (iu.Scheme != "https" && iu.Scheme != "http") || iu.RawQuery != "" || iu.Fragment != "" {
		return nil, fmt.Errorf("login: issuer %q is not an http(s) URL without query", issuer)
	}
	if err := secureURL("issuer", issuer); err != nil {
		return nil, fmt.Errorf("login: %w", err)
	}
	origin := iu.Scheme + "://" + iu.Host
	p := strings.TrimSuffix(iu.EscapedPath(), "/")
	urls := []string{origin + "/.well-known/oauth-authorization-server" + p, origin + "/.well-known/openid-configuration" + p}
	if p != "" {
		urls = append(urls, origin+p+"/.well-known/openid-configuration")
	}
	var m serverMetadata
	found, err := getFirstJSON(ctx, hc, urls, &m)
	switch {
	case err != nil:
		return nil, fmt.Errorf("login: cannot reach the identity provider %s: %w", issuer, err)
	case !found:
		return nil, fmt.Errorf("login: %s publishes no OAuth or OpenID metadata (tried %s); is it an issuer URL?", issuer, strings.Join(urls, ", "))
	case strings.TrimSuffix(m.Issuer, "/") != strings.TrimSuffix(issuer, "/"):
		// RFC 8414 §3.3 / OIDC Discovery §4.3: metadata for another issuer must not be used.
		return nil, fmt.Errorf("login: the metadata of %s names issuer %q; refusing it", issuer, m.Issuer)
	case m.TokenEndpoint == "":
		return nil, fmt.Errorf("login: the metadata of %s has no token_endpoint", issuer)
	}
	// Codes, tokens and the client secret go to these endpoints, and the authorization
	// endpoint is handed to the desktop's URL opener: each must be https (or loopback http),
	// whatever the issuer's own URL was.
	for _, e := range []struct{ name, u string }{
		{"authorization_endpoint", m.AuthorizationEndpoint}, {"token_endpoint", m.TokenEndpoint},
		{"device_authorization_endpoint", m.DeviceAuthorizationEndpoint}, {"revocation_endpoint", m.RevocationEndpoint},
	} {
		if e.u == "" {
			continue
		}
		if err := secureURL(e.name, e.u); err != nil {
			return nil, fmt.Errorf("login: the metadata of %s: %w", issuer, err)
		}
	}
	return &m, nil
}

// secureURL refuses a URL that credentials would cross a network in clear to: it must be
// https, or http to a loopback host (127.0.0.0/8, ::1, localhost), where nothing leaves the
// machine (as serve's --issuer discovery and RFC 8252 §8.3 allow). The error names the URL.
func secureURL(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("%s %q is not an absolute http(s) URL", what, cleanText(raw))
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return fmt.Errorf("%s %s must use https (plain http only to a loopback host: 127.0.0.0/8, ::1, localhost)", what, cleanText(raw))
	}
	return nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// getFirstJSON decodes the first of urls that answers 200 into out. A 404 (or 405/400 from
// servers that route unknown paths oddly) moves to the next; found is false when none did.
func getFirstJSON(ctx context.Context, hc *http.Client, urls []string, out any) (found bool, err error) {
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return false, flatErr(err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return false, fmt.Errorf("GET %s: %w", u, err)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			if err := json.Unmarshal(body, out); err != nil {
				return false, fmt.Errorf("GET %s: not a JSON metadata document (%v)", u, err)
			}
			return true, nil
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusBadRequest:
			continue
		default:
			return false, fmt.Errorf("GET %s: %s", u, resp.Status)
		}
	}
	return false, nil
}

func readClientSecret(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("login: --client-secret-file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("login: --client-secret-file %s is empty", file)
	}
	return s, nil
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func oauthConfig(m *serverMetadata, clientID, secret string, scopes []string) *oauth2.Config {
	style := oauth2.AuthStyleInParams // a public client sends only its client_id
	if secret != "" {
		style = oauth2.AuthStyleAutoDetect
	}
	return &oauth2.Config{
		ClientID: clientID, ClientSecret: secret, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: m.AuthorizationEndpoint, TokenURL: m.TokenEndpoint,
			DeviceAuthURL: m.DeviceAuthorizationEndpoint, AuthStyle: style},
	}
}

// idpContext carries the HTTP client x/oauth2 uses for the IdP's endpoints: see idpTransport.
func idpContext(ctx context.Context, m *serverMetadata, clientID, secret, resource string) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Timeout: loginHTTPTimeout, Transport: &idpTransport{
		base: http.DefaultTransport, tokenURL: m.TokenEndpoint, deviceURL: m.DeviceAuthorizationEndpoint,
		clientID: clientID, secret: secret, resource: resource}})
}

// idpTransport adds to each form POST to the token and device authorization endpoints what
// x/oauth2 cannot be told to send there: the RFC 8707 resource indicator (x/oauth2 has no
// option for it on refresh), so a standard IdP puts the server's resource URI in aud on every
// token, refreshed ones included; and, for a confidential client, its credentials on the
// device authorization request (RFC 8628 §3.1), which x/oauth2 sends with the client_id only.
type idpTransport struct {
	base                                            http.RoundTripper
	tokenURL, deviceURL, clientID, secret, resource string
}

func (t *idpTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	u := r.URL.String()
	isToken, isDevice := u == t.tokenURL, t.deviceURL != "" && u == t.deviceURL
	if r.Method != http.MethodPost || (!isToken && !isDevice) || r.Body == nil {
		return t.base.RoundTrip(r)
	}
	b, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	if t.resource != "" && form.Get("resource") == "" {
		form.Set("resource", t.resource)
	}
	if isDevice && t.secret != "" && r.Header.Get("Authorization") == "" {
		// RFC 6749 §2.3.1: form-urlencode id and secret before Basic.
		r.SetBasicAuth(url.QueryEscape(t.clientID), url.QueryEscape(t.secret))
		form.Del("client_secret")
	}
	enc := form.Encode()
	r.Body = io.NopCloser(strings.NewReader(enc))
	r.ContentLength = int64(len(enc))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(enc)), nil }
	return t.base.RoundTrip(r)
}

// deviceLogin runs the device authorization grant: it prints where to go and the code, then
// polls at the interval the IdP asks for (slower on slow_down) until the person answers or the
// code expires.
func deviceLogin(ctx context.Context, cfg *oauth2.Config, m *serverMetadata, stdout io.Writer) (*oauth2.Token, error) {
	if m.DeviceAuthorizationEndpoint == "" {
		return nil, fmt.Errorf("login: %s offers no device authorization (RFC 8628); sign in with --browser", m.Issuer)
	}
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		return nil, idpError("device authorization", cfg.ClientID, err)
	}
	if da.VerificationURI == "" || da.UserCode == "" || da.DeviceCode == "" {
		return nil, fmt.Errorf("login: %s answered the device authorization without a verification_uri, user_code or device_code", m.Issuer)
	}
	// The IdP's text goes to a terminal: cleanText drops control characters, so an IdP (or
	// whoever answers in its place) cannot send escape sequences that rewrite the screen, the
	// window title or the clipboard.
	var b strings.Builder
	fmt.Fprintf(&b, "To sign in, open\n\n    %s\n\nand enter the code\n\n    %s\n\n", cleanText(da.VerificationURI), cleanText(da.UserCode))
	if da.VerificationURIComplete != "" {
		fmt.Fprintf(&b, "(or open %s)\n", cleanText(da.VerificationURIComplete))
	}
	if !da.Expiry.IsZero() {
		fmt.Fprintf(&b, "Waiting for you to approve (the code expires in %s)...\n", shortDuration(time.Until(da.Expiry).Round(time.Second)))
	}
	fmt.Fprint(stdout, b.String())
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// x/oauth2 stops polling at the code's expiry by its own deadline.
			return nil, errors.New("login: the device code expired before it was approved; run 'jobgate login' again")
		}
		if ctx.Err() != nil {
			return nil, errors.New("login: stopped; nothing was stored")
		}
		return nil, idpError("device sign-in", cfg.ClientID, err)
	}
	return tok, nil
}

// browserLogin runs authorization code + PKCE (S256) with a loopback redirect (RFC 8252 §7.3):
// a listener on 127.0.0.1 on a port the system picks, the state checked on the callback.
func browserLogin(ctx context.Context, cfg *oauth2.Config, m *serverMetadata, resource string, o loginOpts, stdout io.Writer) (*oauth2.Token, error) {
	if m.AuthorizationEndpoint == "" {
		return nil, fmt.Errorf("login: %s has no authorization_endpoint; sign in without --browser", m.Issuer)
	}
	if len(m.CodeChallengeMethods) > 0 && !slices.Contains(m.CodeChallengeMethods, "S256") {
		// Metadata that lists methods without S256 cannot do PKCE as MCP requires it. (Some IdPs,
		// e.g. Entra ID, support S256 without listing any: absent is accepted.)
		return nil, fmt.Errorf("login: %s does not support PKCE S256 (code_challenge_methods_supported %v)", m.Issuer, m.CodeChallengeMethods)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("login: loopback listener for the redirect: %w", err)
	}
	c := *cfg
	c.RedirectURL = fmt.Sprintf("http://127.0.0.1:%d/callback", ln.Addr().(*net.TCPAddr).Port)
	state := randomString(32)
	verifier := oauth2.GenerateVerifier()
	authURL := c.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", resource))

	type result struct {
		code string
		err  error
	}
	done := make(chan result, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /callback", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1 {
			// Not this login's redirect (a stale tab, or a page trying to plant its own code):
			// refuse it and keep waiting for the real one.
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, page("Sign-in refused", "This redirect does not belong to the sign-in jobgate is waiting for (state mismatch)."))
			return
		}
		var res result
		// RFC 9207 §2.4: a response naming another issuer is a mix-up (a code from another
		// IdP, or one an attacker's IdP obtained, to be redeemed here): refuse it, error
		// responses included; and an IdP that says it sends iss must send it. Compared as
		// strings, against the issuer its metadata names.
		iss, hasIss := q.Get("iss"), q.Has("iss")
		switch e := q.Get("error"); {
		case hasIss && iss != m.Issuer:
			res.err = fmt.Errorf("login: the sign-in response names issuer %q, not %s (RFC 9207: a mix-up of identity providers); nothing was stored", cleanText(iss), m.Issuer)
		case !hasIss && m.IssInResponse:
			res.err = fmt.Errorf("login: the sign-in response has no iss, though %s advertises authorization_response_iss_parameter_supported (RFC 9207); nothing was stored", m.Issuer)
		case e != "":
			res.err = idpError("browser sign-in", c.ClientID, &oauth2.RetrieveError{ErrorCode: e, ErrorDescription: q.Get("error_description")})
		case q.Get("code") == "":
			res.err = errors.New("login: the identity provider redirected back without a code")
		default:
			res.code = q.Get("code")
		}
		if res.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, page("Sign-in failed", res.err.Error()))
		} else {
			fmt.Fprint(w, page("Signed in", "jobgate has the sign-in. You can close this tab and return to the terminal."))
		}
		select {
		case done <- res:
		default:
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	fmt.Fprintf(stdout, "To sign in, open this URL in a browser (waiting up to %s):\n\n    %s\n\n", shortDuration(o.timeout), authURL)
	if o.open {
		openBrowser(authURL)
	}
	timer := time.NewTimer(o.timeout)
	defer timer.Stop()
	var res result
	select {
	case res = <-done:
	case <-timer.C:
		return nil, fmt.Errorf("login: no sign-in came back within %s; run 'jobgate login --browser' again", shortDuration(o.timeout))
	case <-ctx.Done():
		return nil, errors.New("login: stopped; nothing was stored")
	}
	if res.err != nil {
		return nil, res.err
	}
	tok, err := c.Exchange(ctx, res.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, idpError("code exchange", c.ClientID, err)
	}
	return tok, nil
}

// openBrowser starts the desktop's URL opener, if there is one; failures are silent because
// the URL is printed anyway.
func openBrowser(u string) {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return
	}
	cmd := exec.Command(p, u)
	if cmd.Start() == nil {
		go func() { _ = cmd.Wait() }()
	}
}

func page(title, msg string) string {
	return "<!doctype html><meta charset=utf-8><title>jobgate: " + html.EscapeString(title) + "</title><h1>" +
		html.EscapeString(title) + "</h1><p>" + html.EscapeString(msg) + "</p>\n"
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// idpError turns an OAuth error from the identity provider into one line saying what to do.
func idpError(step, clientID string, err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return fmt.Errorf("login: %s: %w", step, flatErr(err))
	}
	desc := ""
	if re.ErrorDescription != "" {
		desc = " (" + cleanText(re.ErrorDescription) + ")"
	}
	switch re.ErrorCode {
	case "access_denied":
		return fmt.Errorf("login: sign-in was denied at the identity provider%s; nothing was stored", desc)
	case "expired_token":
		return errors.New("login: the device code expired before it was approved; run 'jobgate login' again")
	case "invalid_client", "unauthorized_client":
		return fmt.Errorf("login: the identity provider refused client %q: %s%s; check --client-id and --client-secret-file", clientID, re.ErrorCode, desc)
	case "invalid_scope":
		return fmt.Errorf("login: the identity provider refused the scopes: invalid_scope%s; pass --scope", desc)
	case "invalid_target":
		return fmt.Errorf("login: the identity provider refused the resource: invalid_target%s; check --resource", desc)
	case "":
		status := ""
		if re.Response != nil {
			status = re.Response.Status
		}
		return fmt.Errorf("login: %s: the identity provider answered %s", step, strings.TrimSpace(status+" "+cleanText(string(re.Body))))
	}
	return fmt.Errorf("login: %s: the identity provider answered %s%s", step, re.ErrorCode, desc)
}

// flatErr flattens an error's text: messages of this command are one line each.
func flatErr(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(cleanText(err.Error()))
}

// cleanText makes untrusted text (an IdP's error_description) one short printable line.
func cleanText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
