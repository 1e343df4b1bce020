package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
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
