package pages

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/frontend/handle"
)

const testResource = "http://localhost:9/mcp"

var devUsers = []devidp.User{
	{Subject: "ana", Tenant: "acme", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
	{Subject: "steward", Tenant: "acme", Scopes: []authz.Scope{authz.ScopeApprove}},
	{Subject: "gus", Tenant: "globex", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
}

func testKeys(t testing.TB) *handle.Keyring {
	sum := sha256.Sum256([]byte("pages test key"))
	k, err := handle.NewKeyring("k1", map[string][]byte{"k1": sum[:]})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// env is a dev IdP and a pages server, each on its own loopback listener (two origins, as an
// IdP and jobgate are in production).
type env struct {
	idp      *devidp.IdP
	issuer   string
	pages    *Pages
	srv      *httptest.Server
	base     string // the pages' public URL
	keys     *handle.Keyring
	protect  http.Handler // RequireSession(maxAge) around echoSession, at /protected
	access   authz.Verifier
	idpSrv   *httptest.Server
	resource string
}

type envOpts struct {
	mutate func(*Config) // adjusts the pages config before New
	maxAge time.Duration // RequireSession's at /protected
	public bool          // a dynamically registered public client instead of jobgate-pages
	// prefix, when set (e.g. "/jobs"), puts the pages behind a reverse proxy that strips it:
	// the public URL is the proxy's URL + prefix.
	prefix string
	// idpWrap, when set, wraps the dev IdP's handler (to change what it advertises).
	idpWrap func(http.Handler) http.Handler
}

func startEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	e := &env{keys: testKeys(t), resource: testResource}
	e.srv = httptest.NewUnstartedServer(nil)
	e.base = "http://" + e.srv.Listener.Addr().String()
	var proxy *httptest.Server
	if o.prefix != "" {
		// The pages server is reached only through the proxy, at <proxy>/prefix/… .
		proxy = httptest.NewUnstartedServer(nil)
		backend, _ := url.Parse(e.base)
		proxy.Config.Handler = http.StripPrefix(o.prefix, httputil.NewSingleHostReverseProxy(backend))
		e.base = "http://" + proxy.Listener.Addr().String() + o.prefix
	}
	e.idpSrv = httptest.NewUnstartedServer(nil)
	e.issuer = "http://" + e.idpSrv.Listener.Addr().String() + "/oidc"
	idp, err := devidp.New(devidp.Options{Issuer: e.issuer, Resource: testResource, Users: devUsers,
		PagesRedirectURIs: []string{e.base + PathCallback}, PagesPostLogoutRedirectURIs: []string{e.base + PathSignedOut}})
	if err != nil {
		t.Fatal(err)
	}
	e.idp = idp
	e.idpSrv.Config.Handler = idp.Handler()
	if o.idpWrap != nil {
		e.idpSrv.Config.Handler = o.idpWrap(e.idpSrv.Config.Handler)
	}
	e.idpSrv.Start()
	t.Cleanup(e.idpSrv.Close)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := authz.NewJWKSVerifier(ctx, authz.JWKSOptions{URL: e.issuer + "/keys", Issuer: e.issuer, Audience: testResource})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	e.access = v

	cfg := Config{Issuer: e.issuer, ClientID: devidp.PagesClientID, ClientSecret: idp.PagesClientSecret(), PublicURL: e.base,
		Resource: testResource, AccessVerifier: v, Keys: e.keys, Logger: zaptest.NewLogger(t)}
	if o.public {
		cfg.ClientID, cfg.ClientSecret = registerPublic(t, e.issuer, e.base+PathCallback), ""
	}
	if o.mutate != nil {
		o.mutate(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.pages = p
	mux := http.NewServeMux()
	for _, pat := range Patterns() {
		mux.Handle(pat, p.Handler())
	}
	e.protect = p.RequireSession(o.maxAge, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := SessionFrom(r.Context())
		if !ok {
			t.Error("RequireSession served without a session")
		}
		io.WriteString(w, "protected "+r.Method+" for "+s.Subject+" of "+s.Tenant)
	}))
	mux.Handle("/protected", e.protect)
	e.srv.Config.Handler = mux
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	if proxy != nil {
		proxy.Start()
		t.Cleanup(proxy.Close)
	}
	return e
}

func registerPublic(t *testing.T, issuer, redirect string) string {
	t.Helper()
	body := `{"client_name":"pages test","redirect_uris":["` + redirect + `"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"]}`
	resp, err := http.Post(issuer+"/register", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("register: %s %v", resp.Status, err)
	}
	return m["client_id"].(string)
}

// browser keeps cookies and follows no redirect, so each hop is checked.
func browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type page struct {
	status int
	loc    string
	body   string
	header http.Header
}

func do(t *testing.T, c *http.Client, method, u string, form url.Values, hdr ...string) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	p := page{status: resp.StatusCode, body: string(b), header: resp.Header}
	if l := resp.Header.Get("Location"); l != "" {
		lu, _ := resp.Request.URL.Parse(l)
		p.loc = lu.String()
	}
	return p
}

func wantRedirect(t *testing.T, p page, prefix string) string {
	t.Helper()
	if p.status != http.StatusFound && p.status != http.StatusSeeOther || !strings.HasPrefix(p.loc, prefix) {
		t.Fatalf("want a redirect to %s…, got %d to %q: %s", prefix, p.status, p.loc, p.body)
	}
	return p.loc
}

var (
	reAuthReq = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
	reCSRF    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// toIdP follows /login (or any redirect to the IdP) through the picker as user and returns the
// redirect back to the pages' callback.
func (e *env) pick(t *testing.T, c *http.Client, authorize, user string) string {
	t.Helper()
	picker := wantRedirect(t, do(t, c, "GET", authorize, nil), e.issuer+"/login?")
	pg := do(t, c, "GET", picker, nil)
	id, csrf := reAuthReq.FindStringSubmatch(pg.body), reCSRF.FindStringSubmatch(pg.body)
	if pg.status != 200 || id == nil || csrf == nil {
		t.Fatalf("picker: %d %s", pg.status, pg.body)
	}
	cb := wantRedirect(t, do(t, c, "POST", e.issuer+"/login", url.Values{"authRequestID": {id[1]}, "csrf": {csrf[1]}, "user": {user}}), e.issuer)
	return wantRedirect(t, do(t, c, "GET", cb, nil), e.base+PathCallback+"?")
}

// signIn runs GET /login?return=ret → IdP → picker → callback and returns the callback's answer.
func (e *env) signIn(t *testing.T, c *http.Client, user, ret string) page {
	t.Helper()
	authorize := wantRedirect(t, do(t, c, "GET", e.base+PathLogin+"?"+url.Values{"return": {ret}}.Encode(), nil), e.issuer+"/authorize?")
	return do(t, c, "GET", e.pick(t, c, authorize, user), nil)
}

func cookieNamed(h http.Header, name string) *http.Cookie {
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// TestSignInMeSignOut is the confidential client's whole path: sign in as ana, /me shows who
// and the tenant (from the access token, since the dev IdP's ID token has no tenant), the
// cookie's attributes, then sign out through the IdP's end_session and be sent to sign in.
func TestSignInMeSignOut(t *testing.T) {
	e := startEnv(t, envOpts{})
	c := browser(t)
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
	c := browser(t)
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
	c := browser(t)
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
		c := browser(t)
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
	c := browser(t)
	u, _ := url.Parse(e.base)
	c.Jar.SetCookies(u, []*http.Cookie{{Name: "jobgate_session", Value: valid}})
	if p := do(t, c, "GET", e.base+"/protected", nil); p.status != 200 || p.body != "protected GET for ana of acme" {
		t.Fatalf("valid cookie: %d %s", p.status, p.body)
	}
}

// noSession asserts an error page with msg and no session cookie.
func noSession(t *testing.T, p page, status int, msg string) {
	t.Helper()
	if p.status != status || !strings.Contains(p.body, msg) {
		t.Fatalf("want %d with %q, got %d: %s", status, msg, p.status, p.body)
	}
	if c := cookieNamed(p.header, "jobgate_session"); c != nil {
		t.Fatalf("a session cookie was set: %+v", c)
	}
	if !strings.Contains(p.body, `role="alert"`) {
		t.Fatalf("error page without role=alert: %s", p.body)
	}
}

func TestCallbackRefusals(t *testing.T) {
	e := startEnv(t, envOpts{})
	u, _ := url.Parse(e.base)

	t.Run("state mismatch", func(t *testing.T) {
		c := browser(t)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		bu, _ := url.Parse(back)
		q := bu.Query()
		q.Set("state", "forged")
		bu.RawQuery = q.Encode()
		noSession(t, do(t, c, "GET", bu.String(), nil), 400, "state mismatch")
	})
	t.Run("iss mismatch", func(t *testing.T) {
		c := browser(t)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		bu, _ := url.Parse(back)
		q := bu.Query()
		q.Set("iss", "https://evil.example")
		bu.RawQuery = q.Encode()
		noSession(t, do(t, c, "GET", bu.String(), nil), 400, "iss mismatch")
	})
	t.Run("nonce mismatch", func(t *testing.T) {
		c := browser(t)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		var ls handle.LoginState
		for _, ck := range c.Jar.Cookies(&url.URL{Scheme: "http", Host: u.Host, Path: "/auth/callback"}) {
			if ck.Name == "jobgate_login" {
				ls, _ = e.keys.OpenLoginState(ck.Value, time.Now())
			}
		}
		if ls.State == "" {
			t.Fatal("no login cookie")
		}
		ls.Nonce = "another"
		c.Jar.SetCookies(u, []*http.Cookie{{Name: "jobgate_login", Value: e.keys.SealLoginState(ls), Path: "/"}})
		noSession(t, do(t, c, "GET", back, nil), 400, "nonce mismatch")
	})
	t.Run("no login cookie", func(t *testing.T) {
		c := browser(t)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		noSession(t, do(t, browser(t), "GET", back, nil), 400, "not started in this browser")
	})
	t.Run("replayed callback", func(t *testing.T) {
		c := browser(t)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		wantRedirect(t, do(t, c, "GET", back, nil), e.base+"/me")
		noSession(t, do(t, c, "GET", back, nil), 400, "not started in this browser")
	})
	t.Run("access denied", func(t *testing.T) {
		c := browser(t)
		authorize := wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer)
		au, _ := url.Parse(authorize)
		// What the IdP sends back when the person refuses (RFC 6749 §4.1.2.1).
		p := do(t, c, "GET", e.base+"/auth/callback?"+url.Values{"error": {"access_denied"}, "error_description": {"<b>no</b>"}, "state": {au.Query().Get("state")}}.Encode(), nil)
		noSession(t, p, 403, "Sign-in was refused at the identity provider (access_denied).")
		if strings.Contains(p.body, "<b>no</b>") {
			t.Error("the provider's description is echoed unescaped")
		}
	})
	t.Run("return path", func(t *testing.T) {
		for _, bad := range []string{"//evil.example", "//evil.example/me", "/\\evil.example", "https://evil.example/", "evil", "/auth/callback", "/me\r\nX: y", "javascript:alert(1)"} {
			noSession(t, do(t, browser(t), "GET", e.base+"/login?"+url.Values{"return": {bad}}.Encode(), nil), 400, "must be a path on this site")
		}
		c := browser(t)
		wantRedirect(t, e.signIn(t, c, "steward", "/protected?x=1&y=%2F"), e.base+"/protected?x=1&y=%2F")
		if p := do(t, c, "GET", e.base+"/protected?x=1", nil); p.body != "protected GET for steward of acme" {
			t.Fatalf("landed: %s", p.body)
		}
	})
}

// TestIssRequired: a provider whose discovery advertises
// authorization_response_iss_parameter_supported must put iss in every authorization response
// (RFC 9207); a callback without it is refused (an attacker's provider, in a mix-up, would leave
// it out), one with the right iss signs in. The dev IdP (zitadel) does not send iss, so the
// test adds the promise to its discovery document and iss to the callback by hand.
func TestIssRequired(t *testing.T) {
	e := startEnv(t, envOpts{idpWrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/.well-known/openid-configuration") {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			var m map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
				t.Errorf("discovery: %v", err)
			}
			m["authorization_response_iss_parameter_supported"] = true
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(m)
		})
	}})
	withIss := func(back, iss string) string {
		bu, _ := url.Parse(back)
		q := bu.Query()
		q.Set("iss", iss)
		bu.RawQuery = q.Encode()
		return bu.String()
	}
	c := browser(t)
	back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
	noSession(t, do(t, c, "GET", back, nil), 400, "iss missing")

	c = browser(t)
	back = e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
	noSession(t, do(t, c, "GET", withIss(back, "https://evil.example"), nil), 400, "iss mismatch")

	c = browser(t)
	back = e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
	wantRedirect(t, do(t, c, "GET", withIss(back, e.issuer), nil), e.base+"/me")
	if me := do(t, c, "GET", e.base+"/me", nil); me.status != 200 || !strings.Contains(me.body, "Signed in as ana") {
		t.Fatalf("/me: %d %s", me.status, me.body)
	}
}

func TestProviderProblems(t *testing.T) {
	t.Run("no tenant claim", func(t *testing.T) {
		// Without the access token's verifier the dev IdP's ID token (no tenant) is all there is.
		e := startEnv(t, envOpts{mutate: func(c *Config) { c.AccessVerifier = nil }})
		noSession(t, e.signIn(t, browser(t), "ana", "/me"), 403, `carry no &#34;tenant&#34; (tenant) claim`)
	})
	t.Run("other tenant claim name", func(t *testing.T) {
		e := startEnv(t, envOpts{mutate: func(c *Config) { c.Claims.Tenant, c.AccessVerifier = "org", nil }})
		noSession(t, e.signIn(t, browser(t), "ana", "/me"), 403, `carry no &#34;org&#34; (tenant) claim`)
	})
	t.Run("wrong client secret", func(t *testing.T) {
		e := startEnv(t, envOpts{mutate: func(c *Config) { c.ClientSecret = "wrong" }})
		noSession(t, e.signIn(t, browser(t), "ana", "/me"), 502, "refused this server&#39;s client credentials (invalid_client)")
	})
	t.Run("clock skew", func(t *testing.T) {
		// This server's clock runs two hours ahead: the provider's hour-long ID token has expired.
		e := startEnv(t, envOpts{mutate: func(c *Config) { c.Now = func() time.Time { return time.Now().Add(2 * time.Hour) } }})
		noSession(t, e.signIn(t, browser(t), "ana", "/me"), 502, "clock skew")
	})
	t.Run("unreachable issuer", func(t *testing.T) {
		p, err := New(Config{Issuer: "http://127.0.0.1:1/oidc", ClientID: "x", PublicURL: "http://127.0.0.1:2", Keys: testKeys(t)})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(context.Background())
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "OIDC issuer http://127.0.0.1:1/oidc: discovery failed") {
			t.Fatalf("Check: %v", err)
		}
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:2/login", nil))
		noSession(t, page{status: rec.Code, body: rec.Body.String(), header: rec.Header()}, 502, "cannot be reached")
	})
}

// TestMaxAge: a session older than RequireSession's maxAge is sent back to the IdP with
// prompt=login&max_age=, and comes back fresh; an IdP answer whose auth_time is still too old
// is refused.
// TestDiscoveryMemo: a provider that fails discovery is asked again only after failureMemo, so
// a down provider costs one request per few seconds, not one per page view; success is kept.
func TestDiscoveryMemo(t *testing.T) {
	var hits atomic.Int32
	var up atomic.Bool
	idpSrv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + idpSrv.Listener.Addr().String()
	idpSrv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !up.Load() {
			http.Error(w, "<html>down\nfor maintenance</html>", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"issuer":"`+issuer+`","authorization_endpoint":"`+issuer+`/a","token_endpoint":"`+issuer+`/t","jwks_uri":"`+issuer+`/k"}`)
	})
	idpSrv.Start()
	defer idpSrv.Close()
	p, err := New(Config{Issuer: issuer, ClientID: "c", PublicURL: "http://127.0.0.1:2", Keys: testKeys(t)})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := p.Check(context.Background()); err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "503 Service Unavailable") {
			t.Fatalf("Check: %v", err)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d discovery requests for 3 checks within %s", n, failureMemo)
	}
	up.Store(true)
	p.mu.Lock()
	p.lastFail = time.Now().Add(-failureMemo) // as if failureMemo had passed
	p.mu.Unlock()
	for range 3 {
		if err := p.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("%d discovery requests, want 2", n)
	}
}

func TestMaxAge(t *testing.T) {
	e := startEnv(t, envOpts{maxAge: 5 * time.Minute})
	c := browser(t)
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
	c = browser(t)
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
	c := browser(t)
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

// TestLongReturn: a page address longer than a login may carry (maxReturnLen) is not put in
// return= (where /login would refuse it with 400): the sign-in goes back to /me instead.
func TestLongReturn(t *testing.T) {
	e := startEnv(t, envOpts{})
	long := "/protected?q=" + strings.Repeat("x", maxReturnLen)
	c := browser(t)
	login := wantRedirect(t, do(t, c, "GET", e.base+long, nil), e.base+"/login?")
	if login != e.base+"/login?return=%2Fme" {
		t.Fatalf("redirect to %s", login)
	}
	authorize := wantRedirect(t, do(t, c, "GET", login, nil), e.issuer+"/authorize?")
	wantRedirect(t, do(t, c, "GET", e.pick(t, c, authorize, "ana"), nil), e.base+"/me")
	// A return path that fits still comes back to the page.
	fits := "/protected?q=" + strings.Repeat("x", 100)
	wantRedirect(t, do(t, browser(t), "GET", e.base+fits, nil), e.base+"/login?"+url.Values{"return": {fits}}.Encode())
}

func TestNewRefuses(t *testing.T) {
	k := testKeys(t)
	ok := Config{Issuer: "https://idp.example.com", ClientID: "c", PublicURL: "https://jobs.example.com", Keys: k}
	for name, mut := range map[string]func(*Config){
		"no issuer":       func(c *Config) { c.Issuer = "" },
		"http issuer":     func(c *Config) { c.Issuer = "http://idp.example.com" },
		"no client":       func(c *Config) { c.ClientID = "" },
		"no keys":         func(c *Config) { c.Keys = nil },
		"http public URL": func(c *Config) { c.PublicURL = "http://jobs.example.com" },
		"query in URL":    func(c *Config) { c.PublicURL = "https://jobs.example.com/?x" },
		"long TTL":        func(c *Config) { c.SessionTTL = 25 * time.Hour },
		"bad claim":       func(c *Config) { c.Claims.Tenant = "sub" },
	} {
		c := ok
		mut(&c)
		if _, err := New(c); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v", name, err)
		}
	}
	p, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if p.sessionCookie != "__Host-jobgate_session" || !p.secure {
		t.Errorf("https: cookie %q secure %v", p.sessionCookie, p.secure)
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
	back := e.pick(t, browser(t), login.Header().Get("Location"), "ana")
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
	back = e.pick(t, browser(t), login.Header().Get("Location"), "ana")
	if cb := serve(back, &http.Cookie{Name: "__Secure-jobgate_login", Value: lc.Value}); cb.Code != http.StatusBadRequest || cookieNamed(cb.Header(), "__Host-jobgate_session") != nil {
		t.Fatalf("callback with a __Secure- login cookie: %d %v", cb.Code, cb.Header()["Set-Cookie"])
	}
}
