package pages

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/tests/support/webclient"
)

// TestSignInMeSignOut is the confidential client's whole path: sign in as ana, /me shows who
// and the tenant (from the access token, since the dev IdP's ID token has no tenant), the
// cookie's attributes, then sign out through the IdP's end_session and be sent to sign in.
func TestSignInMeSignOut(t *testing.T) {
	e := startEnv(t, envOpts{})
	c := webclient.New(nil)
	authorize := wantRedirect(t, do(t, c, "GET", e.base+"/login?return=%2Fme", nil), e.issuer+"/authorize?")
	au, _ := url.Parse(authorize)
	q := au.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" ||
		q.Get("client_id") != devidp.PagesClientID || q.Get("redirect_uri") != e.base+PathCallback || q.Get("resource") != testResource {
		t.Fatalf("authorize URL %s", authorize)
	}
	cb := do(t, c, "GET", e.pick(t, c, authorize, "ana"), nil)
	wantRedirect(t, cb, e.base+"/me")
	sc := cookieNamed(cb.header, "jobgate_session")
	if sc == nil || !sc.HttpOnly || sc.SameSite != http.SameSiteLaxMode || sc.Path != "/" || sc.Secure || sc.MaxAge != int(SessionTTLDefault/time.Second) {
		t.Fatalf("session cookie %+v", sc)
	}
	if lc := cookieNamed(cb.header, "jobgate_login"); lc == nil || lc.MaxAge >= 0 {
		t.Fatalf("login cookie not spent: %+v", lc)
	}
	s, err := e.keys.OpenSession(sc.Value, time.Now())
	if err != nil || s.Issuer != e.issuer || s.Subject != "ana" || s.Tenant != "acme" || strings.Join(s.Scopes, " ") != "jobs:read jobs:write" ||
		s.AuthTime.IsZero() || strings.Join(s.AMR, ",") != "dev" {
		t.Fatalf("session %+v, %v", s, err)
	}
	me := do(t, c, "GET", e.base+"/me", nil)
	for _, want := range []string{"Signed in as ana", "<code>acme</code>", "jobs:read jobs:write", e.issuer, `lang="en"`, "<main>", `name="viewport"`} {
		if me.status != 200 || !strings.Contains(me.body, want) {
			t.Fatalf("/me lacks %q: %d %s", want, me.status, me.body)
		}
	}
	if csp := me.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	csrf := reCSRF.FindStringSubmatch(me.body)
	if csrf == nil || csrf[1] != s.CSRF {
		t.Fatalf("/me's sign-out form lacks the session's CSRF token")
	}

	// A cross-site POST is refused before anything else, even with the right token.
	if p := do(t, c, "POST", e.base+"/logout", url.Values{"csrf": {s.CSRF}}, "Sec-Fetch-Site", "cross-site"); p.status != 403 || !strings.Contains(p.body, "another site") {
		t.Fatalf("cross-site logout: %d %s", p.status, p.body)
	}
	if p := do(t, c, "POST", e.base+"/logout", url.Values{"csrf": {s.CSRF}}, "Origin", "https://evil.example"); p.status != 403 {
		t.Fatalf("cross-origin logout: %d", p.status)
	}
	// A missing or wrong CSRF field is refused and the session stays.
	for _, f := range []url.Values{{}, {"csrf": {"wrong"}}, {"csrf": {s.CSRF + "x"}}} {
		if p := do(t, c, "POST", e.base+"/logout", f); p.status != 403 || cookieNamed(p.header, "jobgate_session") != nil {
			t.Fatalf("logout with %v: %d %v", f, p.status, p.header["Set-Cookie"])
		}
	}
	// RequireSession applies the same to any POST it guards.
	if p := do(t, c, "POST", e.base+"/protected", url.Values{"csrf": {"nope"}}); p.status != 403 {
		t.Fatalf("protected POST without the token: %d", p.status)
	}
	if p := do(t, c, "POST", e.base+"/protected", url.Values{"csrf": {s.CSRF}}); p.status != 200 || p.body != "protected POST for ana of acme" {
		t.Fatalf("protected POST: %d %s", p.status, p.body)
	}
	if p := do(t, c, "GET", e.base+"/me", nil); p.status != 200 {
		t.Fatalf("still signed in: %d", p.status)
	}

	out := do(t, c, "POST", e.base+"/logout", url.Values{"csrf": {s.CSRF}}, "Sec-Fetch-Site", "same-origin")
	end := wantRedirect(t, out, e.issuer+"/end_session?")
	if gone := cookieNamed(out.header, "jobgate_session"); gone == nil || gone.MaxAge >= 0 {
		t.Fatalf("logout did not clear the cookie: %v", out.header["Set-Cookie"])
	}
	eu, _ := url.Parse(end)
	if eu.Query().Get("client_id") != devidp.PagesClientID || eu.Query().Get("post_logout_redirect_uri") != e.base+PathSignedOut {
		t.Fatalf("end_session URL %s", end)
	}
	back := wantRedirect(t, do(t, c, "GET", end, nil), e.base+PathSignedOut)
	if p := do(t, c, "GET", back, nil); p.status != 200 || !strings.Contains(p.body, "You are signed out") {
		t.Fatalf("signed-out page: %d %s", p.status, p.body)
	}
	wantRedirect(t, do(t, c, "GET", e.base+"/me", nil), e.base+"/login?return=%2Fme")
}

// TestPublicClient: a public client (PKCE only, no secret) signs in just as well.
func TestPublicClient(t *testing.T) {
	e := startEnv(t, envOpts{public: true})
	c := webclient.New(nil)
	wantRedirect(t, e.signIn(t, c, "gus", "/me"), e.base+"/me")
	me := do(t, c, "GET", e.base+"/me", nil)
	if me.status != 200 || !strings.Contains(me.body, "Signed in as gus") || !strings.Contains(me.body, "<code>globex</code>") {
		t.Fatalf("/me: %d %s", me.status, me.body)
	}
	// A tenant-A session never shows tenant B.
	if strings.Contains(me.body, "acme") {
		t.Fatalf("gus's page names acme: %s", me.body)
	}
}

// TestPathPrefix: behind a proxy that serves the pages under /jobs and strips the prefix, the
// redirect URI is <public>/jobs/auth/callback and sign-in completes: the login cookie reaches
// the callback (it once had Path=/auth, which the browser never sent to /jobs/auth/callback),
// and every redirect keeps the prefix.
func TestPathPrefix(t *testing.T) {
	e := startEnv(t, envOpts{prefix: "/jobs"})
	if !strings.HasSuffix(e.base, "/jobs") {
		t.Fatalf("base %s", e.base)
	}
	c := webclient.New(nil)
	wantRedirect(t, do(t, c, "GET", e.base+"/me", nil), e.base+"/login?return=%2Fme")
	cb := e.signIn(t, c, "ana", "/me")
	wantRedirect(t, cb, e.base+"/me")
	if lc := cookieNamed(cb.header, "jobgate_login"); lc == nil || lc.Path != "/" || lc.MaxAge >= 0 {
		t.Fatalf("login cookie not spent at Path=/: %+v", lc)
	}
	me := do(t, c, "GET", e.base+"/me", nil)
	if me.status != 200 || !strings.Contains(me.body, "Signed in as ana") || !strings.Contains(me.body, "<code>acme</code>") {
		t.Fatalf("/me behind the proxy: %d %s", me.status, me.body)
	}
	s := reCSRF.FindStringSubmatch(me.body)
	if s == nil {
		t.Fatal("no CSRF token on /me")
	}
	end := wantRedirect(t, do(t, c, "POST", e.base+PathLogout, url.Values{"csrf": {s[1]}}), e.issuer+"/end_session?")
	wantRedirect(t, do(t, c, "GET", end, nil), e.base+PathSignedOut)
}

// TestLongReturn: a page address longer than a login may carry (maxReturnLen) is not put in
// return= (where /login would refuse it with 400): the sign-in goes back to /me instead.
func TestLongReturn(t *testing.T) {
	e := startEnv(t, envOpts{})
	long := "/protected?q=" + strings.Repeat("x", maxReturnLen)
	c := webclient.New(nil)
	login := wantRedirect(t, do(t, c, "GET", e.base+long, nil), e.base+"/login?")
	if login != e.base+"/login?return=%2Fme" {
		t.Fatalf("redirect to %s", login)
	}
	authorize := wantRedirect(t, do(t, c, "GET", login, nil), e.issuer+"/authorize?")
	wantRedirect(t, do(t, c, "GET", e.pick(t, c, authorize, "ana"), nil), e.base+"/me")
	// A return path that fits still comes back to the page.
	fits := "/protected?q=" + strings.Repeat("x", 100)
	wantRedirect(t, do(t, webclient.New(nil), "GET", e.base+fits, nil), e.base+"/login?"+url.Values{"return": {fits}}.Encode())
}
