package devidp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRegister feeds arbitrary bodies to the RFC 7591 endpoint: it never
// panics, answers 201 or 400, and a 201 only ever registers a public client
// whose redirect URIs are https or loopback http.
func FuzzRegister(f *testing.F) {
	for _, s := range []string{
		`{"redirect_uris":["http://127.0.0.1:1/cb"]}`,
		`{"redirect_uris":["https://app.example/cb"],"grant_types":["authorization_code"],"client_name":"x"}`,
		`{"redirect_uris":["http://evil.example/cb"]}`,
		`{"redirect_uris":["http://localhost.evil.example/cb"]}`,
		`{"redirect_uris":["http://[::1]/cb"],"token_endpoint_auth_method":"none"}`,
		`{"redirect_uris":["javascript:alert(1)"]}`,
		`{"redirect_uris":null}`,
		`null`, `[`, ``,
	} {
		f.Add(s)
	}
	idp, err := New(Options{Issuer: "http://127.0.0.1:1/oidc", Resource: testResource, Users: testUsers})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/oidc/register", strings.NewReader(body))
		// /register answers loopback clients only (Options.AllowRemote), and JSON only.
		req.RemoteAddr = "127.0.0.1:40000"
		req.Header.Set("Content-Type", "application/json")
		idp.Handler().ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusBadRequest:
			return
		case http.StatusCreated:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var r registration
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.TokenEndpointAuthMethod != "none" || len(r.RedirectURIs) == 0 {
			t.Fatalf("registered %+v", r)
		}
		for _, u := range r.RedirectURIs {
			if checkRedirectURI(u) != nil {
				t.Fatalf("registered redirect %q", u)
			}
		}
		c, ok := idp.store.client(r.ClientID)
		if !ok || c.AuthMethod() != "none" {
			t.Fatalf("client %q not stored as public", r.ClientID)
		}
	})
}
