package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
)

// These tests run the login, whoami and logout commands in-process against the real dev
// identity provider (frontend/devidp, zitadel's pkg/op) on a loopback listener. The same
// listener serves the RFC 9728 metadata a jobgate server would (only that document: the MCP
// endpoint itself is exercised in tests/cli_login_test.go). The "browser" is an HTTP client
// posting the provider's dev-user picker, as devidp's own tests do.

var loginUsers = []devidp.User{
	{Subject: "ana", Tenant: "acme", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
	{Subject: "gus", Tenant: "globex", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
}

type loginIdP struct {
	*devidp.IdP
	srv      *httptest.Server
	base     string // http://127.0.0.1:port
	issuer   string
	resource string // base + "/mcp": the URL the commands use is the resource itself
	// offset shifts the provider's clock (not this process's): issuing tokens that are
	// already expired makes the next command refresh without waiting an hour.
	offset atomic.Int64
	// prm is the RFC 9728 document served; nil serves 404.
	prm atomic.Pointer[map[string]any]
	// metaPatch, when set, is merged into the issuer's metadata documents (a null deletes).
	metaPatch atomic.Pointer[map[string]any]
	// mux serves the whole origin; tests add endpoints of their own to it.
	mux *http.ServeMux
}

func startLoginIdP(t *testing.T, o devidp.Options) *loginIdP {
	t.Helper()
	p := &loginIdP{}
	p.srv = httptest.NewUnstartedServer(nil)
	p.base = "http://" + p.srv.Listener.Addr().String()
	p.issuer, p.resource = p.base+"/oidc", p.base+"/mcp"
	o.Issuer, o.Resource, o.Users = p.issuer, p.resource, loginUsers
	o.Now = func() time.Time { return time.Now().Add(time.Duration(p.offset.Load())) }
	idp, err := devidp.New(o)
	if err != nil {
		t.Fatal(err)
	}
	p.IdP = idp
	p.setPRM(map[string]any{"resource": p.resource, "authorization_servers": []string{p.issuer},
		"scopes_supported": authz.ScopeStrings(authz.AllScopes()), "bearer_methods_supported": []string{"header"}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		m := p.prm.Load()
		if m == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(*m)
	})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		patch := p.metaPatch.Load()
		if patch == nil || !strings.Contains(r.URL.Path, "/.well-known/") {
			idp.Handler().ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		idp.Handler().ServeHTTP(rec, r)
		var m map[string]any
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &m) != nil {
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		for k, v := range *patch {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m)
	}))
	p.mux = mux
	p.srv.Config.Handler = mux
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

func (p *loginIdP) setPRM(m map[string]any) {
	if m == nil {
		p.prm.Store(nil)
		return
	}
	p.prm.Store(&m)
}

// isolate points the user config dir at a fresh directory and clears the token variables.
func isolate(t *testing.T) (storePath string) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("HOME", dir)
	t.Setenv("JOBGATE_TOKEN", "")
	t.Setenv("JOBGATE_URL", "")
	return filepath.Join(dir, "jobgate", "tokens.json")
}

// streamBuf is a command's stdout that a test can wait on while the command runs.
type streamBuf struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{}
}

func newStreamBuf() *streamBuf { return &streamBuf{changed: make(chan struct{}, 1)} }

func (s *streamBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.b.Write(p)
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (s *streamBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// await returns re's submatches once the output has them; it fails the test when the command
// ends (done) or a minute passes first.
func (s *streamBuf) await(t *testing.T, re *regexp.Regexp, done <-chan error) []string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		if m := re.FindStringSubmatch(s.String()); m != nil {
			return m
		}
		select {
		case <-s.changed:
		case err := <-done:
			t.Fatalf("the command ended (%v) before printing %s:\n%s", err, re, s.String())
		case <-deadline:
			t.Fatalf("no %s within a minute:\n%s", re, s.String())
		}
	}
}

// cmdRun is a command running in the background.
type cmdRun struct {
	out, errOut *streamBuf
	done        chan error
}

func start(args ...string) *cmdRun {
	c := &cmdRun{out: newStreamBuf(), errOut: newStreamBuf(), done: make(chan error, 1)}
	go func() { c.done <- run(args, c.out, c.errOut) }()
	return c
}

func (c *cmdRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-c.done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("command did not finish:\n%s", c.out.String())
		return nil
	}
}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	c := start(args...)
	if err := c.wait(t); err != nil {
		t.Fatalf("jobgate %s: %v\n%s%s", strings.Join(args, " "), err, c.out.String(), c.errOut.String())
	}
	return c.out.String()
}

var (
	reUserCode = regexp.MustCompile(`(?s)open\n\n    (http\S+)\n\nand enter the code\n\n    (\S+)\n`)
	reAuthURL  = regexp.MustCompile(`(?s)in a browser \(waiting up to [^)]+\):\n\n    (http\S+)\n`)
	reCSRF     = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	reAuthReq  = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
)

// noRedirect is a browser whose hops the test follows itself.
func noRedirect() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func fetch(t *testing.T, c *http.Client, method, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if method == http.MethodPost {
		resp, err = c.PostForm(u, form)
	} else {
		resp, err = c.Get(u)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// approveDevice plays the person: opens verification_uri with the user code typed in, picks
// user (or denies when user is ""), as the device page's form does.
func approveDevice(t *testing.T, verificationURI, userCode, user string) {
	t.Helper()
	c := noRedirect()
	resp, page := fetch(t, c, http.MethodGet, verificationURI+"?user_code="+url.QueryEscape(userCode), nil)
	m := reCSRF.FindStringSubmatch(page)
	if resp.StatusCode != 200 || m == nil {
		t.Fatalf("device page: %s\n%s", resp.Status, page)
	}
	form := url.Values{"user_code": {userCode}, "csrf": {m[1]}}
	if user == "" {
		form.Set("deny", "1")
	} else {
		form.Set("user", user)
	}
	resp, page = fetch(t, c, http.MethodPost, verificationURI, form)
	if resp.StatusCode != 200 {
		t.Fatalf("device answer: %s\n%s", resp.Status, page)
	}
}

// loginByDevice runs `jobgate login` (plus args) and approves its code as user ("" denies).
func loginByDevice(t *testing.T, p *loginIdP, user string, args ...string) (*cmdRun, error) {
	t.Helper()
	c := start(append([]string{"login", "--url", p.resource}, args...)...)
	m := c.out.await(t, reUserCode, c.done)
	approveDevice(t, m[1], m[2], user)
	return c, c.wait(t)
}

// browserSignIn follows the sign-in URL the CLI printed: authorize → picker → pick user →
// callback → the CLI's loopback redirect. It returns the loopback's answer.
func browserSignIn(t *testing.T, p *loginIdP, authURL, user string) (int, string) {
	t.Helper()
	return browserSignInEdit(t, p, authURL, user, nil)
}

// browserSignInEdit is browserSignIn with edit applied to the redirect's query before the
// browser follows it to the loopback (an IdP that adds or changes parameters).
func browserSignInEdit(t *testing.T, p *loginIdP, authURL, user string, edit func(url.Values)) (int, string) {
	t.Helper()
	c := noRedirect()
	next := func(resp *http.Response) string {
		t.Helper()
		l, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if err != nil || resp.StatusCode/100 != 3 {
			t.Fatalf("%s: want a redirect, got %s", resp.Request.URL, resp.Status)
		}
		return l.String()
	}
	resp, _ := fetch(t, c, http.MethodGet, authURL, nil)
	resp, page := fetch(t, c, http.MethodGet, next(resp), nil)
	id, csrf := reAuthReq.FindStringSubmatch(page), reCSRF.FindStringSubmatch(page)
	if id == nil || csrf == nil {
		t.Fatalf("picker: %s\n%s", resp.Status, page)
	}
	resp, _ = fetch(t, c, http.MethodPost, p.issuer+"/login", url.Values{"authRequestID": {id[1]}, "csrf": {csrf[1]}, "user": {user}})
	resp, _ = fetch(t, c, http.MethodGet, next(resp), nil)
	loopback := next(resp)
	if !strings.HasPrefix(loopback, "http://127.0.0.1:") || !strings.Contains(loopback, "/callback?") {
		t.Fatalf("the IdP redirected to %q, not the CLI's loopback", loopback)
	}
	if edit != nil {
		lu, _ := url.Parse(loopback)
		q := lu.Query()
		edit(q)
		lu.RawQuery = q.Encode()
		loopback = lu.String()
	}
	resp, page = fetch(t, c, http.MethodGet, loopback, nil)
	return resp.StatusCode, page
}

func readStore(t *testing.T, path string) *tokenFile {
	t.Helper()
	tf, err := loadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	return tf
}

// checkStoreFile: 0600 in a 0700 dir, no temporary files left behind.
func checkStoreFile(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Errorf("token store mode %04o in dir %04o, want 0600 in 0700", fi.Mode().Perm(), di.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("token store dir holds %d files, want only tokens.json", len(entries))
	}
}

func verifyAccess(t *testing.T, p *loginIdP, tok, sub, tenant string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := authz.NewJWKSVerifier(ctx, authz.JWKSOptions{URL: p.issuer + "/keys", Issuer: p.issuer, Audience: p.resource})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	c, err := v.Verify(ctx, tok)
	if err != nil {
		t.Fatalf("the stored access token does not verify as the server would: %v", err)
	}
	if c.Principal.Subject != sub || c.Principal.Tenant != tenant {
		t.Fatalf("stored token is %s/%s, want %s/%s", c.Principal.Tenant, c.Principal.Subject, tenant, sub)
	}
}

// refreshAt trades rt at the IdP directly and reports the OAuth error code ("" on success).
func refreshAt(p *loginIdP, rt string) string {
	cfg := &oauth2.Config{ClientID: defaultClientID, Endpoint: oauth2.Endpoint{TokenURL: p.issuer + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	_, err := cfg.TokenSource(context.Background(), &oauth2.Token{RefreshToken: rt}).Token()
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// TestDeviceLoginRefreshWhoamiLogout: the default flow end to end. The device login stores a
// token the server's own JWKS verifier accepts (0600, keyed by issuer + resource); whoami reads
// it; an expired token is refreshed on use and the rotated refresh token saved; logout revokes
// it at the IdP and deletes the entry.
func TestDeviceLoginRefreshWhoamiLogout(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{Dir: t.TempDir()})
	// Tokens from an IdP clock almost an access-token lifetime behind: they expire within the
	// refresh margin, so the next command must refresh. (Not past exp: pkg/op then answers a
	// negative expires_in as a huge unsigned number, which x/oauth2 rightly refuses to parse.)
	p.offset.Store(int64(-devidp.AccessTokenTTL + refreshMargin/2))
	c, err := loginByDevice(t, p, "ana")
	if err != nil {
		t.Fatalf("login: %v\n%s", err, c.out.String())
	}
	out := c.out.String()
	for _, want := range []string{"Signed in to " + p.issuer + " as ana (tenant acme; scopes jobs:read jobs:write) for " + p.resource, store} {
		if !strings.Contains(out, want) {
			t.Errorf("login output lacks %q:\n%s", want, out)
		}
	}
	checkStoreFile(t, store)
	tf := readStore(t, store)
	if len(tf.Logins) != 1 {
		t.Fatalf("store: %+v", tf)
	}
	l := tf.Logins[0]
	if l.Issuer != p.issuer || l.Resource != p.resource || l.ClientID != defaultClientID || l.TokenEndpoint != p.issuer+"/oauth/token" ||
		l.RevocationEndpoint != p.issuer+"/revoke" || l.RefreshToken == "" || time.Until(l.Expiry) > refreshMargin {
		t.Fatalf("stored login: %+v", l)
	}
	first := l

	p.offset.Store(0)
	who := runOK(t, "whoami", "--url", p.resource)
	for _, want := range []string{"issuer:   " + p.issuer, "subject:  ana", "tenant:   acme", "scopes:   jobs:read jobs:write", "(in 59m)", "without verifying"} {
		if !strings.Contains(who, want) {
			t.Errorf("whoami lacks %q:\n%s", want, who)
		}
	}
	l = readStore(t, store).Logins[0]
	if l.AccessToken == first.AccessToken || l.RefreshToken == first.RefreshToken || time.Until(l.Expiry) < 50*time.Minute {
		t.Fatalf("whoami did not refresh and save the expiring sign-in: new access token %v, new refresh token %v, expires in %s",
			l.AccessToken != first.AccessToken, l.RefreshToken != first.RefreshToken, time.Until(l.Expiry))
	}
	checkStoreFile(t, store)
	verifyAccess(t, p, l.AccessToken, "ana", "acme")
	if code := refreshAt(p, first.RefreshToken); code != "invalid_grant" {
		t.Fatalf("the spent refresh token: %q, want invalid_grant (rotation)", code)
	}

	// A token given explicitly wins over the stored login.
	t.Setenv("JOBGATE_TOKEN", first.AccessToken)
	if who := runOK(t, "whoami", "--url", p.resource); !strings.Contains(who, "token:    env JOBGATE_TOKEN") || strings.Contains(who, "(in 59m)") {
		t.Errorf("whoami with JOBGATE_TOKEN:\n%s", who)
	}
	t.Setenv("JOBGATE_TOKEN", "")

	bye := runOK(t, "logout", "--url", p.resource)
	if !strings.Contains(bye, "refresh token revoked; stored tokens deleted") {
		t.Errorf("logout: %s", bye)
	}
	if code := refreshAt(p, l.RefreshToken); code != "invalid_grant" {
		t.Fatalf("refresh after logout: %q, want invalid_grant", code)
	}
	if tf := readStore(t, store); len(tf.Logins) != 0 {
		t.Fatalf("logout left %+v", tf.Logins)
	}
	c = start("whoami", "--url", p.resource)
	if err := c.wait(t); err == nil || !strings.Contains(err.Error(), "run 'jobgate login'") {
		t.Fatalf("whoami after logout: %v", err)
	}
}

// TestBrowserLogin: --browser does code + PKCE through a 127.0.0.1 redirect; a redirect with
// another state is refused and does not end the wait; the login is tenant globex's for gus.
func TestBrowserLogin(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{})
	c := start("login", "--url", p.resource, "--browser", "--open=false")
	m := c.out.await(t, reAuthURL, c.done)
	au, err := url.Parse(m[1])
	if err != nil {
		t.Fatal(err)
	}
	q := au.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("resource") != p.resource ||
		q.Get("client_id") != defaultClientID || !strings.HasPrefix(q.Get("redirect_uri"), "http://127.0.0.1:") {
		t.Fatalf("authorize URL %s", m[1])
	}
	// A forged redirect (another state) is refused.
	resp, page := fetch(t, noRedirect(), http.MethodGet, q.Get("redirect_uri")+"?code=evil&state=other", nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "state mismatch") {
		t.Fatalf("forged callback: %s %s", resp.Status, page)
	}
	status, page := browserSignIn(t, p, m[1], "gus")
	if status != 200 || !strings.Contains(page, "Signed in") {
		t.Fatalf("loopback answered %d: %s", status, page)
	}
	if err := c.wait(t); err != nil {
		t.Fatalf("login --browser: %v\n%s", err, c.out.String())
	}
	l := readStore(t, store).Logins[0]
	verifyAccess(t, p, l.AccessToken, "gus", "globex")
	checkStoreFile(t, store)
}

// TestBrowserLoginTimesOut: nobody signs in; login says so in one line and stores nothing.
func TestBrowserLoginTimesOut(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{})
	c := start("login", "--url", p.resource, "--browser", "--open=false", "--timeout", "200ms")
	err := c.wait(t)
	checkOneLineFailure(t, err, store, "no sign-in came back within")
}

// checkOneLineFailure: err is one line containing want, and nothing was stored.
func checkOneLineFailure(t *testing.T, err error, store, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %q, want one line containing %q", err, want)
	}
	if _, serr := os.Stat(store); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("a failed login left %s (%v)", store, serr)
	}
}

// TestLoginErrors: each bad input is one line that says what is wrong, and stores nothing.
func TestLoginErrors(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{PagesRedirectURIs: []string{"http://127.0.0.1/callback"}})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("not-the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noPRM := httptest.NewServer(http.NotFoundHandler())
	defer noPRM.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	for _, tc := range []struct {
		name string
		args []string
		prm  map[string]any
		want string
	}{
		{name: "unreachable issuer", args: []string{"--issuer", closed.URL + "/oidc", "--resource", p.resource}, want: "cannot reach the identity provider " + closed.URL + "/oidc"},
		{name: "unreachable server", args: []string{"--url", closed.URL + "/mcp"}, want: "cannot read the server's metadata"},
		{name: "server without PRM", args: []string{"--url", noPRM.URL + "/mcp"}, want: "publishes no RFC 9728 metadata"},
		{name: "PRM without authorization server", prm: map[string]any{"resource": p.resource}, want: "names no authorization server"},
		{name: "PRM of another resource", prm: map[string]any{"resource": "https://elsewhere.example/mcp", "authorization_servers": []string{p.issuer}},
			want: `names its resource "https://elsewhere.example/mcp"`},
		{name: "issuer that is not one", args: []string{"--issuer", p.base + "/nothing", "--resource", p.resource}, want: "publishes no OAuth or OpenID metadata"},
		{name: "wrong client secret", args: []string{"--client-id", devidp.PagesClientID, "--client-secret-file", secret},
			want: `the identity provider refused client "jobgate-pages": unauthorized_client`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prm != nil {
				p.setPRM(tc.prm)
				defer p.setPRM(map[string]any{"resource": p.resource, "authorization_servers": []string{p.issuer}})
			}
			args := append([]string{"login", "--url", p.resource}, tc.args...)
			c := start(args...)
			err := c.wait(t)
			checkOneLineFailure(t, err, store, tc.want)
			if strings.Contains(c.out.String(), "enter the code") {
				t.Errorf("printed a code before failing:\n%s", c.out.String())
			}
		})
	}

	t.Run("denied", func(t *testing.T) {
		_, err := loginByDevice(t, p, "")
		checkOneLineFailure(t, err, store, "sign-in was denied at the identity provider")
	})
	t.Run("token without the tenant claim", func(t *testing.T) {
		_, err := loginByDevice(t, p, "ana", "--tenant-claim", "org")
		checkOneLineFailure(t, err, store, `missing "org" (tenant) claim`)
	})
}

// TestDeviceCodeExpired: a code nobody approves in time ends the login with one line.
func TestDeviceCodeExpired(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{DeviceCodeLifetime: time.Nanosecond})
	c := start("login", "--url", p.resource)
	err := c.wait(t)
	checkOneLineFailure(t, err, store, "the device code expired before it was approved")
}

// TestRefreshFailureSaysLogin: a stored sign-in whose refresh token the IdP refuses makes a
// command fail in one line that says to log in, and keeps the entry for that.
func TestRefreshFailureSaysLogin(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{})
	tf := &tokenFile{Logins: []storedLogin{{Issuer: p.issuer, Resource: p.resource, URL: p.resource, ClientID: defaultClientID,
		TokenEndpoint: p.issuer + "/oauth/token", TenantClaim: "tenant", AccessToken: "x.y.z", RefreshToken: "bogus",
		Expiry: time.Now().Add(-time.Hour), SavedAt: time.Now()}}}
	if err := saveTokens(store, tf); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"whoami"}, {"jobs", "list"}} {
		c := start(append(cmd, "--url", p.resource)...)
		err := c.wait(t)
		want := "the sign-in at " + p.issuer + " expired and could not be refreshed (invalid_grant"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "run 'jobgate login --url "+p.resource+"'") ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v", cmd, err)
		}
	}
	if got := readStore(t, store); len(got.Logins) != 1 || got.Logins[0].RefreshToken != "bogus" {
		t.Fatalf("store after a failed refresh: %+v", got)
	}
}

// TestLogoutOffline: with the IdP gone, logout still deletes the sign-in and says the
// revocation failed.
func TestLogoutOffline(t *testing.T) {
	store := isolate(t)
	tf := &tokenFile{Logins: []storedLogin{{Issuer: "http://127.0.0.1:1/oidc", Resource: "http://localhost:8080/mcp", URL: "http://localhost:8080/mcp",
		ClientID: defaultClientID, TokenEndpoint: "http://127.0.0.1:1/oidc/oauth/token", RevocationEndpoint: "http://127.0.0.1:1/oidc/revoke",
		AccessToken: "a", RefreshToken: "r", Expiry: time.Now().Add(time.Hour), SavedAt: time.Now()}}}
	if err := saveTokens(store, tf); err != nil {
		t.Fatal(err)
	}
	out := runOK(t, "logout", "--url", "http://LOCALHOST:8080/mcp/")
	if !strings.Contains(out, "revocation failed (") || !strings.Contains(out, "stored tokens deleted") || strings.Count(out, "\n") != 1 {
		t.Errorf("offline logout: %q", out)
	}
	if got := readStore(t, store); len(got.Logins) != 0 {
		t.Fatalf("offline logout kept %+v", got.Logins)
	}
	if out := runOK(t, "logout", "--url", "http://localhost:8080/mcp"); !strings.Contains(out, "Not signed in") {
		t.Errorf("second logout: %q", out)
	}
}

// TestCheckAccessTokenClock: a token issued by a clock far from this machine's, or expired
// long before it arrived, is refused with a message naming the clocks.
func TestCheckAccessTokenClock(t *testing.T) {
	isolate(t)
	p := startLoginIdP(t, devidp.Options{})
	tok := browserToken(t, p, "ana")
	now := time.Now()
	if _, err := checkAccessToken(tok, p.issuer, p.resource, "tenant", now); err != nil {
		t.Fatalf("a good token: %v", err)
	}
	for name, at := range map[string]time.Time{"machine behind": now.Add(-10 * time.Minute), "machine ahead": now.Add(2 * time.Hour)} {
		if _, err := checkAccessToken(tok, p.issuer, p.resource, "tenant", at); err == nil || !strings.Contains(err.Error(), "clock") {
			t.Errorf("%s: %v, want a clock error", name, err)
		}
	}
	if _, err := checkAccessToken(tok, p.issuer, "http://other/mcp", "tenant", now); err == nil || !strings.Contains(err.Error(), "lacks the resource http://other/mcp") {
		t.Errorf("other resource: %v", err)
	}
	if _, err := checkAccessToken(tok, "http://other/oidc", p.resource, "tenant", now); err == nil || !strings.Contains(err.Error(), "its iss is") {
		t.Errorf("other issuer: %v", err)
	}
	if _, err := checkAccessToken("opaque-token", p.issuer, p.resource, "tenant", now); err == nil || !strings.Contains(err.Error(), "opaque") {
		t.Errorf("opaque: %v", err)
	}
}

// browserToken gets an access token for user with x/oauth2 (not the CLI), for checks of the
// CLI's helpers.
func browserToken(t *testing.T, p *loginIdP, user string) string {
	t.Helper()
	cfg := &oauth2.Config{ClientID: defaultClientID, RedirectURL: "http://127.0.0.1:45678/callback", Scopes: []string{"jobs:read"},
		Endpoint: oauth2.Endpoint{AuthURL: p.issuer + "/authorize", TokenURL: p.issuer + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	v := oauth2.GenerateVerifier()
	c := noRedirect()
	next := func(resp *http.Response) string {
		l, _ := resp.Request.URL.Parse(resp.Header.Get("Location"))
		return l.String()
	}
	resp, _ := fetch(t, c, http.MethodGet, cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(v)), nil)
	_, page := fetch(t, c, http.MethodGet, next(resp), nil)
	id, csrf := reAuthReq.FindStringSubmatch(page), reCSRF.FindStringSubmatch(page)
	resp, _ = fetch(t, c, http.MethodPost, p.issuer+"/login", url.Values{"authRequestID": {id[1]}, "csrf": {csrf[1]}, "user": {user}})
	resp, _ = fetch(t, c, http.MethodGet, next(resp), nil)
	cb, _ := url.Parse(next(resp))
	tok, err := cfg.Exchange(context.Background(), cb.Query().Get("code"), oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken
}

// TestTokenStoreFile: writes are atomic and private, an unreadable or foreign-readable store is
// refused with what to do, and commands find a login by URL or by resource.
func TestTokenStoreFile(t *testing.T) {
	store := isolate(t)
	tf := &tokenFile{}
	tf.put(storedLogin{Issuer: "https://a", Resource: "https://api.example/mcp", URL: "http://127.0.0.1:9/mcp", AccessToken: "1", SavedAt: time.Unix(1, 0)})
	tf.put(storedLogin{Issuer: "https://b", Resource: "https://api.example/mcp", URL: "https://api.example/mcp", AccessToken: "2", SavedAt: time.Unix(2, 0)})
	tf.put(storedLogin{Issuer: "https://a", Resource: "https://API.example:443/mcp/", URL: "x", AccessToken: "3", SavedAt: time.Unix(3, 0)})
	if len(tf.Logins) != 2 || tf.Logins[0].AccessToken != "3" {
		t.Fatalf("put by issuer + resource: %+v", tf.Logins)
	}
	if err := saveTokens(store, tf); err != nil {
		t.Fatal(err)
	}
	checkStoreFile(t, store)
	got := readStore(t, store)
	for u, want := range map[string]string{"http://127.0.0.1:9/mcp": "", "https://api.example/mcp": "2", "https://api.example/other": ""} {
		l := got.forURL(u)
		if (l == nil) != (want == "") || l != nil && l.AccessToken != want {
			t.Errorf("forURL(%s) = %+v, want token %q", u, l, want)
		}
	}
	// Without a login made with that URL, the latest login for the resource.
	got.Logins[1].URL = "http://127.0.0.1:9/mcp"
	if l := got.forURL("https://api.example/mcp"); l == nil || l.AccessToken != "3" {
		t.Errorf("resource match: %+v", l)
	}
	if l := got.forURL("http://127.0.0.1:9/mcp"); l == nil || l.AccessToken != "2" {
		t.Errorf("URL match: %+v", l)
	}

	if err := os.Chmod(store, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTokens(store); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable store: %v", err)
	}
	for name, body := range map[string]string{"not JSON": "{", "other version": `{"version":9}`} {
		if err := os.WriteFile(store, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(store, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadTokens(store); err == nil || !strings.Contains(err.Error(), "delete it and run 'jobgate login'") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A write that cannot finish leaves the old file whole and no temporary file.
	if err := os.WriteFile(store, []byte(`{"version":1,"logins":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(store), 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(filepath.Dir(store), 0o700)
	if os.Geteuid() != 0 { // root writes anyway
		if err := saveTokens(store, tf); err == nil {
			t.Error("saved into a read-only dir")
		}
		if b, _ := os.ReadFile(store); string(b) != `{"version":1,"logins":[]}` {
			t.Errorf("failed save changed the store: %s", b)
		}
	}
}

func TestSameURL(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"http://localhost:8080/mcp", "http://LOCALHOST:8080/mcp/", true},
		{"https://x.example/mcp", "https://x.example:443/mcp", true},
		{"http://x.example/mcp", "http://x.example:80/mcp", true},
		{"http://[::1]:8080/mcp", "http://[::1]:8080/mcp", true},
		{"http://localhost:8080/mcp", "http://127.0.0.1:8080/mcp", false},
		{"http://x.example/mcp", "https://x.example/mcp", false},
		{"http://x.example/mcp", "http://x.example/MCP", false},
		{"http://x.example/mcp?a=1", "http://x.example/mcp", false},
		{"not a url", "not a url", false},
	} {
		if got := sameURL(tc.a, tc.b); got != tc.same {
			t.Errorf("sameURL(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// TestIdPTransportAddsResource: every token and device request carries resource, a
// confidential client's device request its Basic credentials; other requests pass untouched.
func TestIdPTransportAddsResource(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		id, sec, _ := r.BasicAuth()
		got = append(got, fmt.Sprintf("%s %s resource=%s basic=%s:%s", r.Method, r.URL.Path, r.PostForm.Get("resource"), id, sec))
	}))
	defer srv.Close()
	hc := &http.Client{Transport: &idpTransport{base: http.DefaultTransport, tokenURL: srv.URL + "/token", deviceURL: srv.URL + "/device",
		clientID: "c i", secret: "s&t", resource: "http://r/mcp"}}
	for _, path := range []string{"/token", "/device", "/other"} {
		resp, err := hc.PostForm(srv.URL+path, url.Values{"grant_type": {"x"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := []string{"POST /token resource=http://r/mcp basic=:", "POST /device resource=http://r/mcp basic=c+i:s%26t", "POST /other resource= basic=:"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDeviceCodeTextIsCleaned: the device authorization answer is printed to a terminal, so
// control characters in it (escape sequences that retitle the window or rewrite the screen)
// never reach stdout.
func TestDeviceCodeTextIsCleaned(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{})
	const esc = "\x1b]0;pwned\x07\x1b[2J"
	p.mux.HandleFunc("POST /evil/device", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"device_code": "dc", "user_code": "AB" + esc + "CD",
			"verification_uri": p.base + "/device" + esc, "verification_uri_complete": p.base + "/device?c=1" + esc, "expires_in": 60, "interval": 1})
	})
	p.metaPatch.Store(&map[string]any{"device_authorization_endpoint": p.base + "/evil/device"})
	c := start("login", "--url", p.resource)
	err := c.wait(t)
	out := c.out.String()
	if strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, "AB ]0;pwned [2JCD") {
		t.Fatalf("device text printed raw:\n%q", out)
	}
	// The IdP knows no device code "dc": the polling fails (pkg/op says access_denied), in one
	// line, storing nothing.
	checkOneLineFailure(t, err, store, "login: ")
}

// TestWhoamiCleansClaims: whoami shows claims of a token it has not verified; control
// characters in them are not written to the terminal.
func TestWhoamiCleansClaims(t *testing.T) {
	isolate(t)
	claims, _ := json.Marshal(map[string]any{"iss": "https://i\x1b[2J", "sub": "ana\x1b]0;pwned\x07", "tenant": "acme\r", "exp": time.Now().Add(time.Hour).Unix()})
	t.Setenv("JOBGATE_TOKEN", "e30."+base64.RawURLEncoding.EncodeToString(claims)+".sig")
	out := runOK(t, "whoami", "--url", "http://127.0.0.1:1/mcp")
	if strings.ContainsAny(out, "\x1b\x07\r") || !strings.Contains(out, "subject:  ana ]0;pwned\n") {
		t.Fatalf("whoami printed claims raw:\n%q", out)
	}
}

// TestTokenStoreRefusesUnsafe: a tokens.json that is a symlink or not a file, and a store
// directory others may write, are refused on read (and the directory on write) with what to
// do, in one line.
func TestTokenStoreRefusesUnsafe(t *testing.T) {
	store := isolate(t)
	dir := filepath.Dir(store)
	if err := saveTokens(store, &tokenFile{}); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "planted.json")
	if err := os.WriteFile(elsewhere, []byte(`{"version":1,"logins":[{"issuer":"https://evil"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(store); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, store); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTokens(store); err == nil || !strings.Contains(err.Error(), "is a symlink") {
		t.Errorf("symlinked store: %v", err)
	}
	if err := os.Remove(store); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTokens(store); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory as store: %v", err)
	}
	if err := os.Remove(store); err != nil {
		t.Fatal(err)
	}
	if err := saveTokens(store, &tokenFile{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	want := "token store directory " + dir + " is writable by others (mode 0777); run 'chmod 700 " + dir + "'"
	if _, err := loadTokens(store); err == nil || err.Error() != want {
		t.Errorf("load from a world-writable dir: %v", err)
	}
	if err := saveTokens(store, &tokenFile{}); err == nil || err.Error() != want {
		t.Errorf("save into a world-writable dir: %v", err)
	}
	c := start("whoami", "--url", "http://127.0.0.1:1/mcp")
	if err := c.wait(t); err == nil || err.Error() != want {
		t.Errorf("whoami with a world-writable store dir: %v", err)
	}
}

// TestPlainHTTPRefused: the issuer, every endpoint its metadata names, and --url must be https
// or http to a loopback host; each refusal is one line naming the URL, before anything is
// sent or stored. A stored sign-in is not sent to a plain-http --url off loopback.
func TestPlainHTTPRefused(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{})
	const off = "http://idp.example/oidc"
	const must = " must use https (plain http only to a loopback host: 127.0.0.0/8, ::1, localhost)"
	for _, tc := range []struct {
		name  string
		args  []string
		prm   map[string]any
		patch map[string]any
		want  string
	}{
		{name: "--url", args: []string{"--url", "http://jobs.example/mcp"}, want: "login: --url http://jobs.example/mcp" + must},
		{name: "--issuer", args: []string{"--issuer", off, "--resource", p.resource}, want: "login: issuer " + off + must},
		{name: "issuer from PRM", prm: map[string]any{"resource": p.resource, "authorization_servers": []string{off}}, want: "login: issuer " + off + must},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prm != nil {
				p.setPRM(tc.prm)
				defer p.setPRM(map[string]any{"resource": p.resource, "authorization_servers": []string{p.issuer}})
			}
			c := start(append([]string{"login", "--url", p.resource}, tc.args...)...)
			checkOneLineFailure(t, c.wait(t), store, tc.want)
		})
	}
	for _, ep := range []string{"authorization_endpoint", "token_endpoint", "device_authorization_endpoint", "revocation_endpoint"} {
		t.Run(ep, func(t *testing.T) {
			p.metaPatch.Store(&map[string]any{ep: off + "/" + ep})
			defer p.metaPatch.Store(nil)
			c := start("login", "--url", p.resource, "--browser", "--open=false", "--timeout", "5s")
			checkOneLineFailure(t, c.wait(t), store, "login: the metadata of "+p.issuer+": "+ep+" "+off+"/"+ep+must)
			if strings.Contains(c.out.String(), "open") {
				t.Errorf("printed a sign-in URL before refusing:\n%s", c.out.String())
			}
		})
	}

	// A stored sign-in for a plain-http URL off loopback (an older or edited store) stays home.
	// jobs.example is never resolved: the refusal comes first (with the check broken, the
	// command fails on DNS instead).
	u := "http://jobs.example/mcp"
	tf := &tokenFile{Logins: []storedLogin{{Issuer: p.issuer, Resource: u, URL: u, ClientID: defaultClientID,
		TokenEndpoint: p.issuer + "/oauth/token", TenantClaim: "tenant", AccessToken: "secret.access.token",
		Expiry: time.Now().Add(time.Hour), SavedAt: time.Now()}}}
	if err := saveTokens(store, tf); err != nil {
		t.Fatal(err)
	}
	c := start("jobs", "list", "--url", u)
	if err := c.wait(t); err == nil || err.Error() != "jobs list: --url "+u+must+"; the stored sign-in is not sent in clear" {
		t.Errorf("jobs list with a stored sign-in over plain http: %v", err)
	}
}

func TestSecureURL(t *testing.T) {
	for u, ok := range map[string]bool{
		"https://idp.example/oidc": true, "http://127.0.0.1:8080/oidc": true, "http://127.9.9.9/x": true,
		"http://[::1]:9/x": true, "http://localhost:1/x": true, "http://LOCALHOST/x": true,
		"http://idp.example/oidc": false, "http://10.0.0.1/x": false, "http://localhost.example/x": false,
		"http://[::ffff:10.0.0.1]/x": false, "ftp://127.0.0.1/x": false, "/relative": false, "https://u:p@idp.example/": false,
	} {
		if err := secureURL("x", u); (err == nil) != ok {
			t.Errorf("secureURL(%s): %v, want ok=%v", u, err, ok)
		}
	}
}

// TestBrowserLoginChecksIss: RFC 9207 on the loopback callback. A response whose iss names
// another issuer is refused even when the IdP does not advertise iss; when its metadata says
// authorization_response_iss_parameter_supported, a response without iss is refused and one
// with the right iss signs in. Each refusal ends the login in one line, storing nothing.
func TestBrowserLoginChecksIss(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{})
	signIn := func(edit func(url.Values)) (int, string, error) {
		t.Helper()
		c := start("login", "--url", p.resource, "--browser", "--open=false")
		m := c.out.await(t, reAuthURL, c.done)
		status, page := browserSignInEdit(t, p, m[1], "ana", edit)
		return status, page, c.wait(t)
	}
	status, page, err := signIn(func(q url.Values) { q.Set("iss", "https://evil.example") })
	checkOneLineFailure(t, err, store, `login: the sign-in response names issuer "https://evil.example", not `+p.issuer+" (RFC 9207")
	if status != http.StatusBadRequest || !strings.Contains(page, "RFC 9207") {
		t.Errorf("loopback answered %d: %s", status, page)
	}

	p.metaPatch.Store(&map[string]any{"authorization_response_iss_parameter_supported": true})
	_, _, err = signIn(nil) // pkg/op sends no iss
	checkOneLineFailure(t, err, store, "login: the sign-in response has no iss, though "+p.issuer+" advertises authorization_response_iss_parameter_supported")

	status, page, err = signIn(func(q url.Values) { q.Set("iss", p.issuer) })
	if err != nil || status != http.StatusOK {
		t.Fatalf("with the right iss: %v (%d %s)", err, status, page)
	}
	verifyAccess(t, p, readStore(t, store).Logins[0].AccessToken, "ana", "acme")
}
