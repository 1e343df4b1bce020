package main

import (
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/devidp"
)

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
