package main

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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/tests/support/webclient"
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
	if o.DevicePollInterval == 0 {
		o.DevicePollInterval = time.Second // the CLI polls at the interval it is told: 1 s, not RFC 8628's 5
	}
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
	c := webclient.New(nil)
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
	c := webclient.New(nil)
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

// browserToken gets an access token for user with x/oauth2 (not the CLI), for checks of the
// CLI's helpers.
func browserToken(t *testing.T, p *loginIdP, user string) string {
	t.Helper()
	cfg := &oauth2.Config{ClientID: defaultClientID, RedirectURL: "http://127.0.0.1:45678/callback", Scopes: []string{"jobs:read"},
		Endpoint: oauth2.Endpoint{AuthURL: p.issuer + "/authorize", TokenURL: p.issuer + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	v := oauth2.GenerateVerifier()
	c := webclient.New(nil)
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
