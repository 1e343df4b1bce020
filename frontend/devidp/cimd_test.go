package devidp

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
)

// docServer serves Client ID Metadata Documents over real TLS (httptest's certificate for
// 127.0.0.1, trusted through Options.CIMDRootCAs) and counts the fetches of each path.
type docServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	docs map[string]docReply
	hits map[string]int
}

type docReply struct {
	status int
	header map[string]string
	body   string
}

func newDocServer(t *testing.T) *docServer {
	t.Helper()
	s := &docServer{docs: map[string]docReply{}, hits: map[string]int{}}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		d, ok := s.docs[r.URL.Path]
		s.hits[r.URL.Path]++
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		for k, v := range d.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(max(d.status, 200))
		_, _ = io.WriteString(w, d.body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *docServer) url(path string) string { return s.srv.URL + path }

func (s *docServer) set(path string, d docReply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[path] = d
}

func (s *docServer) fetches(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

// doc is a valid metadata document for the URL of path (plus extra members).
func (s *docServer) doc(path string, extra map[string]any) string {
	m := map[string]any{"client_id": s.url(path), "client_name": "Example MCP Client",
		"client_uri": "https://app.example", "redirect_uris": []string{redirectURI},
		"grant_types": []string{"authorization_code", "refresh_token", grantDevice}, "token_endpoint_auth_method": "none"}
	for k, v := range extra {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func (s *docServer) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.srv.Certificate())
	return p
}

// TestCIMDSignIn: discovery says client_id_metadata_document_supported (and keeps
// registration_endpoint); an https client_id URL signs in with code + PKCE, the picker naming
// the client from its document, its host and the loopback redirect; the token carries the URL
// as client (aud), authz accepts it, and it refreshes.
func TestCIMDSignIn(t *testing.T) {
	ds := newDocServer(t)
	ds.set("/client.json", docReply{body: ds.doc("/client.json", nil)})
	p := startIdPWith(t, Options{CIMDAllowLoopback: true, CIMDRootCAs: ds.roots()})
	meta := getJSON(t, p.issuer+"/.well-known/openid-configuration")
	if meta["client_id_metadata_document_supported"] != true || meta["registration_endpoint"] != p.issuer+"/register" {
		t.Fatalf("discovery: client_id_metadata_document_supported=%v registration_endpoint=%v", meta["client_id_metadata_document_supported"], meta["registration_endpoint"])
	}
	u, _ := url.Parse(p.issuer)
	if rfc := getJSON(t, "http://"+u.Host+"/.well-known/oauth-authorization-server/oidc"); rfc["client_id_metadata_document_supported"] != true {
		t.Fatalf("RFC 8414 metadata lacks client_id_metadata_document_supported: %v", rfc)
	}

	d := p.discover(t)
	cfg := oauthConfig(d, "jobs:read")
	cfg.ClientID = ds.url("/client.json")
	pkce := oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(pkce))

	// The picker names the client from its document.
	c := browser()
	page := readBody(t, get(t, c, location(t, authURL, get(t, c, authURL))))
	host := strings.TrimPrefix(ds.srv.URL, "https://")
	for _, want := range []string{
		"&#34;Example MCP Client&#34; (the name its metadata document at " + host + " gives it; it says it is from app.example)",
		"goes back to <strong>127.0.0.1:45678</strong>", "a program on this computer",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("picker lacks %q:\n%s", want, page)
		}
	}
	code := p.login(t, authURL, "ana", "st")
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, p, d)
	checkAccess(t, v, tok.AccessToken, "ana", "acme", authz.ScopeRead)
	if !strings.Contains(jwtPayload(t, tok.AccessToken), `"`+ds.url("/client.json")+`"`) {
		t.Errorf("access token does not name the client URL: %s", jwtPayload(t, tok.AccessToken))
	}
	tok2, err := refresh(context.Background(), cfg, tok.RefreshToken)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	checkAccess(t, v, tok2.AccessToken, "ana", "acme", authz.ScopeRead)
}

// TestCIMDDevicePage: the device page names a metadata-document client from its document.
func TestCIMDDevicePage(t *testing.T) {
	ds := newDocServer(t)
	ds.set("/tv.json", docReply{body: ds.doc("/tv.json", map[string]any{"client_name": "Living-room agent", "client_uri": nil})})
	p := startIdPWith(t, Options{CIMDAllowLoopback: true, CIMDRootCAs: ds.roots()})
	d := p.discover(t)
	cfg := oauthConfig(d, "jobs:read")
	cfg.ClientID = ds.url("/tv.json")
	cfg.Endpoint.DeviceAuthURL = p.issuer + "/device_authorization"
	da, err := cfg.DeviceAuth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	page := readBody(t, get(t, browser(), da.VerificationURI+"?user_code="+url.QueryEscape(da.UserCode)))
	want := "&#34;Living-room agent&#34; (the name its metadata document at " + strings.TrimPrefix(ds.srv.URL, "https://") + " gives it)"
	if !strings.Contains(page, want) || !strings.Contains(page, ds.url("/tv.json")) {
		t.Fatalf("device page lacks %q and the client URL:\n%s", want, page)
	}
}

// TestCIMDRefusals: each broken document or client_id URL is refused at /authorize with 400,
// never a redirect, and a reason naming the field; the token endpoint answers invalid_client.
func TestCIMDRefusals(t *testing.T) {
	ds := newDocServer(t)
	p := startIdPWith(t, Options{CIMDAllowLoopback: true, CIMDRootCAs: ds.roots()})
	strict := startIdPWith(t, Options{CIMDRootCAs: ds.roots()}) // no loopback opt-in
	ds.set("/ok.json", docReply{body: ds.doc("/ok.json", nil)})
	ds.set("/other.json", docReply{body: ds.doc("/other.json", map[string]any{"client_id": "https://app.example/client.json"})})
	ds.set("/big.json", docReply{body: ds.doc("/big.json", map[string]any{"pad": strings.Repeat("x", CIMDMaxBytes)})})
	ds.set("/chunked.json", docReply{header: map[string]string{"Transfer-Encoding": "chunked"}, body: ds.doc("/chunked.json", map[string]any{"pad": strings.Repeat("y", 2*CIMDMaxBytes)})})
	ds.set("/moved.json", docReply{status: 302, header: map[string]string{"Location": "/ok.json"}})
	ds.set("/html.json", docReply{header: map[string]string{"Content-Type": "text/html"}, body: ds.doc("/html.json", nil)})
	ds.set("/secret.json", docReply{body: ds.doc("/secret.json", map[string]any{"client_secret": "s3cret"})})
	ds.set("/post.json", docReply{body: ds.doc("/post.json", map[string]any{"token_endpoint_auth_method": "client_secret_post"})})
	ds.set("/noname.json", docReply{body: ds.doc("/noname.json", map[string]any{"client_name": nil})})
	ds.set("/evilredirect.json", docReply{body: ds.doc("/evilredirect.json", map[string]any{"redirect_uris": []string{"http://evil.example/cb"}})})
	ds.set("/notjson.json", docReply{body: `{"client_id": "`})
	ds.set("/types.json", docReply{body: `{"client_id":"` + ds.url("/types.json") + `","client_name":"x","redirect_uris":"http://127.0.0.1/cb"}`})
	port := strings.TrimPrefix(ds.srv.URL, "https://127.0.0.1")
	for _, c := range []struct {
		name, clientID, redirect, code, reason string
		idp                                    *testIdP
	}{
		{"another client_id", ds.url("/other.json"), "", "invalid_client", `names client_id "https://app.example/client.json", not its own URL`, p},
		{"redirect not in the document", ds.url("/ok.json"), "http://127.0.0.1:45678/elsewhere", "invalid_request", `redirect_uri: "http://127.0.0.1:45678/elsewhere" is not one of the redirect_uris`, p},
		{"redirect on another host", ds.url("/ok.json"), "https://evil.example/callback", "invalid_request", "is not one of the redirect_uris", p},
		{"oversized (Content-Length)", ds.url("/big.json"), "", "invalid_client", "larger than 5120 bytes", p},
		{"oversized (chunked)", ds.url("/chunked.json"), "", "invalid_client", "larger than 5120 bytes", p},
		{"http client_id", "http://127.0.0.1" + port + "/ok.json", "", "invalid_client", "must use https", p},
		{"loopback without the opt-in", ds.url("/ok.json"), "", "invalid_client", "127.0.0.1: a loopback address", strict},
		{"localhost without the opt-in", "https://localhost" + port + "/ok.json", "", "invalid_client", "localhost: a loopback address", strict},
		{"mapped loopback without the opt-in", "https://[::ffff:127.0.0.1]" + port + "/ok.json", "", "invalid_client", "a loopback address", strict},
		{"private address", "https://10.1.2.3/ok.json", "", "invalid_client", "10.1.2.3: a private address", p},
		{"metadata service", "https://169.254.169.254/latest.json", "", "invalid_client", "a link-local address", p},
		{"redirect answered", ds.url("/moved.json"), "", "invalid_client", `answered "302 Found"; only 200 OK`, p},
		{"not found", ds.url("/missing.json"), "", "invalid_client", `answered "404 Not Found"`, p},
		{"not JSON content type", ds.url("/html.json"), "", "invalid_client", `Content-Type "text/html" is not application/json`, p},
		{"client secret", ds.url("/secret.json"), "", "invalid_client", "client_secret: a metadata document must not carry", p},
		{"secret auth method", ds.url("/post.json"), "", "invalid_client", `token_endpoint_auth_method: "client_secret_post" needs a shared secret`, p},
		{"no client_name", ds.url("/noname.json"), "", "invalid_client", "client_name: required", p},
		{"http redirect elsewhere", ds.url("/evilredirect.json"), "", "invalid_client", "redirect_uris:", p},
		{"broken JSON", ds.url("/notjson.json"), "", "invalid_client", "not valid JSON", p},
		{"wrong member type", ds.url("/types.json"), "", "invalid_client", "redirect_uris is not a JSON array of strings", p},
		{"no path", ds.url("/"), "", "invalid_client", "needs a path", p},
		{"dot segment", ds.url("/a/../ok.json"), "", "invalid_client", `has a ".." path segment`, p},
		{"encoded dot segment", ds.url("/a/%2e%2e/ok.json"), "", "invalid_client", `has a ".." path segment`, p},
		{"fragment", ds.url("/ok.json#x"), "", "invalid_client", "has a fragment", p},
		{"userinfo", "https://u:pw@127.0.0.1" + port + "/ok.json", "", "invalid_client", "username or password", p},
	} {
		t.Run(c.name, func(t *testing.T) {
			redirect := c.redirect
			if redirect == "" {
				redirect = redirectURI
			}
			q := url.Values{"client_id": {c.clientID}, "redirect_uri": {redirect}, "response_type": {"code"}, "scope": {"jobs:read"},
				"state": {"s"}, "code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())}, "code_challenge_method": {"S256"}}
			resp := get(t, browser(), c.idp.issuer+"/authorize?"+q.Encode())
			body := readBody(t, resp)
			if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(body, c.code+": ") || !strings.Contains(body, c.reason) {
				t.Fatalf("authorize: %d %q (Location %q), want 400 %q containing %q", resp.StatusCode, body, resp.Header.Get("Location"), c.code, c.reason)
			}
			if c.code != "invalid_client" {
				return
			}
			// The protocol endpoints that load the client first say the same, as OAuth errors.
			st, m := postForm(t, c.idp.issuer+"/device_authorization", url.Values{"client_id": {c.clientID}, "scope": {"jobs:read"}})
			if st != http.StatusUnauthorized || m["error"] != "invalid_client" || !strings.Contains(fmt.Sprint(m["error_description"]), c.reason) {
				t.Fatalf("device_authorization: %d %v, want 401 invalid_client with %q", st, m, c.reason)
			}
		})
	}
}

// TestCIMDCache: a document is reused while its caching headers say it is fresh (bounded),
// fetched again once stale, never stored under no-store, and a failure is never cached.
func TestCIMDCache(t *testing.T) {
	ds := newDocServer(t)
	now := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	p := startIdPWith(t, Options{CIMDAllowLoopback: true, CIMDRootCAs: ds.roots(), Now: clock})
	resolve := func(path string) error {
		_, err := p.store.cimd.resolve(context.Background(), ds.url(path))
		return err
	}
	mustResolve := func(path string, fetches int) {
		t.Helper()
		if err := resolve(path); err != nil {
			t.Fatal(err)
		}
		if n := ds.fetches(path); n != fetches {
			t.Fatalf("%s fetched %d times, want %d", path, n, fetches)
		}
	}
	ds.set("/a.json", docReply{header: map[string]string{"Cache-Control": "public, max-age=60"}, body: ds.doc("/a.json", nil)})
	mustResolve("/a.json", 1)
	mustResolve("/a.json", 1)
	advance(59 * time.Second)
	mustResolve("/a.json", 1)
	advance(2 * time.Second)
	mustResolve("/a.json", 2)

	ds.set("/b.json", docReply{header: map[string]string{"Cache-Control": "no-store"}, body: ds.doc("/b.json", nil)})
	mustResolve("/b.json", 1)
	mustResolve("/b.json", 2)

	ds.set("/c.json", docReply{header: map[string]string{"Cache-Control": "max-age=999999999"}, body: ds.doc("/c.json", nil)})
	mustResolve("/c.json", 1)
	advance(cimdMaxTTL + time.Second)
	mustResolve("/c.json", 2)

	ds.set("/d.json", docReply{body: ds.doc("/d.json", map[string]any{"client_id": "https://x.example/d.json"})})
	if err := resolve("/d.json"); err == nil {
		t.Fatal("a document naming another client_id resolved")
	}
	ds.set("/d.json", docReply{body: ds.doc("/d.json", nil)})
	mustResolve("/d.json", 2) // the failure was not cached
	mustResolve("/d.json", 2) // default freshness without headers
	advance(cimdDefaultTTL + time.Second)
	mustResolve("/d.json", 3)
}

func TestCacheTTL(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{}, cimdDefaultTTL},
		{http.Header{"Cache-Control": {"max-age=120"}}, 2 * time.Minute},
		{http.Header{"Cache-Control": {"max-age=120"}, "Age": {"100"}}, 20 * time.Second},
		{http.Header{"Cache-Control": {"max-age=0"}}, 0},
		{http.Header{"Cache-Control": {"no-cache"}}, 0},
		{http.Header{"Cache-Control": {"private", "no-store"}}, 0},
		{http.Header{"Cache-Control": {"max-age=abc"}}, 0},
		{http.Header{"Cache-Control": {"max-age=-5"}}, 0},
		{http.Header{"Cache-Control": {"max-age=99999999"}}, cimdMaxTTL},
		{http.Header{"Expires": {now.Add(time.Hour).Format(http.TimeFormat)}}, time.Hour},
		{http.Header{"Expires": {now.Add(time.Hour).Format(http.TimeFormat)}, "Date": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 2 * time.Hour},
		{http.Header{"Expires": {"0"}}, 0},
		{http.Header{"Expires": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0},
	} {
		if got := cacheTTL(c.h, now); got != c.want {
			t.Errorf("cacheTTL(%v) = %v, want %v", c.h, got, c.want)
		}
	}
}

// TestCIMDDialGuard: the dialer's own check, on the address after resolution: public passes,
// special-use addresses are refused, loopback only with the opt-in.
func TestCIMDDialGuard(t *testing.T) {
	for _, c := range []struct {
		addr     string
		loopback bool
		refused  string
	}{
		{"93.184.215.14:443", false, ""},
		{"[2606:4700::1]:443", false, ""},
		{"127.0.0.1:443", false, "a loopback address"},
		{"[::1]:443", false, "a loopback address"},
		{"127.0.0.1:443", true, ""},
		{"[::1]:443", true, ""},
		{"10.0.0.1:443", true, "a private address"},
		{"169.254.169.254:80", true, "a link-local address"},
		{"[64:ff9b::7f00:1]:443", false, "a loopback address (inside a NAT64 address)"},
		{"0.0.0.0:443", true, "an unspecified address"},
		{"[fd00::1]:443", true, "a private address"},
	} {
		err := cimdDialControl(c.loopback)("tcp", c.addr, nil)
		if (err == nil) != (c.refused == "") || (err != nil && !strings.Contains(err.Error(), c.refused)) {
			t.Errorf("dial %s (loopback %v): %v, want refused %q", c.addr, c.loopback, err, c.refused)
		}
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func postForm(t *testing.T, u string, v url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(u, v)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func jwtPayload(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
