package devidp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
)

const testResource = "http://localhost:9/mcp"

var testUsers = []User{
	{Subject: "ana", Tenant: "acme", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
	{Subject: "bo", Tenant: "acme", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
	{Subject: "steward", Tenant: "acme", Scopes: []authz.Scope{authz.ScopeApprove}},
	{Subject: "gus", Tenant: "globex", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
}

type testIdP struct {
	*IdP
	srv    *httptest.Server
	issuer string
}

// startIdP serves a provider on a real loopback listener. The listener
// exists before New so the issuer can name its port.
func startIdP(t *testing.T, dir string) *testIdP {
	t.Helper()
	return startIdPWith(t, Options{Dir: dir})
}

// startIdPWith fills in Issuer, Resource and Users (when empty).
func startIdPWith(t *testing.T, o Options) *testIdP {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + srv.Listener.Addr().String() + "/oidc"
	o.Issuer, o.Resource = issuer, testResource
	if o.Users == nil {
		o.Users = testUsers
	}
	idp, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = idp.Handler()
	srv.Start()
	t.Cleanup(srv.Close)
	return &testIdP{IdP: idp, srv: srv, issuer: issuer}
}

type discovery struct {
	Issuer                string   `json:"issuer"`
	AuthorizationEndpoint string   `json:"authorization_endpoint"`
	TokenEndpoint         string   `json:"token_endpoint"`
	JWKSURI               string   `json:"jwks_uri"`
	CodeChallengeMethods  []string `json:"code_challenge_methods_supported"`
	GrantTypes            []string `json:"grant_types_supported"`
	ScopesSupported       []string `json:"scopes_supported"`
}

func (p *testIdP) discover(t *testing.T) discovery {
	t.Helper()
	resp, err := http.Get(p.issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("discovery: %s", resp.Status)
	}
	var d discovery
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

const redirectURI = "http://127.0.0.1:45678/callback" // loopback, any port (RFC 8252)

func oauthConfig(d discovery, scopes ...string) *oauth2.Config {
	return &oauth2.Config{
		ClientID:    CLIClientID,
		Endpoint:    oauth2.Endpoint{AuthURL: d.AuthorizationEndpoint, TokenURL: d.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams},
		RedirectURL: redirectURI,
		Scopes:      scopes,
	}
}

var (
	reAuthReq = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
	reCSRF    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// browser is a client that does not follow redirects, so each hop is checked.
func browser() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) *http.Response {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func location(t *testing.T, base string, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		t.Fatalf("%s %s: want a redirect, got %s: %s", resp.Request.Method, resp.Request.URL, resp.Status, b)
	}
	b, _ := url.Parse(base)
	l, err := b.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return l.String()
}

// login drives authorize → picker page → picker POST (as user) → callback and
// returns the code delivered to the redirect URI.
func (p *testIdP) login(t *testing.T, authURL, user, state string) string {
	t.Helper()
	return p.loginTo(t, authURL, user, state, redirectURI)
}

// loginTo is login for a client whose redirect URI is redirect.
func (p *testIdP) loginTo(t *testing.T, authURL, user, state, redirect string) string {
	t.Helper()
	c := browser()
	loginURL := location(t, authURL, get(t, c, authURL))
	if !strings.HasPrefix(loginURL, p.issuer+"/login?") {
		t.Fatalf("authorize sent the browser to %q, not the picker", loginURL)
	}
	resp := get(t, c, loginURL)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("picker: %s %s", resp.Status, body)
	}
	page := string(body)
	for _, want := range []string{"Development only", ">ana<", "globex", "jobs:approve"} {
		if !strings.Contains(page, want) {
			t.Fatalf("picker page lacks %q:\n%s", want, page)
		}
	}
	id, csrf := reAuthReq.FindStringSubmatch(page), reCSRF.FindStringSubmatch(page)
	if id == nil || csrf == nil {
		t.Fatalf("picker form lacks authRequestID or csrf:\n%s", page)
	}
	resp, err := c.PostForm(p.issuer+"/login", url.Values{"authRequestID": {id[1]}, "csrf": {csrf[1]}, "user": {user}})
	if err != nil {
		t.Fatal(err)
	}
	callback := location(t, p.issuer, resp)
	final := location(t, callback, get(t, c, callback))
	fu, _ := url.Parse(final)
	if !strings.HasPrefix(final, redirect+"?") || fu.Query().Get("state") != state || fu.Query().Get("code") == "" {
		t.Fatalf("callback redirected to %q", final)
	}
	return fu.Query().Get("code")
}

func verifier(t *testing.T, p *testIdP, d discovery) *authz.JWKSVerifier {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := authz.NewJWKSVerifier(ctx, authz.JWKSOptions{URL: d.JWKSURI, Issuer: p.issuer, Audience: testResource})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// TestCodePKCERefreshRestart is the whole public-client path over real HTTP:
// discovery, authorize with PKCE, the picker, the token endpoint, the access
// token verified by authz's JWKS verifier, refresh rotation, and a restart
// on the same data dir keeping the kid and the refresh token.
func TestCodePKCERefreshRestart(t *testing.T) {
	dir := t.TempDir()
	p := startIdP(t, dir)
	d := p.discover(t)
	if d.Issuer != p.issuer || !slices.Contains(d.CodeChallengeMethods, "S256") ||
		!slices.Contains(d.GrantTypes, "refresh_token") || d.JWKSURI != p.issuer+"/keys" ||
		!slices.Contains(d.ScopesSupported, "jobs:read") {
		t.Fatalf("discovery: %+v", d)
	}
	ctx := context.Background()
	// ana asks for more than she holds (jobs:admin) and no offline_access:
	// she gets read+write only, and a refresh token all the same.
	cfg := oauthConfig(d, "openid", "jobs:read", "jobs:write", "jobs:admin")
	pkce := oauth2.GenerateVerifier()
	code := p.login(t, cfg.AuthCodeURL("st-1", oauth2.S256ChallengeOption(pkce)), "ana", "st-1")

	if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption("wrong-"+pkce)); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("exchange with the wrong PKCE verifier: %v, want invalid_grant", err)
	}
	// The failed attempt above did not spend the code... or did; either way a fresh login must work.
	code = p.login(t, cfg.AuthCodeURL("st-2", oauth2.S256ChallengeOption(pkce)), "ana", "st-2")
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(pkce)); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("second use of a code: %v, want invalid_grant", err)
	}
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token")
	}
	v := verifier(t, p, d)
	checkAccess(t, v, tok.AccessToken, "ana", "acme", authz.ScopeRead, authz.ScopeWrite)

	// Refresh rotates: the new pair works, the old refresh token is spent.
	tok2, err := refresh(ctx, cfg, tok.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if tok2.RefreshToken == "" || tok2.RefreshToken == tok.RefreshToken {
		t.Fatalf("refresh did not rotate the refresh token")
	}
	checkAccess(t, v, tok2.AccessToken, "ana", "acme", authz.ScopeRead, authz.ScopeWrite)

	// Restart on the same dir: same kid, the live refresh token still works,
	// and a verifier that fetched the old key set verifies the new tokens.
	kid := p.KeyID()
	p.srv.Close()
	p2 := startIdP(t, dir)
	if p2.KeyID() != kid {
		t.Fatalf("kid changed across restart: %s → %s", kid, p2.KeyID())
	}
	d2 := p2.discover(t)
	cfg2 := oauthConfig(d2, cfg.Scopes...)
	tok3, err := refresh(ctx, cfg2, tok2.RefreshToken)
	if err != nil {
		t.Fatalf("refresh after restart: %v", err)
	}
	checkAccess(t, verifier(t, p2, d2), tok3.AccessToken, "ana", "acme", authz.ScopeRead, authz.ScopeWrite)
	if fi, err := os.Stat(filepath.Join(dir, "signing-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signing key file: %v %v", fi, err)
	}
	// The data dir holds no usable refresh token, only hashes.
	b, err := os.ReadFile(filepath.Join(dir, refreshFile))
	if err != nil || !strings.Contains(string(b), tokenHash(tok3.RefreshToken)) || strings.Contains(string(b), tok3.RefreshToken) {
		t.Fatalf("%s holds %s (err %v)", refreshFile, b, err)
	}
	// The spent token is remembered across the restart: reusing it fails (and revokes its
	// family: TestRefreshReuseRevokesFamily).
	if _, err := refresh(ctx, cfg2, tok.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("reused refresh token: %v, want invalid_grant", err)
	}
}

// TestScopesFromUser: a client asking for no jobs:* scope gets the user's own
// scopes; the tenant is the user's, never anything the client sent.
func TestScopesFromUser(t *testing.T) {
	p := startIdP(t, "")
	d := p.discover(t)
	cfg := oauthConfig(d, "openid")
	pkce := oauth2.GenerateVerifier()
	code := p.login(t, cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce)), "gus", "s")
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, p, d)
	checkAccess(t, v, tok.AccessToken, "gus", "globex", authz.ScopeRead, authz.ScopeWrite)

	// Asking for less than the user holds gives less: ana asks only jobs:read.
	cfg = oauthConfig(d, "jobs:read")
	code = p.login(t, cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce)), "ana", "s")
	tok, err = cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	checkAccess(t, v, tok.AccessToken, "ana", "acme", authz.ScopeRead)
}

// TestPublicClientNeedsPKCE: pkg/op refuses a public client's code exchange without PKCE.
func TestPublicClientNeedsPKCE(t *testing.T) {
	p := startIdP(t, "")
	d := p.discover(t)
	cfg := oauthConfig(d, "openid", "jobs:read")
	c := browser()
	resp := get(t, c, cfg.AuthCodeURL("s"))
	loc := location(t, cfg.Endpoint.AuthURL, resp)
	// Either authorize refuses at once (error to the redirect URI) or the exchange does.
	if strings.HasPrefix(loc, redirectURI) {
		if u, _ := url.Parse(loc); u.Query().Get("error") == "" {
			t.Fatalf("authorize without PKCE redirected without error: %s", loc)
		}
		return
	}
	code := p.login(t, cfg.AuthCodeURL("s"), "ana", "s")
	if _, err := cfg.Exchange(context.Background(), code); err == nil {
		t.Fatal("code exchange without PKCE succeeded for a public client")
	}
}

// TestPickerRefusals: a wrong CSRF token, a cross-site POST, an unknown user
// and an unknown request are refused and complete nothing.
func TestPickerRefusals(t *testing.T) {
	p := startIdP(t, "")
	d := p.discover(t)
	cfg := oauthConfig(d, "openid", "jobs:read")
	pkce := oauth2.GenerateVerifier()
	c := browser()
	loginURL := location(t, cfg.Endpoint.AuthURL, get(t, c, cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce))))
	id := mustQuery(t, loginURL, "authRequestID")
	good := p.csrfToken(id)
	post := func(form url.Values, hdr http.Header) int {
		req, _ := http.NewRequest("POST", p.issuer+"/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	cases := []struct {
		name string
		form url.Values
		hdr  http.Header
		want int
	}{
		{"no csrf", url.Values{"authRequestID": {id}, "user": {"ana"}}, nil, 403},
		{"csrf of another request", url.Values{"authRequestID": {id}, "csrf": {p.csrfToken("other")}, "user": {"ana"}}, nil, 403},
		{"cross-site", url.Values{"authRequestID": {id}, "csrf": {good}, "user": {"ana"}}, http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403},
		{"unknown user", url.Values{"authRequestID": {id}, "csrf": {good}, "user": {"mallory"}}, nil, 400},
		{"unknown request", url.Values{"authRequestID": {"nope"}, "csrf": {p.csrfToken("nope")}, "user": {"ana"}}, nil, 400},
	}
	for _, tc := range cases {
		if got := post(tc.form, tc.hdr); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	if ar, err := p.store.AuthRequestByID(context.Background(), id); err != nil || ar.Done() {
		t.Fatalf("auth request after refused posts: done=%v err=%v", ar != nil && ar.Done(), err)
	}
	if resp := get(t, c, p.issuer+"/login?authRequestID=nope"); resp.StatusCode != 400 {
		t.Fatalf("picker for an unknown request: %s", resp.Status)
	}
}

// TestPromptNone: no SSO session is kept, so prompt=none answers login_required.
func TestPromptNone(t *testing.T) {
	p := startIdP(t, "")
	cfg := oauthConfig(p.discover(t), "openid", "jobs:read")
	c := browser()
	u := cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()), oauth2.SetAuthURLParam("prompt", "none"))
	loc := location(t, u, get(t, c, u))
	if got := mustQuery(t, loc, "error"); got != "login_required" || !strings.HasPrefix(loc, redirectURI) {
		t.Fatalf("prompt=none redirected to %s", loc)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Resource: testResource, Users: testUsers},
		{Issuer: "http://example.com/oidc", Resource: testResource, Users: testUsers},
		{Issuer: "http://localhost/oidc?x=1", Resource: testResource, Users: testUsers},
		{Issuer: "http://localhost/oidc", Users: testUsers},
		{Issuer: "http://localhost/oidc", Resource: testResource},
		{Issuer: "http://localhost/oidc", Resource: testResource, Users: []User{testUsers[0], testUsers[0]}},
	} {
		if _, err := New(o); err == nil || !strings.HasPrefix(err.Error(), "devidp: ") {
			t.Errorf("New(%+v) = %v, want a devidp error", o, err)
		}
	}
}

func mustQuery(t *testing.T, u, key string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Query().Get(key)
}

func refresh(ctx context.Context, cfg *oauth2.Config, rt string) (*oauth2.Token, error) {
	return cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: rt, Expiry: time.Now().Add(-time.Hour)}).Token()
}

func isOAuthError(err error, code string) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == code
}

func checkAccess(t *testing.T, v authz.Verifier, token, sub, tenant string, scopes ...authz.Scope) {
	t.Helper()
	c, err := v.Verify(context.Background(), token)
	if err != nil {
		t.Fatalf("access token refused by authz: %v", err)
	}
	want := authz.Principal{Tenant: tenant, Subject: sub, Scopes: scopes}
	if c.Principal.Tenant != want.Tenant || c.Principal.Subject != want.Subject || !slices.Equal(c.Principal.Scopes, want.Scopes) {
		t.Fatalf("principal %+v, want %+v", c.Principal, want)
	}
	if d := time.Until(c.Expiry); d <= 0 || d > AccessTokenTTL+time.Minute {
		t.Fatalf("access token expiry %v away", d)
	}
}
