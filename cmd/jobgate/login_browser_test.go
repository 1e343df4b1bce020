package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/tests/support/webclient"
)

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
	resp, page := fetch(t, webclient.New(nil), http.MethodGet, q.Get("redirect_uri")+"?code=evil&state=other", nil)
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
