package pages

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/tests/support/webclient"
)

// TestCookiesRefused: a forged, tampered, expired or other-issuer session cookie is no session:
// the browser is sent to sign in (and the cookie cleared); a POST is refused, not redirected.
func TestCookiesRefused(t *testing.T) {
	e := startEnv(t, envOpts{})
	now := time.Now()
	good := handle.Session{Issuer: e.issuer, Subject: "ana", Tenant: "acme", Scopes: []string{"jobs:read"}, CSRF: "tok", Expiry: now.Add(time.Hour)}
	valid := e.keys.SealSession(good)
	other := good
	other.Issuer = "https://other.example"
	expired := good
	expired.Expiry = now.Add(-time.Second)
	otherKeys, _ := handle.NewKeyring("k1", map[string][]byte{"k1": []byte(strings.Repeat("o", 32))})
	tampered := []byte(valid)
	tampered[len(tampered)-5] ^= 1
	for name, v := range map[string]string{
		"forged":       "jgx1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"tampered":     string(tampered),
		"expired":      e.keys.SealSession(expired),
		"other issuer": e.keys.SealSession(other),
		"other keys":   otherKeys.SealSession(good),
		"a cursor":     e.keys.SealCursor(handle.Cursor{Tenant: "acme", Subject: "ana", Tool: "list_jobs", Filter: "f", PageToken: []byte("x"), Expiry: now.Add(time.Hour)}),
	} {
		c := webclient.New(nil)
		u, _ := url.Parse(e.base)
		c.Jar.SetCookies(u, []*http.Cookie{{Name: "jobgate_session", Value: v}})
		p := do(t, c, "GET", e.base+"/me", nil)
		wantRedirect(t, p, e.base+"/login?return=%2Fme")
		if cl := cookieNamed(p.header, "jobgate_session"); cl == nil || cl.MaxAge >= 0 {
			t.Errorf("%s: cookie not cleared", name)
		}
		c.Jar.SetCookies(u, []*http.Cookie{{Name: "jobgate_session", Value: v}})
		if p := do(t, c, "POST", e.base+"/protected", url.Values{"csrf": {"tok"}}); p.status != 401 {
			t.Errorf("%s: POST %d", name, p.status)
		}
	}
	// Control: the valid one opens.
	c := webclient.New(nil)
	u, _ := url.Parse(e.base)
	c.Jar.SetCookies(u, []*http.Cookie{{Name: "jobgate_session", Value: valid}})
	if p := do(t, c, "GET", e.base+"/protected", nil); p.status != 200 || p.body != "protected GET for ana of acme" {
		t.Fatalf("valid cookie: %d %s", p.status, p.body)
	}
}

// TestSecureCookies: with an https public URL the session cookie is __Host-jobgate_session
// and the login cookie __Host-jobgate_login (both Secure, Path=/, no Domain: no sibling
// subdomain can plant them); a cookie without the prefix (which any subdomain or http page
// could plant) is not read.
func TestSecureCookies(t *testing.T) {
	const public = "https://jobs.example.com"
	idpSrv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + idpSrv.Listener.Addr().String() + "/oidc"
	idp, err := devidp.New(devidp.Options{Issuer: issuer, Resource: testResource, Users: devUsers, PagesRedirectURIs: []string{public + PathCallback}})
	if err != nil {
		t.Fatal(err)
	}
	idpSrv.Config.Handler = idp.Handler()
	idpSrv.Start()
	defer idpSrv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := authz.NewJWKSVerifier(ctx, authz.JWKSOptions{URL: issuer + "/keys", Issuer: issuer, Audience: testResource})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	keys := testKeys(t)
	p, err := New(Config{Issuer: issuer, ClientID: devidp.PagesClientID, ClientSecret: idp.PagesClientSecret(), PublicURL: public,
		AccessVerifier: v, Keys: keys, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(target string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", target, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, req)
		return rec
	}
	login := serve(public + "/login")
	lc := cookieNamed(login.Header(), "__Host-jobgate_login")
	if login.Code != http.StatusFound || lc == nil || !lc.Secure || !lc.HttpOnly || lc.Path != "/" || lc.Domain != "" || lc.SameSite != http.SameSiteLaxMode {
		t.Fatalf("/login: %d, login cookie %+v", login.Code, lc)
	}
	e := &env{issuer: issuer, base: public}
	back := e.pick(t, webclient.New(nil), login.Header().Get("Location"), "ana")
	cb := serve(back, lc)
	sc := cookieNamed(cb.Header(), "__Host-jobgate_session")
	if cb.Code != http.StatusSeeOther || cb.Header().Get("Location") != public+"/me" || sc == nil || !sc.Secure || !sc.HttpOnly || sc.Path != "/" || sc.Domain != "" {
		t.Fatalf("callback: %d %s, session cookie %+v", cb.Code, cb.Body, sc)
	}
	if me := serve(public+"/me", sc); me.Code != 200 || !strings.Contains(me.Body.String(), "Signed in as ana") {
		t.Fatalf("/me: %d %s", me.Code, me.Body)
	}
	// The same value under the unprefixed name is not the session.
	if me := serve(public+"/me", &http.Cookie{Name: "jobgate_session", Value: sc.Value}); me.Code != http.StatusSeeOther {
		t.Fatalf("/me with an unprefixed cookie: %d", me.Code)
	}
	// Nor is a login cookie under the __Secure- name a sibling subdomain could set.
	login = serve(public + "/login")
	lc = cookieNamed(login.Header(), "__Host-jobgate_login")
	back = e.pick(t, webclient.New(nil), login.Header().Get("Location"), "ana")
	if cb := serve(back, &http.Cookie{Name: "__Secure-jobgate_login", Value: lc.Value}); cb.Code != http.StatusBadRequest || cookieNamed(cb.Header(), "__Host-jobgate_session") != nil {
		t.Fatalf("callback with a __Secure- login cookie: %d %v", cb.Code, cb.Header()["Set-Cookie"])
	}
}
