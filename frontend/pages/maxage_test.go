package pages

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/tests/support/webclient"
)

func TestMaxAge(t *testing.T) {
	e := startEnv(t, envOpts{maxAge: 5 * time.Minute})
	c := webclient.New(nil)
	u, _ := url.Parse(e.base)
	stale := handle.Session{Issuer: e.issuer, Subject: "steward", Tenant: "acme", Scopes: []string{"jobs:approve"}, CSRF: "tok",
		AuthTime: time.Now().Add(-time.Hour), Expiry: time.Now().Add(time.Hour)}
	c.Jar.SetCookies(u, []*http.Cookie{{Name: "jobgate_session", Value: e.keys.SealSession(stale)}})
	authorize := wantRedirect(t, do(t, c, "GET", e.base+"/protected?id=7", nil), e.issuer+"/authorize?")
	q, _ := url.ParseQuery(strings.SplitN(authorize, "?", 2)[1])
	if q.Get("prompt") != "login" || q.Get("max_age") != "300" {
		t.Fatalf("re-login URL %s", authorize)
	}
	// A POST with a stale session is refused, not redirected.
	if p := do(t, c, "POST", e.base+"/protected", url.Values{"csrf": {"tok"}}); p.status != 403 || !strings.Contains(p.body, "fresh sign-in") {
		t.Fatalf("stale POST: %d %s", p.status, p.body)
	}
	wantRedirect(t, do(t, c, "GET", e.pick(t, c, authorize, "steward"), nil), e.base+"/protected?id=7")
	if p := do(t, c, "GET", e.base+"/protected?id=7", nil); p.status != 200 {
		t.Fatalf("after the fresh sign-in: %d %s", p.status, p.body)
	}

	// The IdP's auth_time is checked on return: a server whose clock is 10 minutes ahead sees
	// the fresh authentication as too old for a 5-minute max_age.
	late := startEnv(t, envOpts{maxAge: 5 * time.Minute, mutate: func(c *Config) { c.Now = func() time.Time { return time.Now().Add(10 * time.Minute) } }})
	c = webclient.New(nil)
	authorize = wantRedirect(t, do(t, c, "GET", late.base+"/protected", nil), late.base+"/login?")
	authorize = wantRedirect(t, do(t, c, "GET", authorize, nil), late.issuer+"/authorize?")
	if strings.Contains(authorize, "max_age") {
		t.Fatal("a plain sign-in asked for max_age")
	}
	wantRedirect(t, do(t, c, "GET", late.pick(t, c, authorize, "steward"), nil), late.base+"/protected")
	authorize = wantRedirect(t, do(t, c, "GET", late.base+"/protected", nil), late.issuer+"/authorize?")
	noSession(t, do(t, c, "GET", late.pick(t, c, authorize, "steward"), nil), 403, "did not perform one")
}

// TestMaxAgeSkew: with this server's clock 5m30s ahead of the provider's and a 5-minute
// max_age, the fresh authentication is inside max_age + leeway; the callback accepts it, and
// RequireSession must serve the page too. It once compared without the leeway and sent the
// browser back to the provider (prompt=login) after every fresh sign-in: a redirect loop.
func TestMaxAgeSkew(t *testing.T) {
	e := startEnv(t, envOpts{maxAge: 5 * time.Minute, mutate: func(c *Config) {
		c.Now = func() time.Time { return time.Now().Add(5*time.Minute + 30*time.Second) }
	}})
	c := webclient.New(nil)
	u, _ := url.Parse(e.base)
	stale := handle.Session{Issuer: e.issuer, Subject: "steward", Tenant: "acme", Scopes: []string{"jobs:approve"}, CSRF: "tok",
		AuthTime: time.Now().Add(-time.Hour), Expiry: time.Now().Add(2 * time.Hour)}
	c.Jar.SetCookies(u, []*http.Cookie{{Name: "jobgate_session", Value: e.keys.SealSession(stale)}})
	authorize := wantRedirect(t, do(t, c, "GET", e.base+"/protected?id=7", nil), e.issuer+"/authorize?")
	if !strings.Contains(authorize, "prompt=login") {
		t.Fatalf("re-login URL %s", authorize)
	}
	wantRedirect(t, do(t, c, "GET", e.pick(t, c, authorize, "steward"), nil), e.base+"/protected?id=7")
	if p := do(t, c, "GET", e.base+"/protected?id=7", nil); p.status != 200 || p.body != "protected GET for steward of acme" {
		t.Fatalf("after the fresh sign-in (a redirect here is the loop): %d to %q", p.status, p.loc)
	}
}
