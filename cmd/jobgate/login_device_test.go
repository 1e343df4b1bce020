package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/devidp"
)

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

// TestDeviceCodeExpired: a code nobody approves in time ends the login with one line.
func TestDeviceCodeExpired(t *testing.T) {
	store := isolate(t)
	p := startLoginIdP(t, devidp.Options{DeviceCodeLifetime: time.Nanosecond})
	c := start("login", "--url", p.resource)
	err := c.wait(t)
	checkOneLineFailure(t, err, store, "the device code expired before it was approved")
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
