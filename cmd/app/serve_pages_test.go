package app

import (
	"context"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
)

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
			"--handle-keys", "k1:" + strings.Repeat("ab", 32), "--resume-keys", "r1:" + strings.Repeat("cd", 32)}); err != nil {
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
