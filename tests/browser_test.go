package tests

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/tests/support/chrome"
	"github.com/jobgate/jobgate/tests/support/oidctest"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// signInStack is a jobgate whose pages sign people in at an OpenID Provider, as a browser
// sees it.
type signInStack struct {
	// base is the pages' origin (no trailing slash); other is the same listener under the
	// other loopback name (localhost ↔ 127.0.0.1): another site for the browser.
	base, other string
	// picker is the URL prefix of the provider's user picker.
	picker string
	// user is the CSS selector of sub's button on the picker.
	user func(sub string) string
	// confirmLogout, when the provider asks before ending its session, presses its Yes.
	confirmLogout *signInConfirm
	// noTenant is a user whose tokens carry no tenant claim ("" when the provider has none).
	noTenant string
	// deny is the CSS selector of the picker's Deny button ("" when it has none).
	deny string
	// logs are the jobgate process's logs so far.
	logs func() string
	// secrets must never appear in the logs (the client secret; tokens are checked apart).
	secrets []string
}

type signInConfirm struct{ at, button string }

// TestBrowserSignIn drives a real Chromium (Debian's, headless) through sign-in to jobgate's
// pages on two whole stacks: the built `jobgate dev` binary with its own identity provider at
// /oidc, and a built `jobgate serve` with --oidc-issuer naming the npm oidc-provider (a
// confidential client with a secret file). On each: /me → the provider's picker → ana → /me
// shows ana of acme and never globex; a cross-site form POST to /logout is refused and the
// session stays; sign-out (RP-initiated, through the provider) → the signed-out page, no session
// cookie → /me goes back to the picker; a session cookie edited or forged by script is refused;
// gus of globex never sees acme. On oidc-provider also: a user whose tokens carry no tenant
// claim gets one clear line and no session cookie. Screenshots (1200 and 390 px) of the picker,
// /me, the signed-out page and the error pages go to a temp dir, or to $JOBGATE_SCREENSHOTS.
func TestBrowserSignIn(t *testing.T) {
	testenv.Heavy(t, "builds jobgate, starts Chromium and an OpenID Provider on Node.js")
	chrome.Require(t)
	shots := os.Getenv("JOBGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	for _, row := range []struct {
		name  string
		stack func(t *testing.T) signInStack
	}{
		{"dev", browserDevStack},
		{"serve-oidc-provider", browserServeStack},
	} {
		t.Run(row.name, func(t *testing.T) {
			s := row.stack(t)
			b := newBrowser(t, filepath.Join(shots, row.name))
			walkSignIn(t, b, s)
			// Nothing secret reaches the logs: no token (a JWT starts eyJ), no client secret.
			logs := s.logs()
			for _, secret := range append([]string{"eyJ"}, s.secrets...) {
				if strings.Contains(logs, secret) {
					t.Errorf("jobgate logged a secret (%.6s…):\n%s", secret, logs)
				}
			}
		})
	}

	// jobgate holds the wrong client secret: the provider refuses the code exchange, and the
	// person reads one line telling the operator what to check; no session.
	t.Run("serve-wrong-secret", func(t *testing.T) {
		base, p, serve := startServeWithProvider(t, randHex(24), "not-the-secret")
		b := newBrowser(t, filepath.Join(shots, "serve-wrong-secret"))
		b.Step("open /me", chromedp.Navigate(base+pages.PathMe), chrome.At(p.Issuer+"/interaction/"))
		b.Step("pick ana", chromedp.Click(chromedp.CSS(`button[name=sub][value="ana"]`)), chrome.At(base+pages.PathCallback))
		b.oneLineNoSession(base, "refused this server's client credentials (invalid_client)")
		b.shoot("wrong-secret")
		// The provider's answer is for the operator: in the log, with the error code, not on the page.
		if logs := serve.logs(); !strings.Contains(logs, "invalid_client") || strings.Contains(logs, "not-the-secret") {
			t.Errorf("serve's log lacks invalid_client or holds the secret:\n%s", logs)
		}
	})
}

// walkSignIn is the whole walk of TestBrowserSignIn on one stack.
func walkSignIn(t *testing.T, b *browser, s signInStack) {
	me, signedOut := s.base+pages.PathMe, s.base+pages.PathSignedOut

	// Signing in starts at a protected page: the provider's picker.
	b.Step("open /me", chromedp.Navigate(me), chrome.At(s.picker))
	b.shoot("picker")
	b.Step("pick ana", chromedp.Click(chromedp.CSS(s.user(ana.sub))), chrome.At(me))
	body := b.Text()
	for _, want := range []string{"Signed in as ana", "acme", "jobs:read jobs:write", "Sign out"} {
		if !strings.Contains(body, want) {
			t.Fatalf("/me lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "globex") {
		t.Fatalf("ana's page names globex:\n%s", body)
	}
	b.shoot("me")
	sess := b.Cookie(s.base, "jobgate_session")
	if sess == nil || !sess.HTTPOnly || sess.SameSite != network.CookieSameSiteLax || sess.Path != "/" {
		t.Fatalf("session cookie %+v, want HttpOnly, SameSite=Lax, Path=/", sess)
	}
	if c := b.Cookie(s.base, "jobgate_login"); c != nil {
		t.Fatalf("the login cookie outlived its callback: %+v", c)
	}

	// A form on another site (the other loopback name) posting to /logout is refused; the
	// session stays.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<!doctype html><form method="post" action="`+s.base+pages.PathLogout+
			`"><input type="hidden" name="csrf" value="guess"><button id="go">win a prize</button></form>`)
	}))
	defer evil.Close()
	evilURL := strings.Replace(evil.URL, "127.0.0.1", hostOf(s.other), 1)
	b.Step("cross-site form", chromedp.Navigate(evilURL), chromedp.Click(chromedp.CSS("#go")), chrome.At(s.base+pages.PathLogout))
	if body := b.Text(); !strings.Contains(body, "came from another site") {
		t.Fatalf("cross-site POST:\n%s", body)
	}
	b.Step("still signed in", chromedp.Navigate(me), chrome.At(me))
	if body := b.Text(); !strings.Contains(body, "Signed in as ana") {
		t.Fatalf("after the refused POST:\n%s", body)
	}

	// Sign out: jobgate clears its cookie, then the provider ends its session (RP-initiated
	// logout) and sends the browser back to the signed-out page.
	b.Step("sign out", chromedp.Click(chromedp.CSS(`form[action$="/logout"] button`)))
	if c := s.confirmLogout; c != nil {
		b.Step("provider's sign-out", chrome.At(c.at), chromedp.Click(chromedp.CSS(c.button)))
	}
	b.Step("signed out", chrome.At(signedOut))
	if body := b.Text(); !strings.Contains(body, "You are signed out") {
		t.Fatalf("signed-out page:\n%s", body)
	}
	if c := b.Cookie(s.base, "jobgate_session"); c != nil {
		t.Fatalf("session cookie after sign-out: %+v", c)
	}
	b.shoot("signed-out")
	b.Step("/me after sign-out", chromedp.Navigate(me), chrome.At(s.picker))

	// ana's real cookie with one character of its ciphertext changed, set by script: no
	// session, back to the picker; likewise a cookie made up from nothing.
	edited := []byte(sess.Value)
	i := len(edited) / 2
	if edited[i] == 'A' {
		edited[i] = 'B'
	} else {
		edited[i] = 'A'
	}
	for _, forged := range []string{string(edited), "jgx1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		b.Step("set a forged cookie", chromedp.Navigate(signedOut), chrome.At(signedOut), chrome.SetCookie(s.base, "jobgate_session", forged))
		if c := b.Cookie(s.base, "jobgate_session"); c == nil || c.Value != forged {
			t.Fatalf("the forged cookie did not stick: %+v", c)
		}
		b.Step("/me with a forged cookie", chromedp.Navigate(me), chrome.At(s.picker))
		if c := b.Cookie(s.base, "jobgate_session"); c != nil {
			t.Fatalf("a refused cookie was kept: %+v", c)
		}
	}

	// Tenant B: gus of globex never sees acme.
	b.Step("pick gus", chromedp.Click(chromedp.CSS(s.user(gus.sub))), chrome.At(me))
	if body := b.Text(); !strings.Contains(body, "Signed in as gus") || !strings.Contains(body, "globex") || strings.Contains(body, "acme") {
		t.Fatalf("gus's /me:\n%s", body)
	}

	// The error page: a return address off the site.
	b.Step("bad return", chromedp.Navigate(s.base+pages.PathLogin+"?return=//evil.example"), chrome.At(s.base+pages.PathLogin))
	if body := b.Text(); !strings.Contains(body, "must be a path on this site") {
		t.Fatalf("error page:\n%s", body)
	}
	b.shoot("error")
	t.Logf("screenshots in %s", b.shots)

	if s.noTenant == "" {
		return
	}
	// Signed in at the provider, but its tokens carry no tenant: one clear line, no session.
	b.Step("forget everything", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, network.ClearBrowserCookies, cdp.Empty{})
		return err
	}))
	b.Step("open /me", chromedp.Navigate(me), chrome.At(s.picker))
	b.Step("pick "+s.noTenant, chromedp.Click(chromedp.CSS(s.user(s.noTenant))), chrome.At(s.base+pages.PathCallback))
	b.oneLineNoSession(s.base, `carry no "tenant" (tenant) claim`)
	b.shoot("no-tenant")

	if s.deny == "" {
		return
	}
	// The person presses Deny at the provider: one line, no session.
	b.Step("forget everything", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, network.ClearBrowserCookies, cdp.Empty{})
		return err
	}))
	b.Step("open /me", chromedp.Navigate(me), chrome.At(s.picker))
	b.Step("deny", chromedp.Click(chromedp.CSS(s.deny)), chrome.At(s.base+pages.PathCallback))
	b.oneLineNoSession(s.base, "Sign-in was refused at the identity provider (access_denied).")
}

// oneLineNoSession checks the page's alert is one line containing want and that the browser
// holds no session cookie for origin.
func (b *browser) oneLineNoSession(origin, want string) {
	b.t.Helper()
	alert := b.Eval(`(document.querySelector("[role=alert]") || document.body).innerText`)
	if !strings.Contains(alert, want) || strings.Contains(alert, "\n") {
		b.t.Fatalf("the page says %q, want one line with %q:\n%s", alert, want, b.Text())
	}
	if c := b.Cookie(origin, "jobgate_session"); c != nil {
		b.t.Fatalf("a session cookie after a failed sign-in: %+v", c)
	}
}

// browserDevStack is the built `jobgate dev --ephemeral` binary: its pages and its identity
// provider share one listener, named localhost in the banner.
func browserDevStack(t *testing.T) signInStack {
	mcpURL, issuer, p := startDevProcess(t)
	base := strings.TrimSuffix(mcpURL, "/mcp")
	// The banner prints dev tokens on purpose; the logs checked are what follows it.
	banner := len(p.logs())
	return signInStack{base: base, other: strings.Replace(base, "localhost", "127.0.0.1", 1), picker: issuer + "/login?",
		user: func(sub string) string { return `button[name=user][value="` + sub + `"]` },
		logs: func() string { return p.logs()[banner:] }}
}

// startDevProcess runs the built `jobgate dev --ephemeral` binary until the test ends and
// returns its MCP endpoint and its identity provider's issuer, read from the banner.
func startDevProcess(t *testing.T) (mcpURL, issuer string, p *proc) {
	t.Helper()
	p = startProc(t, exec.Command(jobgateBinary(t), "dev", "--ephemeral", "--listen", "127.0.0.1:0", "--temporal-port", "0", "--ui-port", "-1"), true)
	eventually(t, 90*time.Second, "dev banner", func() bool { return strings.Contains(p.logs(), "Ctrl-C stops") })
	banner := p.logs()
	m := regexp.MustCompile(`MCP endpoint +(http://localhost:[0-9]+/mcp)\n`).FindStringSubmatch(banner)
	iss := regexp.MustCompile(`Identity provider (http://localhost:[0-9]+/oidc) \(dev only\)\n`).FindStringSubmatch(banner)
	if m == nil || iss == nil {
		t.Fatalf("banner:\n%s", banner)
	}
	return m[1], iss[1], p
}

// browserServeStack is the built `jobgate serve` with --oidc-issuer naming an oidc-provider
// process, where jobgate is the confidential client jobgate-pages (secret in a file), on
// 127.0.0.1.
func browserServeStack(t *testing.T) signInStack {
	secret := randHex(24)
	base, p, serve := startServeWithProvider(t, secret, secret)
	return signInStack{base: base, other: strings.Replace(base, "127.0.0.1", "localhost", 1), picker: p.Issuer + "/interaction/",
		user:          func(sub string) string { return `button[name=sub][value="` + sub + `"]` },
		confirmLogout: &signInConfirm{at: p.Issuer + "/session/end", button: `button[name=logout][value=yes]`},
		noTenant:      "nobody", deny: `button[name=action][value=deny]`,
		logs: serve.logs, secrets: []string{secret}}
}

// startServeWithProvider starts an oidc-provider (the dev principals and nobody, without a
// tenant) with the confidential client jobgate-pages, and the built `jobgate serve` signing
// people in there and verifying MCP tokens through its JWK Set. The provider knows the client
// by clientSecret, jobgate reads fileSecret from its --oidc-client-secret-file (another one is
// the operator's mistake). It returns the pages' base URL, the provider and the serve process.
func startServeWithProvider(t *testing.T, clientSecret, fileSecret string) (string, *oidctest.Provider, *proc) {
	t.Helper()
	bin := jobgateBinary(t)
	// serve's address is needed before the provider starts (its redirect URIs) and the port
	// stays held until serve takes it: closed before, the provider's own port 0 was once given
	// that same port, and serve could not bind it (CI: "address already in use").
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	base := "http://" + addr
	p := oidctest.Start(t, oidctest.Config{Resource: base + "/mcp", Users: oidcUsers(), Clients: []oidctest.Client{{
		ID: "jobgate-pages", Secret: clientSecret, RedirectURIs: []string{base + pages.PathCallback},
		GrantTypes: []string{"authorization_code", "refresh_token"}, PostLogoutRedirectURIs: []string{base + pages.PathSignedOut},
	}}})
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "oidc-client-secret")
	must(t, os.WriteFile(secretFile, []byte(fileSecret+"\n"), 0o600))
	ln.Close()
	proc := startProc(t, exec.Command(bin, "serve", "--listen", addr, "--resource-uri", base+"/mcp",
		"--issuer", p.Issuer, "--handle-keys", "k1:"+hex.EncodeToString(handle.GenerateKey()),
		"--resume-keys", "r1:"+hex.EncodeToString(handle.GenerateKey()), "--signing-keys", "s1:"+handle.GenerateSigningSeedHex(),
		"--payload-kek", payloadcrypt.NewLocalKEK(), "--payload-key-store", "file://"+t.TempDir(),
		"--temporal-address", temporalAddr, "--namespace", namespace, "--task-queue", "tq-"+randHex(6),
		"--oidc-issuer", p.Issuer, "--oidc-client-id", "jobgate-pages", "--oidc-client-secret-file", secretFile,
		"--public-url", base), true)
	eventually(t, 30*time.Second, "serve on "+addr, func() bool {
		select {
		case <-proc.done:
			t.Fatalf("serve exited:\n%s", proc.logs())
		default:
		}
		resp, err := http.Get(base + pages.PathSignedOut)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base, p, proc
}

// TestServeOIDCIssuerUnreachable: the built `jobgate serve` with an --oidc-issuer nobody answers
// at exits non-zero at start-up with one line naming the flag.
func TestServeOIDCIssuerUnreachable(t *testing.T) {
	testenv.Heavy(t, "builds and runs jobgate serve")
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "hs256")
	must(t, os.WriteFile(secret, []byte(randHex(32)), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, jobgateBinary(t), "serve", "--listen", "127.0.0.1:0", "--issuer", testIssuer,
		"--hs256-secret-file", secret, "--handle-keys", "k1:"+hex.EncodeToString(handle.GenerateKey()),
		"--resume-keys", "r1:"+hex.EncodeToString(handle.GenerateKey()), "--temporal-address", temporalAddr,
		"--signing-keys", "s1:"+handle.GenerateSigningSeedHex(), "--payload-kek", payloadcrypt.NewLocalKEK(),
		"--payload-key-store", "file://"+dir, "--oidc-issuer", "http://127.0.0.1:1", "--oidc-client-id", "jobgate-pages")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("serve still running after a minute:\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("serve with an unreachable --oidc-issuer: %v, want a non-zero exit", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	want := "jobgate: --oidc-issuer: OIDC issuer http://127.0.0.1:1: discovery failed: "
	if len(lines) != 1 || !strings.HasPrefix(lines[0], want) || !strings.Contains(lines[0], "connection refused") || stdout.Len() != 0 {
		t.Fatalf("stderr %q (stdout %q), want one line starting %q", stderr.String(), stdout.String(), want)
	}
}

func hostOf(origin string) string {
	h := strings.TrimPrefix(strings.TrimPrefix(origin, "http://"), "https://")
	if i := strings.LastIndex(h, ":"); i >= 0 {
		h = h[:i]
	}
	return h
}

// browser is a chrome.Browser whose screenshots go to shots.
type browser struct {
	*chrome.Browser
	t     *testing.T
	shots string
}

func newBrowser(t *testing.T, shots string) *browser {
	t.Helper()
	return &browser{Browser: chrome.New(t), t: t, shots: shots}
}

// shoot saves full-page screenshots of the current page at 1200 and 390 px wide.
func (b *browser) shoot(name string) { b.t.Helper(); b.Shoot(b.shots, name) }
