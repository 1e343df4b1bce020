package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/devidp"
)

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
