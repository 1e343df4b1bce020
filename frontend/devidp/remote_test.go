package devidp

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestLoopbackOnly: without Options.AllowRemote, a client on another host gets 403 and one
// line from every page that can hand out a token (the picker, the device page) or register a
// client, whatever it sends; loopback clients (IPv4, IPv6, IPv4-mapped) get the page; the
// protocol endpoints answer anyone. With AllowRemote the pages answer the other host too.
func TestLoopbackOnly(t *testing.T) {
	newIdP := func(allow bool) *IdP {
		idp, err := New(Options{Issuer: "http://127.0.0.1:1/oidc", Resource: testResource, Users: testUsers, AllowRemote: allow})
		if err != nil {
			t.Fatal(err)
		}
		return idp
	}
	form := url.Values{"user": {"ops"}, "user_code": {"ABCD-EFGH"}, "authRequestID": {"x"}, "csrf": {"y"}}.Encode()
	reg := `{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none"}`
	human := []struct{ method, path, ctype, body string }{
		{"GET", "/oidc/login?authRequestID=x", "", ""},
		{"POST", "/oidc/login", "application/x-www-form-urlencoded", form},
		{"GET", "/oidc/device?user_code=ABCD-EFGH", "", ""},
		{"POST", "/oidc/device", "application/x-www-form-urlencoded", form},
		{"POST", "/oidc/register", "application/json", reg},
	}
	serve := func(idp *IdP, method, path, ctype, body, remote string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		idp.Handler().ServeHTTP(rec, req)
		return rec
	}
	def := newIdP(false)
	for _, remote := range []string{"192.0.2.7:50000", "[2001:db8::7]:50000", "[::ffff:192.0.2.7]:50000", "garbage", ""} {
		for _, h := range human {
			rec := serve(def, h.method, h.path, h.ctype, h.body, remote)
			body := rec.Body.String()
			if rec.Code != http.StatusForbidden || body != RemoteOnlyMessage+"\n" {
				t.Errorf("%s %s from %q: %d %q, want 403 and the one line", h.method, h.path, remote, rec.Code, body)
			}
		}
	}
	// The protocol endpoints still answer another host: they give nothing without a sign-in.
	for _, p := range []string{"/oidc/.well-known/openid-configuration", "/oidc/keys"} {
		if rec := serve(def, "GET", p, "", "", "192.0.2.7:50000"); rec.Code != http.StatusOK {
			t.Errorf("GET %s from another host: %d", p, rec.Code)
		}
	}
	// Loopback clients get the pages (the unknown request ID or user code gives 400, not 403);
	// registration succeeds.
	for _, remote := range []string{"127.0.0.1:50000", "127.3.4.5:1", "[::1]:50000", "[::ffff:127.0.0.1]:50000"} {
		for _, h := range human {
			rec := serve(def, h.method, h.path, h.ctype, h.body, remote)
			if rec.Code == http.StatusForbidden && strings.Contains(rec.Body.String(), "loopback") {
				t.Errorf("%s %s from %s refused: %q", h.method, h.path, remote, rec.Body)
			}
		}
		if rec := serve(def, "POST", "/oidc/register", "application/json", reg, remote); rec.Code != http.StatusCreated {
			t.Errorf("register from %s: %d %s", remote, rec.Code, rec.Body)
		}
	}
	// AllowRemote: another host is served as a loopback client is.
	open := newIdP(true)
	for _, h := range human {
		if rec := serve(open, h.method, h.path, h.ctype, h.body, "192.0.2.7:50000"); rec.Code == http.StatusForbidden && strings.Contains(rec.Body.String(), "loopback") {
			t.Errorf("AllowRemote: %s %s refused: %q", h.method, h.path, rec.Body)
		}
	}
	if rec := serve(open, "POST", "/oidc/register", "application/json", reg, "192.0.2.7:50000"); rec.Code != http.StatusCreated {
		t.Errorf("AllowRemote: register: %d %s", rec.Code, rec.Body)
	}
}
