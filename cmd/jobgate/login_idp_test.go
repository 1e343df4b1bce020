package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIdPTransportAddsResource: every token and device request carries resource, a
// confidential client's device request its Basic credentials; other requests pass untouched.
func TestIdPTransportAddsResource(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		id, sec, _ := r.BasicAuth()
		got = append(got, fmt.Sprintf("%s %s resource=%s basic=%s:%s", r.Method, r.URL.Path, r.PostForm.Get("resource"), id, sec))
	}))
	defer srv.Close()
	hc := &http.Client{Transport: &idpTransport{base: http.DefaultTransport, tokenURL: srv.URL + "/token", deviceURL: srv.URL + "/device",
		clientID: "c i", secret: "s&t", resource: "http://r/mcp"}}
	for _, path := range []string{"/token", "/device", "/other"} {
		resp, err := hc.PostForm(srv.URL+path, url.Values{"grant_type": {"x"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := []string{"POST /token resource=http://r/mcp basic=:", "POST /device resource=http://r/mcp basic=c+i:s%26t", "POST /other resource= basic=:"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRevokeAuthenticatesAsClient: logout's RFC 7009 request names a public client by
// client_id in the form and sends a confidential client's credentials in Basic only, each
// form-urlencoded (RFC 6749 §2.3.1).
func TestRevokeAuthenticatesAsClient(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		id, sec, _ := r.BasicAuth()
		got = append(got, fmt.Sprintf("%s token=%s hint=%s client_id=%s client_secret=%s basic=%s:%s", r.Header.Get("Content-Type"),
			r.PostForm.Get("token"), r.PostForm.Get("token_type_hint"), r.PostForm.Get("client_id"), r.PostForm.Get("client_secret"), id, sec))
	}))
	defer srv.Close()
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("s&t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := storedLogin{ClientID: "c i", RevocationEndpoint: srv.URL + "/revoke", RefreshToken: "rt"}
	if err := revoke(l); err != nil {
		t.Fatal(err)
	}
	l.ClientSecretFile = secretFile
	if err := revoke(l); err != nil {
		t.Fatal(err)
	}
	const form = "application/x-www-form-urlencoded token=rt hint=refresh_token "
	want := []string{form + "client_id=c i client_secret= basic=:", form + "client_id= client_secret= basic=c+i:s%26t"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
