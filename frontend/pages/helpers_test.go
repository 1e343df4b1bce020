package pages

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
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
	// jobs, when set, mounts the job pages (JobsHandler) over it beside the sign-in pages.
	jobs Jobs
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
	if o.jobs != nil {
		jobs := p.JobsHandler(o.jobs, 0)
		for _, pat := range JobsPatterns() {
			mux.Handle(pat, jobs)
		}
	}
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
