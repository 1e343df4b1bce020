package app

import (
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/tests/support/webclient"
)

var devIdPTestUsers = []devidp.User{{Subject: "ana", Tenant: "acme", Scopes: []authz.Scope{authz.ScopeRead}}}

// signInThroughPicker signs in at base as user through the dev IdP's picker, as a browser
// without script would (a cookie jar, each redirect followed), and returns /me's page.
func signInThroughPicker(t *testing.T, base, issuer, user string) string {
	t.Helper()
	c := webclient.New(webclient.All)
	resp, err := c.Get(base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := regexp.MustCompile(`name="authRequestID" value="([^"]+)"`).FindSubmatch(page)
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if resp.StatusCode != 200 || id == nil || csrf == nil || !strings.HasPrefix(resp.Request.URL.String(), issuer+"/login?") {
		t.Fatalf("picker: %s at %s: %s", resp.Status, resp.Request.URL, page)
	}
	resp, err = c.PostForm(issuer+"/login", url.Values{"authRequestID": {string(id[1])}, "csrf": {string(csrf[1])}, "user": {user}})
	if err != nil {
		t.Fatal(err)
	}
	me, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.String() != base+"/me" {
		t.Fatalf("after the picker: %s at %s: %s", resp.Status, resp.Request.URL, me)
	}
	return string(me)
}

// TestServePages runs ServeMain with --oidc-* against the dev IdP on its own listener (and a
// Temporal nobody listens on): /login sends the browser to the IdP with the redirect URI
// derived from --resource-uri, /me without a session to /login, /mcp still answers as before;
// without --oidc-issuer the pages 404; an unreachable issuer fails start-up with one line.
func TestServePages(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	idpSrv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + idpSrv.Listener.Addr().String() + "/oidc"
	idp, err := devidp.New(devidp.Options{Issuer: issuer, Resource: base + "/mcp", PagesRedirectURIs: []string{base + "/auth/callback"},
		Users: []devidp.User{{Subject: "ana", Tenant: "acme", Scopes: []authz.Scope{authz.ScopeRead}}}})
	if err != nil {
		t.Fatal(err)
	}
	idpSrv.Config.Handler = idp.Handler()
	idpSrv.Start()
	defer idpSrv.Close()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()

	config := func(resource string) ServeConfig {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var c ServeConfig
		c.Flags(fs)
		t.Setenv("JOBGATE_OIDC_ISSUER", issuer)
		if err := BindEnv(fs); err != nil {
			t.Fatal(err)
		}
		if err := fs.Parse([]string{"--oidc-client-id", devidp.PagesClientID, "--temporal-address", deadAddr, "--listen", "127.0.0.1:0",
			"--resource-uri", resource, "--issuer", issuer, "--jwks-url", issuer + "/keys",
			"--handle-keys", "k1:" + strings.Repeat("ab", 32), "--resume-keys", "r1:" + strings.Repeat("cd", 32),
			"--signing-keys", testSigningKeys, "--payload-kek", payloadcrypt.NewLocalKEK(), "--payload-key-store", "file://" + t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		c.Pages.ClientSecret = idp.PagesClientSecret()
		return c
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := config(base + "/mcp")
	if c.Pages.Issuer != issuer || c.Pages.TenantClaim != "tenant" || c.Pages.SessionTTL.String() != "8h0m0s" {
		t.Fatalf("flags: %+v", c.Pages)
	}
	s := &ServeMain{Config: c, Listener: ln}
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string) *http.Response {
		t.Helper()
		resp, err := noFollow.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := get(base + "/login")
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc.String(), issuer+"/authorize?") ||
		loc.Query().Get("redirect_uri") != base+"/auth/callback" || loc.Query().Get("resource") != base+"/mcp" {
		t.Fatalf("/login: %s %s", resp.Status, loc)
	}
	if resp := get(base + "/me"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != base+"/login?return=%2Fme" {
		t.Fatalf("/me: %s %s", resp.Status, resp.Header.Get("Location"))
	}
	if resp := get(base + "/mcp"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/mcp without a token: %s", resp.Status)
	}
	if resp := get(base + "/healthz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}

	// The whole sign-in through serve, configured as dev configures it: /login → the IdP's
	// picker (ana) → /auth/callback → /me shows ana of acme.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base2 := "http://" + ln2.Addr().String()
	idpSrv2 := httptest.NewUnstartedServer(nil)
	issuer2 := "http://" + idpSrv2.Listener.Addr().String() + "/oidc"
	idp2, err := devidp.New(devidp.Options{Issuer: issuer2, Resource: base2 + "/mcp", Users: devIdPTestUsers,
		PagesRedirectURIs: []string{base2 + pages.PathCallback}, PagesPostLogoutRedirectURIs: []string{base2 + pages.PathSignedOut}})
	if err != nil {
		t.Fatal(err)
	}
	idpSrv2.Config.Handler = idp2.Handler()
	idpSrv2.Start()
	defer idpSrv2.Close()
	dc := config(base2 + "/mcp")
	dc.Issuer, dc.JWKSURL = issuer2, issuer2+"/keys"
	if dc.Pages, err = devPagesConfig(issuer2, idp2.PagesClientSecret(), base2, idpSrv2.Listener.Addr()); err != nil {
		t.Fatal(err)
	}
	s4 := &ServeMain{Config: dc, Listener: ln2}
	if err := s4.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer s4.Close()
	if me := signInThroughPicker(t, base2, issuer2, "ana"); !strings.Contains(me, "Signed in as ana") || !strings.Contains(me, "<code>acme</code>") {
		t.Fatalf("/me after signing in through serve: %s", me)
	}

	// Pages off: their paths are not served.
	off := config("http://localhost/mcp")
	off.Pages = PagesConfig{}
	s2 := &ServeMain{Config: off}
	if err := s2.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, p := range []string{"/login", "/me", "/auth/callback"} {
		if resp := get("http://" + s2.Addr() + p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("pages off: %s %s", p, resp.Status)
		}
	}

	// An unreachable issuer fails start-up, in one line.
	bad := config("http://localhost/mcp")
	bad.Pages.Issuer = "http://" + deadAddr + "/oidc"
	s3 := &ServeMain{Config: bad}
	err = s3.Run(ctx)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "--oidc-issuer: OIDC issuer http://"+deadAddr+"/oidc: discovery failed") {
		t.Fatalf("unreachable issuer: %v", err)
	}
	// A client ID without an issuer is a mistake, not "pages off".
	half := config("http://localhost/mcp")
	half.Pages.Issuer = ""
	if err := (&ServeMain{Config: half}).Run(ctx); err == nil || !strings.Contains(err.Error(), "need --oidc-issuer") {
		t.Fatalf("client ID without issuer: %v", err)
	}
}
