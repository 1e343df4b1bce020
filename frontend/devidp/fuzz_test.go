package devidp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
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

// FuzzCIMDDocument feeds arbitrary client_id URLs and metadata documents to the parsers: they
// never panic, and whatever they accept keeps the rules — an https URL with a path and no
// fragment, dot segment or userinfo; a document naming exactly that URL, a public client, 1 to
// 10 redirect URIs that are https or loopback http, a name, code/refresh/device grants only.
func FuzzCIMDDocument(f *testing.F) {
	const id = "https://app.example/client.json"
	for _, s := range [][2]string{
		{id, `{"client_id":"` + id + `","client_name":"A","redirect_uris":["http://127.0.0.1:3000/cb"]}`},
		{id, `{"client_id":"` + id + `","client_name":"A","redirect_uris":["https://app.example/cb"],"token_endpoint_auth_method":"private_key_jwt"}`},
		{id, `{"client_id":"https://app.example/other.json","client_name":"A","redirect_uris":["http://127.0.0.1/cb"]}`},
		{id, `{"client_id":"` + id + `","client_name":"A","redirect_uris":["http://evil.example/cb"]}`},
		{id, `{"client_id":"` + id + `","client_name":"A","redirect_uris":["http://127.0.0.1/cb"],"client_secret":null}`},
		{id, `{"client_id":"` + id + `","client_name":"A","redirect_uris":["http://127.0.0.1/cb"]} {}`},
		{id, `{"client_id":"` + id + `","client_name":7}`},
		{"https://app.example/a/../b.json", `{}`},
		{"https://u:p@app.example/c.json", `{}`},
		{"http://app.example/c.json", `{}`},
		{"https://app.example", `[]`},
		{"https://app.example/c.json#f", `null`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, clientID, body string) {
		if u, err := parseClientIDURL(clientID); err == nil {
			if u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" || u.Path == "" || u.Path == "/" ||
				strings.Contains(clientID, "#") || slices.Contains(strings.Split(u.Path, "/"), "..") {
				t.Fatalf("accepted client_id %q", clientID)
			}
		} else if !strings.HasPrefix(err.Error(), "client_id: ") {
			t.Fatalf("error %q does not name client_id", err)
		}
		d, err := parseCIMD([]byte(body), clientID)
		if err != nil {
			if !regexp.MustCompile(`^[a-z_]+: `).MatchString(err.Error()) {
				t.Fatalf("error %q does not name a field", err)
			}
			return
		}
		if d.ClientID != clientID || d.ClientName == "" || d.TokenEndpointAuthMethod != "none" || len(d.ClientSecret) > 0 ||
			len(d.RedirectURIs) == 0 || len(d.RedirectURIs) > maxRedirectURIs || len(body) > CIMDMaxBytes {
			t.Fatalf("accepted %+v from %q", d, body)
		}
		for _, u := range d.RedirectURIs {
			if checkRedirectURI(u) != nil {
				t.Fatalf("accepted redirect %q", u)
			}
		}
		for _, g := range d.GrantTypes {
			if g != "authorization_code" && g != "refresh_token" && g != grantDevice {
				t.Fatalf("accepted grant %q", g)
			}
		}
	})
}
