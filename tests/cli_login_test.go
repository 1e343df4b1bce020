package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/tests/support/oidctest"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/tests/support/webclient"
)

// `jobgate login`, whoami and logout as subprocesses of the built binary against a real jobgate
// frontend whose verifier accepts the identity provider's tokens through its JWKS (beside the
// suite's HS256 tokens, as `dev` does). The person's part — typing the device code, picking a
// user on the sign-in page — is played by the test over HTTP against the provider's own pages.
//
// The test is a table over identity-provider drivers: the dev IdP (frontend/devidp, zitadel's
// pkg/op) now; a second, independent provider (npm oidc-provider) is one more row.

// cliLoginIdP is what the test needs from an identity provider.
type cliLoginIdP interface {
	Issuer() string
	JWKSURL() string
	// ApproveDevice enters userCode at verificationURI and signs in as user ("" denies).
	ApproveDevice(t *testing.T, verificationURI, userCode, user string)
	// BrowserSignIn follows authURL (the CLI's printed URL) as user, up to and including the
	// CLI's loopback redirect, and returns that redirect's status.
	BrowserSignIn(t *testing.T, authURL, user string) int
	// ShortTokens makes the tokens issued from now on expire within 30 seconds (on) or live
	// normally (off); false when the provider cannot, and the refresh check is then skipped.
	ShortTokens(on bool) bool
}

type idpDriver struct {
	name  string
	start func(t *testing.T, resource string) cliLoginIdP
}

var loginIdPDrivers = []idpDriver{{name: "devidp", start: startCLIDevIdP}, {name: "oidc-provider", start: startCLINodeIdP}}

// cliDevIdP is frontend/devidp on a loopback listener.
type cliDevIdP struct {
	*devidp.IdP
	issuer string
	offset atomic.Int64 // the provider's clock offset (ShortTokens)
}

func startCLIDevIdP(t *testing.T, resource string) cliLoginIdP {
	srv := httptest.NewUnstartedServer(nil)
	p := &cliDevIdP{issuer: "http://" + srv.Listener.Addr().String() + "/oidc"}
	idp, err := devidp.New(devidp.Options{Issuer: p.issuer, Resource: resource, Dir: t.TempDir(),
		Now: func() time.Time { return time.Now().Add(time.Duration(p.offset.Load())) },
		Users: []devidp.User{
			{Subject: ana.sub, Tenant: ana.tenant, Scopes: ana.scopes},
			{Subject: gus.sub, Tenant: gus.tenant, Scopes: gus.scopes},
		}})
	must(t, err)
	p.IdP = idp
	srv.Config.Handler = idp.Handler()
	srv.Start()
	t.Cleanup(srv.Close)
	return p
}

func (p *cliDevIdP) Issuer() string  { return p.issuer }
func (p *cliDevIdP) JWKSURL() string { return p.issuer + "/keys" }

func (p *cliDevIdP) ShortTokens(on bool) bool {
	var off time.Duration
	if on {
		// An IdP clock almost a token lifetime behind issues tokens that expire in 15s.
		off = -devidp.AccessTokenTTL + 15*time.Second
	}
	p.offset.Store(int64(off))
	return true
}

var (
	reFormCSRF    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	reFormAuthReq = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
)

func browse(t *testing.T, c *http.Client, method, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if method == http.MethodPost {
		resp, err = c.PostForm(u, form)
	} else {
		resp, err = c.Get(u)
	}
	must(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func redirectOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	l, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode/100 != 3 {
		t.Fatalf("%s: want a redirect, got %s", resp.Request.URL, resp.Status)
	}
	return l.String()
}

func (p *cliDevIdP) ApproveDevice(t *testing.T, verificationURI, userCode, user string) {
	t.Helper()
	c := webclient.New(nil)
	resp, page := browse(t, c, http.MethodGet, verificationURI+"?user_code="+url.QueryEscape(userCode), nil)
	m := reFormCSRF.FindStringSubmatch(page)
	if resp.StatusCode != 200 || m == nil || !strings.Contains(page, "Development only") {
		t.Fatalf("device page: %s\n%s", resp.Status, page)
	}
	form := url.Values{"user_code": {userCode}, "csrf": {m[1]}, "user": {user}}
	if user == "" {
		form = url.Values{"user_code": {userCode}, "csrf": {m[1]}, "deny": {"1"}}
	}
	if resp, page = browse(t, c, http.MethodPost, verificationURI, form); resp.StatusCode != 200 {
		t.Fatalf("device answer: %s\n%s", resp.Status, page)
	}
}

func (p *cliDevIdP) BrowserSignIn(t *testing.T, authURL, user string) int {
	t.Helper()
	c := webclient.New(nil)
	resp, _ := browse(t, c, http.MethodGet, authURL, nil)
	resp, page := browse(t, c, http.MethodGet, redirectOf(t, resp), nil)
	id, csrf := reFormAuthReq.FindStringSubmatch(page), reFormCSRF.FindStringSubmatch(page)
	if id == nil || csrf == nil {
		t.Fatalf("sign-in page: %s\n%s", resp.Status, page)
	}
	resp, _ = browse(t, c, http.MethodPost, p.issuer+"/login", url.Values{"authRequestID": {id[1]}, "csrf": {csrf[1]}, "user": {user}})
	resp, _ = browse(t, c, http.MethodGet, redirectOf(t, resp), nil)
	loopback := redirectOf(t, resp)
	if !strings.HasPrefix(loopback, "http://127.0.0.1:") {
		t.Fatalf("the IdP redirected to %s, not the CLI's loopback", loopback)
	}
	resp, _ = browse(t, c, http.MethodGet, loopback, nil)
	return resp.StatusCode
}

// cliProc is the binary running with a home of its own; stdout is readable while it runs.
type cliProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	lines  chan struct{}
	done   chan struct{}
	stderr strings.Builder
}

// cliLoginEnv is the environment of one person's CLI: their own config dir, no JOBGATE_TOKEN.
func cliLoginEnv(home, url string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "JOBGATE_TOKEN" && k != "XDG_CONFIG_HOME" && k != "HOME" && k != "JOBGATE_URL" {
			env = append(env, kv)
		}
	}
	return append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "JOBGATE_URL="+url)
}

func startCLI(t *testing.T, env []string, args ...string) *cliProc {
	t.Helper()
	p := &cliProc{cmd: exec.Command(jobgateBinary(t), args...), lines: make(chan struct{}, 1), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	must(t, err)
	must(t, p.cmd.Start())
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			p.mu.Lock()
			p.out.WriteString(line)
			p.mu.Unlock()
			select {
			case p.lines <- struct{}{}:
			default:
			}
			if err != nil {
				break
			}
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *cliProc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// await returns re's submatches in stdout once printed; the process ending first fails the test.
func (p *cliProc) await(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		if m := re.FindStringSubmatch(p.stdout()); m != nil {
			return m
		}
		select {
		case <-p.lines:
		case <-p.done:
			if m := re.FindStringSubmatch(p.stdout()); m != nil {
				return m
			}
			t.Fatalf("jobgate %s ended without printing %s:\n%s%s", strings.Join(p.cmd.Args[1:], " "), re, p.stdout(), p.stderr.String())
		case <-deadline:
			t.Fatalf("jobgate %s: no %s within a minute:\n%s", strings.Join(p.cmd.Args[1:], " "), re, p.stdout())
		}
	}
}

// wait is the process's exit code once it ends.
func (p *cliProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("jobgate %s did not finish:\n%s", strings.Join(p.cmd.Args[1:], " "), p.stdout())
	}
	t.Logf("$ jobgate %s → exit %d\n%s%s", strings.Join(p.cmd.Args[1:], " "), p.cmd.ProcessState.ExitCode(), p.stdout(), p.stderr.String())
	return p.cmd.ProcessState.ExitCode()
}

func runCLIEnv(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startCLI(t, env, args...)
	code = p.wait(t)
	return code, p.stdout(), p.stderr.String()
}

var (
	reDeviceBlock = regexp.MustCompile(`(?s)open\n\n    (http\S+)\n\nand enter the code\n\n    (\S+)\n`)
	reBrowserURL  = regexp.MustCompile(`(?s)in a browser \(waiting up to [^)]+\):\n\n    (http\S+)\n`)
)

type storedTokens struct {
	Logins []struct {
		Issuer       string    `json:"issuer"`
		Resource     string    `json:"resource"`
		AccessToken  string    `json:"access_token"`
		RefreshToken string    `json:"refresh_token"`
		Expiry       time.Time `json:"expiry"`
	} `json:"logins"`
}

func readTokenStore(t *testing.T, home string) (storedTokens, os.FileMode) {
	t.Helper()
	path := filepath.Join(home, ".config", "jobgate", "tokens.json")
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return storedTokens{}, 0
	}
	must(t, err)
	b, err := os.ReadFile(path)
	must(t, err)
	var s storedTokens
	must(t, json.Unmarshal(b, &s))
	return s, fi.Mode().Perm()
}

// TestCLILogin: device login (the default), the client commands on the stored sign-in, refresh
// of an expiring token on use, whoami, logout (revoked: the commands then say to log in), and
// --browser login; plus the denied and wrong-resource refusals, each storing nothing.
func TestCLILogin(t *testing.T) {
	testenv.Heavy(t, "runs the jobgate CLI binary against a frontend and an identity provider")
	for _, d := range loginIdPDrivers {
		t.Run(d.name, func(t *testing.T) { testCLILogin(t, d) })
	}
}

func testCLILogin(t *testing.T, d idpDriver) {
	const resource = "http://localhost/mcp" // testBundle.resource()
	idp := d.start(t, resource)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	jwks, err := authz.NewJWKSVerifier(ctx, authz.JWKSOptions{URL: idp.JWKSURL(), Issuer: idp.Issuer(), Audience: resource})
	must(t, err)
	t.Cleanup(func() { jwks.Close() })
	secret := []byte(randHex(32))
	hs, err := authz.NewHS256Verifier(testIssuer, resource, secret, "")
	must(t, err)
	multi, err := authz.NewMultiVerifier(hs, jwks)
	must(t, err)
	b := setup(t, setupOpts{verifier: multi, authServer: idp.Issuer()})
	b.secret = secret // b.token mints for the HS256 verifier above
	jobgateBinary(t)

	// A job of ana's, started with an HS256 token: her IdP sign-in must see it (same tenant
	// and subject), gus's must not.
	v := mustView(t, call(t, b.session(ana, 0, ""), "start_eval", startArgs(uniqueKey(t), 1, nil)))

	home := t.TempDir()
	env := cliLoginEnv(home, b.url(0))

	// The server's metadata names resource http://localhost/mcp, not the 127.0.0.1 URL the
	// CLI uses: RFC 9728 §3.3 makes login refuse it unless told.
	if code, _, stderr := runCLIEnv(t, env, "login"); code != 2 || !strings.Contains(stderr, `names its resource "http://localhost/mcp"`) || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("login without --resource: exit %d, %q", code, stderr)
	}
	// An identity provider that does not answer: one line.
	if code, _, stderr := runCLIEnv(t, env, "login", "--resource", resource, "--issuer", "http://127.0.0.1:1/oidc"); code != 2 ||
		!strings.Contains(stderr, "cannot reach the identity provider http://127.0.0.1:1/oidc") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("login at an unreachable issuer: exit %d, %q", code, stderr)
	}
	// Denied at the IdP, and a token without the tenant claim the CLI was told to expect: one
	// line each, nothing stored.
	for _, tc := range []struct{ user, claim, want string }{
		{"", "tenant", "sign-in was denied"},
		{ana.sub, "org", `missing "org" (tenant) claim`},
	} {
		p := startCLI(t, env, "login", "--resource", resource, "--tenant-claim", tc.claim)
		m := p.await(t, reDeviceBlock)
		idp.ApproveDevice(t, m[1], m[2], tc.user)
		if code := p.wait(t); code != 2 || !strings.Contains(p.stderr.String(), tc.want) || strings.Count(p.stderr.String(), "\n") != 1 {
			t.Fatalf("login (user %q, tenant claim %q): exit %d, %q", tc.user, tc.claim, code, p.stderr.String())
		}
		if _, mode := readTokenStore(t, home); mode != 0 {
			t.Fatal("a failed login stored a token file")
		}
	}

	// Device login as ana, with tokens that expire within the refresh margin.
	short := idp.ShortTokens(true)
	p := startCLI(t, env, "login", "--resource", resource)
	m := p.await(t, reDeviceBlock)
	if !strings.HasPrefix(m[1], idp.Issuer()) {
		t.Fatalf("verification URI %s is not the issuer's", m[1])
	}
	idp.ApproveDevice(t, m[1], m[2], ana.sub)
	if code := p.wait(t); code != 0 || !strings.Contains(p.stdout(), "Signed in to "+idp.Issuer()+" as ana (tenant acme;") {
		t.Fatalf("login: exit %d\n%s%s", code, p.stdout(), p.stderr.String())
	}
	idp.ShortTokens(false)
	st, mode := readTokenStore(t, home)
	if mode != 0o600 || len(st.Logins) != 1 || st.Logins[0].Issuer != idp.Issuer() || st.Logins[0].Resource != resource {
		t.Fatalf("token store (mode %04o): %+v", mode, st)
	}
	first := st.Logins[0]

	code, out, stderr := runCLIEnv(t, env, "jobs", "list")
	if code != 0 || !strings.Contains(out, v.JobID) {
		t.Fatalf("jobs list on the stored sign-in: exit %d, want %s listed\n%s%s", code, v.JobID, out, stderr)
	}
	st, _ = readTokenStore(t, home)
	if short && (st.Logins[0].AccessToken == first.AccessToken || st.Logins[0].RefreshToken == first.RefreshToken ||
		st.Logins[0].Expiry.Before(first.Expiry)) {
		t.Fatalf("jobs list did not refresh the expiring sign-in and keep the rotated tokens (access changed %v, refresh changed %v, expiry %s → %s)",
			st.Logins[0].AccessToken != first.AccessToken, st.Logins[0].RefreshToken != first.RefreshToken, first.Expiry, st.Logins[0].Expiry)
	}
	code, out, _ = runCLIEnv(t, env, "whoami")
	for _, want := range []string{"issuer:   " + idp.Issuer(), "subject:  ana", "tenant:   acme", "jobs:read jobs:write", "jobgate login ("} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("whoami: exit %d, lacks %q:\n%s", code, want, out)
		}
	}

	code, out, _ = runCLIEnv(t, env, "logout")
	if code != 0 || !strings.Contains(out, "refresh token revoked; stored tokens deleted") {
		t.Fatalf("logout: exit %d %s", code, out)
	}
	if st, _ := readTokenStore(t, home); len(st.Logins) != 0 {
		t.Fatalf("logout left %+v", st.Logins)
	}
	if code, _, stderr := runCLIEnv(t, env, "jobs", "list"); code != 2 || !strings.Contains(stderr, "run 'jobgate login'") {
		t.Fatalf("jobs list after logout: exit %d %s", code, stderr)
	}

	// --browser, as gus of tenant globex: ana's job is not his.
	p = startCLI(t, env, "login", "--resource", resource, "--browser", "--open=false")
	m = p.await(t, reBrowserURL)
	if status := idp.BrowserSignIn(t, m[1], gus.sub); status != 200 {
		t.Fatalf("the CLI's loopback answered %d", status)
	}
	if code := p.wait(t); code != 0 || !strings.Contains(p.stdout(), "as gus (tenant globex;") {
		t.Fatalf("login --browser: exit %d\n%s%s", code, p.stdout(), p.stderr.String())
	}
	code, out, stderr = runCLIEnv(t, env, "jobs", "list")
	if code != 0 || strings.Contains(out, v.JobID) {
		t.Fatalf("jobs list as gus: exit %d, must not show ana's %s\n%s%s", code, v.JobID, out, stderr)
	}
	if code, out, _ := runCLIEnv(t, env, "whoami"); code != 0 || !strings.Contains(out, "tenant:   globex") {
		t.Fatalf("whoami as gus: exit %d\n%s", code, out)
	}
}

// cliNodeIdP is npm oidc-provider (tests/support/oidctest), an independent certified provider, as
// its own process. Its access tokens live 20 seconds throughout (inside the CLI's 30-second
// refresh margin), so every CLI command refreshes and saves the rotated tokens.
type cliNodeIdP struct{ *oidctest.Provider }

func startCLINodeIdP(t *testing.T, resource string) cliLoginIdP {
	return cliNodeIdP{oidctest.Start(t, oidctest.Config{
		Resource: resource, AccessTokenTTL: 20 * time.Second,
		Users: []oidctest.User{
			{Sub: ana.sub, Tenant: ana.tenant, Scopes: authz.ScopeStrings(ana.scopes)},
			{Sub: gus.sub, Tenant: gus.tenant, Scopes: authz.ScopeStrings(gus.scopes)},
		},
		Clients: []oidctest.Client{oidctest.PublicClient("jobgate-cli")},
	})}
}

func (p cliNodeIdP) Issuer() string  { return p.Provider.Issuer }
func (p cliNodeIdP) JWKSURL() string { return p.Provider.JWKSURL }

// ShortTokens: the tokens are short from the start; it cannot switch.
func (p cliNodeIdP) ShortTokens(bool) bool { return true }

func (p cliNodeIdP) ApproveDevice(t *testing.T, verificationURI, userCode, user string) {
	t.Helper()
	if user == "" {
		p.Provider.DenyDevice(t, userCode)
		return
	}
	p.Provider.ApproveDevice(t, userCode, user)
}

func (p cliNodeIdP) BrowserSignIn(t *testing.T, authURL, user string) int {
	t.Helper()
	loopback := p.Provider.Login(t, nil, authURL, user)
	if !strings.HasPrefix(loopback, "http://127.0.0.1:") {
		t.Fatalf("the IdP redirected to %s, not the CLI's loopback", loopback)
	}
	resp, _ := browse(t, webclient.New(nil), http.MethodGet, loopback, nil)
	return resp.StatusCode
}
