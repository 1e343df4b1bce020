package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/activities/testenv"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
)

// startDev runs the dev stack in-process on listen, its state in dir ("" = --ephemeral).
func startDev(t *testing.T, dir, listen string) (*DevMain, string) {
	t.Helper()
	var out bytes.Buffer
	m := &DevMain{Config: DevConfig{DataDir: dir, Ephemeral: dir == "", Listen: listen, TemporalPort: 0, UIPort: -1, TokenTTL: time.Hour}, Out: &out}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel() // Run's ctx ends here, as in tests/dev_test.go: the stack must outlive it
	if err := m.Run(ctx); err != nil {
		_ = m.Close()
		t.Fatal(err)
	}
	return m, out.String()
}

// devBase is the stack's http://localhost:<port>, as its resource URI and issuer name it.
func devBase(m *DevMain) string { return strings.TrimSuffix(m.ResourceURI(), "/mcp") }

func getJSONMap(t *testing.T, u string) map[string]any {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	return v
}

var (
	reAuthReqID = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
	reCSRFField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// noRedirect is a browser that stops at every redirect, so each hop is checked.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func redirectTo(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		t.Fatalf("%s %s: want a redirect, got %s: %s", resp.Request.Method, resp.Request.URL, resp.Status, b)
	}
	l, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return l.String()
}

// pickUser is a person at the dev IdP: authorize → the picker page → POST the picker as
// user → the callback; it returns the code the IdP sends to redirect.
func pickUser(t *testing.T, authURL, user, redirect string) string {
	t.Helper()
	get := func(u string) *http.Response {
		t.Helper()
		resp, err := noRedirect.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	picker := redirectTo(t, get(authURL))
	resp := get(picker)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id, csrf := reAuthReqID.FindSubmatch(page), reCSRFField.FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || id == nil || csrf == nil || !bytes.Contains(page, []byte("Development only")) {
		t.Fatalf("picker %s: %s\n%s", picker, resp.Status, page)
	}
	pu, _ := url.Parse(picker)
	pu.RawQuery = ""
	presp, err := noRedirect.PostForm(pu.String(), url.Values{"authRequestID": {string(id[1])}, "csrf": {string(csrf[1])}, "user": {user}})
	if err != nil {
		t.Fatal(err)
	}
	final, err := url.Parse(redirectTo(t, get(redirectTo(t, presp))))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(final.String(), redirect+"?") || final.Query().Get("code") == "" {
		t.Fatalf("the IdP sent the browser to %s", final)
	}
	return final.Query().Get("code")
}

// codeLogin is a whole authorization code + PKCE login of user with cfg (x/oauth2).
func codeLogin(t *testing.T, cfg *oauth2.Config, user string) *oauth2.Token {
	t.Helper()
	pkce := oauth2.GenerateVerifier()
	code := pickUser(t, cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(pkce)), user, cfg.RedirectURL)
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// listJobs calls list_jobs through the go-sdk MCP client with token and returns the result.
func listJobs(t *testing.T, m *DevMain, token string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "devidp-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: m.ResourceURI(), HTTPClient: &http.Client{Transport: bearerTransport{token}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_jobs", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("list_jobs: %v", err)
	}
	if res.IsError {
		t.Fatalf("list_jobs answered an error: %+v", res.Content)
	}
	return res
}

// postMCP sends tools/list with token and returns the status and challenge.
func postMCP(t *testing.T, m *DevMain, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, m.ResourceURI(), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

// TestDevIdentityProvider runs the dev stack twice on one data dir and port: the banner and the
// RFC 9728 metadata name the identity provider; its metadata at both locations MCP clients try
// has what they need; a token from a real code + PKCE login calls list_jobs through the MCP
// client, as does an HS256 `jobgate token`; tokens of another issuer or key are refused with
// 401; after a restart the kid, a dynamically registered client and its refresh token remain.
func TestDevIdentityProvider(t *testing.T) {
	testenv.Heavy(t, "starts the dev stack (embedded Temporal) twice")
	dir := t.TempDir()
	m, banner := startDev(t, dir, "127.0.0.1:0")
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = m.Close()
		}
	})
	base := devBase(m)
	issuer := base + "/oidc"
	if m.IdPIssuer() != issuer {
		t.Fatalf("IdPIssuer %q, want %q", m.IdPIssuer(), issuer)
	}
	for _, want := range []string{
		"Identity provider " + issuer + " (dev only)",
		"jobgate login --url " + base + "/mcp",
		"claude mcp add --transport http jobgate " + base + "/mcp\n",
		`"mcpServers"`,
	} {
		if !strings.Contains(banner, want) {
			t.Fatalf("banner lacks %q:\n%s", want, banner)
		}
	}
	if strings.Contains(banner, "loopback clients only") {
		t.Fatalf("banner of a loopback --listen warns about remote clients:\n%s", banner)
	}

	// RFC 9728: the protected resource names the IdP, at both metadata URLs.
	for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		prm := getJSONMap(t, base+p)
		if as, _ := prm["authorization_servers"].([]any); len(as) != 1 || as[0] != issuer || prm["resource"] != base+"/mcp" {
			t.Fatalf("%s: %v", p, prm)
		}
	}
	// The IdP's metadata where MCP clients look first (RFC 8414 path insertion) and where OIDC
	// clients look: PKCE S256 (MCP clients refuse without it), registration, device grant.
	for _, u := range []string{base + "/.well-known/oauth-authorization-server/oidc", issuer + "/.well-known/openid-configuration"} {
		md := getJSONMap(t, u)
		ccm, _ := md["code_challenge_methods_supported"].([]any)
		gts, _ := md["grant_types_supported"].([]any)
		if md["issuer"] != issuer || !slices.Contains(ccm, any("S256")) || md["registration_endpoint"] != issuer+"/register" ||
			md["device_authorization_endpoint"] != issuer+"/device_authorization" || md["jwks_uri"] != issuer+"/keys" ||
			!slices.Contains(gts, any("refresh_token")) || !slices.Contains(gts, any("urn:ietf:params:oauth:grant-type:device_code")) {
			t.Fatalf("%s: %v", u, md)
		}
	}
	endpoint := oauth2.Endpoint{AuthURL: issuer + "/authorize", TokenURL: issuer + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}

	// A person logs in as ana with the pre-registered public client and PKCE.
	cli := &oauth2.Config{ClientID: devidp.CLIClientID, Endpoint: endpoint, RedirectURL: "http://127.0.0.1:45678/callback",
		Scopes: []string{"openid", "jobs:read", "jobs:write"}}
	tok := codeLogin(t, cli, "ana")
	res := listJobs(t, m, tok.AccessToken)
	if sc, _ := res.StructuredContent.(map[string]any); sc == nil || sc["jobs"] == nil {
		t.Fatalf("list_jobs with a dev IdP token: %+v", res.StructuredContent)
	}
	// The device grant (RFC 8628), approved as ops on the device page under /oidc/device.
	dev := &oauth2.Config{ClientID: devidp.CLIClientID, Endpoint: oauth2.Endpoint{DeviceAuthURL: issuer + "/device_authorization",
		TokenURL: issuer + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}, Scopes: []string{"jobs:read", "jobs:admin"}}
	da, err := dev.DeviceAuth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if da.VerificationURI != issuer+"/device" {
		t.Fatalf("verification_uri %s", da.VerificationURI)
	}
	resp, err := http.Get(da.VerificationURI + "?user_code=" + url.QueryEscape(da.UserCode))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf := reCSRFField.FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || csrf == nil {
		t.Fatalf("device page: %s\n%s", resp.Status, page)
	}
	resp, err = http.PostForm(da.VerificationURI, url.Values{"user_code": {da.UserCode}, "csrf": {string(csrf[1])}, "user": {"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("device approval: %s", resp.Status)
	}
	// Approved already, so one token request answers (no polling interval to wait out).
	resp, err = http.PostForm(issuer+"/oauth/token", url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"},
		"device_code": {da.DeviceCode}, "client_id": {devidp.CLIClientID}})
	if err != nil {
		t.Fatal(err)
	}
	var dtr struct {
		AccessToken string `json:"access_token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&dtr)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || dtr.AccessToken == "" {
		t.Fatalf("device token: %s %v", resp.Status, err)
	}
	listJobs(t, m, dtr.AccessToken)

	// `jobgate token` (HS256, iss jobgate-dev) keeps working beside it.
	hs, err := m.MintDevToken("acme", "bo", []authz.Scope{authz.ScopeRead}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	listJobs(t, m, hs)

	// Refused, each with 401 invalid_token: another issuer; the IdP's issuer and kid signed
	// with another key; the IdP's issuer with the dev HS256 secret; the ID token.
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{"iss": issuer, "aud": []string{m.ResourceURI()}, "sub": "ana", "tenant": "acme", "scope": "jobs:read",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	forged := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	forged.Header["kid"] = m.IdP().KeyID()
	forgedTok, err := forged.SignedString(other)
	if err != nil {
		t.Fatal(err)
	}
	hsAsIdP, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(m.secret)
	if err != nil {
		t.Fatal(err)
	}
	claims["iss"] = "http://localhost:1/oidc"
	otherIss := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	otherIss.Header["kid"] = m.IdP().KeyID()
	otherIssTok, err := otherIss.SignedString(other)
	if err != nil {
		t.Fatal(err)
	}
	idTok, _ := tok.Extra("id_token").(string)
	if idTok == "" {
		t.Fatal("no ID token for scope openid")
	}
	for name, bad := range map[string]string{"other issuer": otherIssTok, "other key, IdP's kid": forgedTok, "HS256 under the IdP's issuer": hsAsIdP, "ID token": idTok} {
		if code, ch := postMCP(t, m, bad); code != http.StatusUnauthorized || !strings.HasPrefix(ch, `Bearer error="invalid_token"`) {
			t.Errorf("%s: %d %q", name, code, ch)
		}
	}

	// An MCP client registers itself (RFC 7591) and logs in on its own loopback port.
	resp, err = http.Post(issuer+"/register", "application/json", strings.NewReader(
		`{"client_name":"test agent","redirect_uris":["http://localhost:33418/callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || reg.ClientID == "" {
		t.Fatalf("register: %s %v %+v", resp.Status, err, reg)
	}
	dcr := &oauth2.Config{ClientID: reg.ClientID, Endpoint: endpoint, RedirectURL: "http://localhost:33418/callback", Scopes: []string{"jobs:read"}}
	dtok := codeLogin(t, dcr, "gus")
	listJobs(t, m, dtok.AccessToken)
	if dtok.RefreshToken == "" {
		t.Fatal("no refresh token for the registered client")
	}

	// Restart on the same data dir and port.
	kid, addr := m.IdP().KeyID(), m.Addr()
	closed = true
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, _ := startDev(t, dir, addr)
	t.Cleanup(func() { _ = m2.Close() })
	if m2.IdPIssuer() != issuer || m2.IdP().KeyID() != kid {
		t.Fatalf("after restart: issuer %s kid %s, want %s %s", m2.IdPIssuer(), m2.IdP().KeyID(), issuer, kid)
	}
	// The old refresh token still works for the registered client, and its new access token
	// (and the one from before the restart) pass the restarted stack's JWKS verification.
	rtok, err := dcr.TokenSource(context.Background(), &oauth2.Token{RefreshToken: dtok.RefreshToken, Expiry: time.Now().Add(-time.Hour)}).Token()
	if err != nil {
		t.Fatalf("refresh after restart: %v", err)
	}
	listJobs(t, m2, rtok.AccessToken)
	listJobs(t, m2, tok.AccessToken)
	// The registered client can still start a fresh login.
	listJobs(t, m2, codeLogin(t, dcr, "gus").AccessToken)
}

// TestLoopbackBase: dev fetches its IdP's key set from its own listener, whatever --listen says.
func TestLoopbackBase(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		"0.0.0.0:8080":   "http://127.0.0.1:8080",
		"[::]:8080":      "http://[::1]:8080",
		"[::1]:9":        "http://[::1]:9",
		"10.1.2.3:80":    "http://10.1.2.3:80",
	} {
		a, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := loopbackBase(a); got != want {
			t.Errorf("loopbackBase(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestListenerClient: the dev pages' client dials the listener for the issuer's host (which
// names localhost, where a --listen on a specific address has nothing) and anything else as is.
func TestListenerClient(t *testing.T) {
	serve := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return s
	}
	idp, other := serve("idp"), serve("other")
	dead := deadLocalAddr(t) // nothing listens here: only the redirect reaches the listener
	c := listenerClient(dead, idp.Listener.Addr())
	for u, want := range map[string]string{"http://" + dead + "/oidc/keys": "idp", other.URL: "other"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != want {
			t.Errorf("GET %s reached %q, want %q", u, b, want)
		}
	}
}

// deadLocalAddr is a loopback host:port nothing listens on (bound, then closed).
func deadLocalAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// nonLoopbackIP is an address of this machine that is not loopback (nor link-local), where a
// listener can bind, or "" when the machine has none.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if ln, err := net.Listen("tcp", net.JoinHostPort(n.IP.String(), "0")); err == nil {
			ln.Close()
			return n.IP.String()
		}
	}
	return ""
}

// TestDevNonLoopbackListen: `dev --listen` on a specific non-loopback address starts (the
// pages discover the identity provider through the listener, not through localhost, which
// does not answer there), says in its banner that the identity provider answers loopback
// clients only, and holds to it: a client on that address gets 403 from the picker, the
// device page and /register, while the protocol endpoints answer. With --listen 0.0.0.0 the
// same stack serves the picker to a loopback client and refuses it to the LAN address.
func TestDevNonLoopbackListen(t *testing.T) {
	testenv.Heavy(t, "starts the dev stack (embedded Temporal) twice")
	ip := nonLoopbackIP(t)
	if ip == "" {
		// TestListenerClient and devidp's TestLoopbackOnly cover the parts without one; a skip
		// still fails CI, which must run the whole stack on such an address.
		testenv.Missing(t, "this machine has no non-loopback IPv4 address to listen on")
	}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := noRedirect.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	refused := func(base string) {
		t.Helper()
		for _, p := range []string{"/oidc/login?authRequestID=x", "/oidc/device"} {
			if code, body := get(base + p); code != http.StatusForbidden || body != devidp.RemoteOnlyMessage+"\n" {
				t.Errorf("GET %s%s from %s: %d %q", base, p, ip, code, body)
			}
		}
		resp, err := http.Post(base+"/oidc/register", "application/json", strings.NewReader(`{"redirect_uris":["http://127.0.0.1/cb"]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("register from %s: %s", ip, resp.Status)
		}
		if code, _ := get(base + "/oidc/keys"); code != http.StatusOK {
			t.Errorf("keys from %s: %d", ip, code)
		}
	}
	const note = "the identity provider answers loopback clients only (--listen "

	m, banner := startDev(t, "", net.JoinHostPort(ip, "0"))
	t.Cleanup(func() { _ = m.Close() })
	if !strings.Contains(banner, note+m.Addr()+" is not loopback)") {
		t.Fatalf("banner lacks the loopback-only line:\n%s", banner)
	}
	refused("http://" + m.Addr())
	// The pages are on (their discovery ran at start): /login sends the browser to the issuer.
	if resp, err := noRedirect.Get("http://" + m.Addr() + "/login"); err != nil {
		t.Fatal(err)
	} else if l := redirectTo(t, resp); !strings.HasPrefix(l, m.IdPIssuer()+"/authorize?") {
		t.Fatalf("/login sent the browser to %s", l)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	all, banner := startDev(t, "", "0.0.0.0:0")
	t.Cleanup(func() { _ = all.Close() })
	port := strconv.Itoa(all.serve.ln.Addr().(*net.TCPAddr).Port)
	if !strings.Contains(banner, note+all.Addr()+" is not loopback)") {
		t.Fatalf("banner lacks the loopback-only line:\n%s", banner)
	}
	refused("http://" + net.JoinHostPort(ip, port))
	// A loopback client gets the picker (400: the request ID is unknown, but not refused).
	if code, body := get("http://127.0.0.1:" + port + "/oidc/login?authRequestID=x"); code != http.StatusBadRequest {
		t.Errorf("picker from loopback: %d %q", code, body)
	}
}
