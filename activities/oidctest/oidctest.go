package oidctest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/testenv"
)

// GrantDeviceCode is the device authorization grant type (RFC 8628).
const GrantDeviceCode = "urn:ietf:params:oauth:grant-type:device_code"

// User is one account of the provider. The login page lists them by Sub.
type User struct {
	Sub string
	// Tenant becomes the "tenant" claim; empty means the user's tokens have no tenant claim.
	Tenant string
	// Scopes are the resource scopes the user may be granted (e.g. jobs:read).
	Scopes []string
	// Claims are further claims for the access and ID tokens (name, email, or a tenant claim
	// under another name).
	Claims map[string]any
}

// Client is an oidc-provider client registration.
type Client struct {
	ID string
	// Secret empty means a public client (token_endpoint_auth_method none, PKCE).
	Secret       string
	RedirectURIs []string
	// GrantTypes default to authorization_code, refresh_token and the device code grant.
	GrantTypes []string
	// Native (application_type native): http loopback redirect URIs match on any port (RFC 8252).
	Native bool
	// PostLogoutRedirectURIs are where RP-initiated logout (/session/end) may send the browser
	// back to; none: the provider refuses a post_logout_redirect_uri.
	PostLogoutRedirectURIs []string
}

// PublicClient is a native public client with a loopback redirect on any port, allowed the
// code, refresh and device grants: what a CLI registers.
func PublicClient(id string) Client {
	return Client{ID: id, Native: true, RedirectURIs: []string{"http://127.0.0.1/callback", "http://localhost/callback"}}
}

// Config is what the provider is started with.
type Config struct {
	// Resource is the resource indicator (RFC 8707) its access tokens are for by default: the
	// aud of every JWT access token. Required.
	Resource string
	// OtherResources are further resource indicators it issues tokens for (a client asks with
	// resource=…): tokens a jobgate serving Resource must refuse.
	OtherResources []string
	Users          []User
	Clients        []Client
	// AccessTokenTTL and DeviceCodeTTL default to 10 minutes.
	AccessTokenTTL, DeviceCodeTTL time.Duration
}

// Provider is one running oidc-provider process.
type Provider struct {
	// Issuer is its exact issuer URL (http://127.0.0.1:PORT, no trailing slash).
	Issuer string
	// JWKSURL is its JWK Set URL.
	JWKSURL string

	mu     sync.Mutex
	stderr strings.Builder
}

// Dir is tests/oidcidp, the Node project with idp.mjs, found from this file's place in the module.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "tests", "oidcidp")
}

// Start runs a provider for t and kills it when t ends.
func Start(t testing.TB, c Config) *Provider {
	t.Helper()
	testenv.Heavy(t, "oidctest: starts the oidc-provider Node.js process")
	if c.Resource == "" {
		t.Fatal("oidctest.Config.Resource is required")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node not found on PATH: the second OpenID Provider (tests/oidcidp, npm oidc-provider) needs Node.js 20+ with npm")
	}
	dir := Dir()
	ensureDeps(t, dir)

	cfgPath := filepath.Join(t.TempDir(), "oidcidp.json")
	b, err := json.Marshal(c.fileConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, "idp.mjs", cfgPath)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe() // closed at cleanup: the process exits on EOF too
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{}
	cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.stderr.Write(b)
		return len(b), nil
	})
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("oidctest: start node idp.mjs: %v", err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("oidc-provider stderr:\n%s", p.Stderr())
		}
	})

	// The first JSON line on stdout names the issuer; it is printed once the port listens.
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "{") {
				select {
				case lines <- l:
				default:
				}
			}
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("oidctest: idp.mjs exited before naming its issuer; stderr:\n%s", p.Stderr())
		}
		var hello struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := json.Unmarshal([]byte(l), &hello); err != nil || hello.Issuer == "" {
			t.Fatalf("oidctest: idp.mjs printed %q, want {\"issuer\":…}", l)
		}
		p.Issuer, p.JWKSURL = hello.Issuer, hello.JWKSURI
	case <-time.After(30 * time.Second):
		t.Fatalf("oidctest: idp.mjs named no issuer within 30s; stderr:\n%s", p.Stderr())
	}
	return p
}

// Stderr is what the process wrote on stderr so far (server errors are logged there).
func (p *Provider) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func ensureDeps(t testing.TB, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "oidc-provider", "package.json")); err == nil {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Missing(t, "tests/oidcidp/node_modules is not installed and npm is not on PATH: run npm ci in tests/oidcidp")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in tests/oidcidp: %v\n%s", err, out)
	}
}

// fileConfig is the JSON idp.mjs reads (see the comment at its top).
func (c Config) fileConfig() map[string]any {
	users := []map[string]any{}
	for _, u := range c.Users {
		claims := map[string]any{}
		for k, v := range u.Claims {
			claims[k] = v
		}
		if u.Tenant != "" {
			claims["tenant"] = u.Tenant
		}
		users = append(users, map[string]any{"sub": u.Sub, "scopes": nonNil(u.Scopes), "claims": claims})
	}
	clients := []map[string]any{}
	for _, cl := range c.Clients {
		gt := cl.GrantTypes
		if len(gt) == 0 {
			gt = []string{"authorization_code", "refresh_token", GrantDeviceCode}
		}
		m := map[string]any{
			"client_id":      cl.ID,
			"redirect_uris":  nonNil(cl.RedirectURIs),
			"grant_types":    gt,
			"response_types": []string{"code"},
		}
		if cl.Secret == "" {
			m["token_endpoint_auth_method"] = "none"
		} else {
			m["client_secret"] = cl.Secret
			m["token_endpoint_auth_method"] = "client_secret_basic"
		}
		if cl.Native {
			m["application_type"] = "native"
		}
		if len(cl.PostLogoutRedirectURIs) > 0 {
			m["post_logout_redirect_uris"] = cl.PostLogoutRedirectURIs
		}
		clients = append(clients, m)
	}
	out := map[string]any{
		"resources": append([]string{c.Resource}, c.OtherResources...),
		"users":     users,
		"clients":   clients,
	}
	if c.AccessTokenTTL > 0 {
		out["access_token_ttl"] = int(c.AccessTokenTTL / time.Second)
	}
	if c.DeviceCodeTTL > 0 {
		out["device_code_ttl"] = int(c.DeviceCodeTTL / time.Second)
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// browser is hc (or a fresh client with a cookie jar) that follows redirects only while they
// stay on the provider: the client's redirect URI (often a loopback port nobody listens on) is
// returned, not visited.
func (p *Provider) browser(t testing.TB, hc *http.Client) *http.Client {
	t.Helper()
	var c http.Client
	if hc != nil {
		c = *hc
	}
	if c.Jar == nil {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Jar = jar
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > 20 {
			return fmt.Errorf("oidctest: more than 20 redirects")
		}
		if !strings.HasPrefix(req.URL.String(), p.Issuer+"/") {
			return http.ErrUseLastResponse
		}
		return nil
	}
	return &c
}

// page is one response the helpers looked at.
type page struct {
	url  *url.URL
	code int
	body string
	loc  string // Location of a redirect that left the provider
}

func (p *Provider) do(t testing.TB, c *http.Client, method, u string, form url.Values) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatalf("oidctest: %s %s: %v", method, u, err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("oidctest: %s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	pg := page{url: resp.Request.URL, code: resp.StatusCode, body: string(b)}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if err != nil {
			t.Fatalf("oidctest: bad Location %q", resp.Header.Get("Location"))
		}
		pg.loc = loc.String()
	}
	return pg
}

var (
	formRe   = regexp.MustCompile(`(?is)<form[^>]*\baction="([^"]*)"[^>]*>(.*?)</form>`)
	inputRe  = regexp.MustCompile(`(?is)<input\b[^>]*>`)
	nameRe   = regexp.MustCompile(`(?i)\bname="([^"]*)"`)
	valueRe  = regexp.MustCompile(`(?i)\bvalue="([^"]*)"`)
	loginRe  = regexp.MustCompile(`action="(/interaction/[^"/]+/login)"`)
	doneRe   = regexp.MustCompile(`id="device-done"`)
	errorsRe = regexp.MustCompile(`(?is)<p>error: ([^<]*)</p>`)
)

// formOf is the action and the input fields of the form with id (the provider's own device forms).
func formOf(t testing.TB, pg page, id string) (string, url.Values) {
	t.Helper()
	for _, m := range formRe.FindAllStringSubmatch(pg.body, -1) {
		whole := m[0]
		if id != "" && !strings.Contains(whole, `id="`+id+`"`) {
			continue
		}
		vals := url.Values{}
		for _, in := range inputRe.FindAllString(m[2], -1) {
			n := nameRe.FindStringSubmatch(in)
			if n == nil {
				continue
			}
			v := ""
			if vm := valueRe.FindStringSubmatch(in); vm != nil {
				v = html.UnescapeString(vm[1])
			}
			vals.Set(html.UnescapeString(n[1]), v)
		}
		action, err := pg.url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatalf("oidctest: bad form action %q", m[1])
		}
		return action.String(), vals
	}
	t.Fatalf("oidctest: no form %q on %s (status %d):\n%s", id, pg.url, pg.code, pg.body)
	return "", nil
}

// pickUser is the login page's POST: sub picks a user, "" denies.
func (p *Provider) pickUser(t testing.TB, c *http.Client, pg page, sub string) page {
	t.Helper()
	m := loginRe.FindStringSubmatch(pg.body)
	if m == nil {
		t.Fatalf("oidctest: expected the login page, got %s (status %d):\n%s", pg.url, pg.code, pg.body)
	}
	form := url.Values{"sub": {sub}}
	if sub == "" {
		form = url.Values{"action": {"deny"}}
	}
	return p.do(t, c, http.MethodPost, p.Issuer+m[1], form)
}

// Login acts as the human at authorizeURL (a full authorization request URL of this provider):
// it follows the provider's pages with hc's cookie jar (nil: a fresh one), picks subject on the
// login page, lets consent be granted, and returns the URL the provider redirects the browser
// to: the client's redirect URI with code and state (or error). If hc's jar already holds a
// session, the login page may be skipped.
func (p *Provider) Login(t testing.TB, hc *http.Client, authorizeURL, subject string) string {
	t.Helper()
	c := p.browser(t, hc)
	pg := p.do(t, c, http.MethodGet, authorizeURL, nil)
	if pg.loc == "" {
		pg = p.pickUser(t, c, pg, subject)
	}
	if pg.loc == "" {
		t.Fatalf("oidctest: login as %q did not return to the client: %s (status %d):\n%s", subject, pg.url, pg.code, pg.body)
	}
	return pg.loc
}

// Deny acts as a human who presses Deny on the login page; it returns the client's redirect
// URL, which carries error=access_denied.
func (p *Provider) Deny(t testing.TB, hc *http.Client, authorizeURL string) string {
	t.Helper()
	c := p.browser(t, hc)
	pg := p.do(t, c, http.MethodGet, authorizeURL, nil)
	pg = p.pickUser(t, c, pg, "")
	if pg.loc == "" {
		t.Fatalf("oidctest: deny did not return to the client: %s (status %d):\n%s", pg.url, pg.code, pg.body)
	}
	return pg.loc
}

// deviceConfirmPage opens the verification page for uriOrCode (verification_uri_complete, or
// a bare user code) and submits the code: the confirm page.
func (p *Provider) deviceConfirmPage(t testing.TB, c *http.Client, uriOrCode string) page {
	t.Helper()
	u := uriOrCode
	if !strings.Contains(u, "://") {
		u = p.Issuer + "/device?user_code=" + url.QueryEscape(uriOrCode)
	}
	// GET with user_code answers an auto-submitting form (xsrf + user_code); submit it.
	pg := p.do(t, c, http.MethodGet, u, nil)
	action, vals := formOf(t, pg, "")
	pg = p.do(t, c, http.MethodPost, action, vals)
	if m := errorsRe.FindStringSubmatch(pg.body); m != nil {
		t.Fatalf("oidctest: the device page refused the code %q: %s", uriOrCode, m[1])
	}
	return pg
}

// ApproveDevice acts as the human who opens the verification URI (verification_uri_complete,
// or a bare user code), confirms the code and signs in as subject: the device's poll then gets
// its tokens.
func (p *Provider) ApproveDevice(t testing.TB, uriOrCode, subject string) {
	t.Helper()
	c := p.browser(t, nil)
	pg := p.deviceConfirmPage(t, c, uriOrCode)
	action, vals := formOf(t, pg, "op.deviceConfirmForm")
	pg = p.do(t, c, http.MethodPost, action, vals)
	pg = p.pickUser(t, c, pg, subject)
	if !doneRe.MatchString(pg.body) {
		t.Fatalf("oidctest: device approval as %q did not finish: %s (status %d):\n%s", subject, pg.url, pg.code, pg.body)
	}
}

// DenyDevice acts as the human who aborts on the device confirm page: the device's poll then
// gets access_denied.
func (p *Provider) DenyDevice(t testing.TB, uriOrCode string) {
	t.Helper()
	c := p.browser(t, nil)
	pg := p.deviceConfirmPage(t, c, uriOrCode)
	action, vals := formOf(t, pg, "op.deviceConfirmForm")
	vals.Del("confirm")
	vals.Set("abort", "yes")
	pg = p.do(t, c, http.MethodPost, action, vals)
	if !strings.Contains(pg.body, "AbortedError") {
		t.Fatalf("oidctest: aborting the device code did not answer the aborted page: %s (status %d):\n%s", pg.url, pg.code, pg.body)
	}
}

// Token is what a client obtained from the token endpoint.
type Token struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	IDToken      string `json:"id_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
	Scope        string `json:"scope"`
}

// AuthCode runs the whole authorization code + PKCE flow for the public client clientID as
// subject, for resource ("" = the default) and scope, with redirectURI (one the client allows),
// and returns the token response: a test's quick way to a real token of this provider.
func (p *Provider) AuthCode(t testing.TB, clientID, redirectURI, subject, resource, scope string) Token {
	t.Helper()
	verifier := rand.Text() + rand.Text()
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"client_id":             {clientID},
		"response_type":         {"code"},
		"redirect_uri":          {redirectURI},
		"scope":                 {scope},
		"state":                 {rand.Text()},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}
	if resource != "" {
		q.Set("resource", resource)
	}
	back := p.Login(t, nil, p.Issuer+"/auth?"+q.Encode(), subject)
	bu, err := url.Parse(back)
	if err != nil {
		t.Fatal(err)
	}
	code := bu.Query().Get("code")
	if code == "" {
		t.Fatalf("oidctest: no code in the redirect %s", back)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirectURI},
		"client_id": {clientID}, "code_verifier": {verifier}}
	if resource != "" {
		form.Set("resource", resource)
	}
	resp, err := http.PostForm(p.Issuer+"/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("oidctest: token endpoint answered %d: %s", resp.StatusCode, b)
	}
	var tok Token
	if err := json.Unmarshal(b, &tok); err != nil {
		t.Fatal(err)
	}
	return tok
}
