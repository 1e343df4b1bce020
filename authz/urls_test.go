package authz

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLoopbackHost pins the one rule for "plain http is fine here" that --jwks-url, serve's
// issuer discovery, the pages and the CLI's login share: localhost in any case and loopback IP
// literals (IPv4-mapped too), never a name that merely resolves to one or a non-loopback address.
func TestLoopbackHost(t *testing.T) {
	for _, h := range []string{"localhost", "LocalHost", "127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"} {
		if !LoopbackHost(h) {
			t.Errorf("LoopbackHost(%q) = false, want true", h)
		}
	}
	for _, h := range []string{"", "localhost.example", "example.com", "10.0.0.1", "::", "0.0.0.0", "[::1]", "127.0.0.1:80", "::1%lo", "127.evil.example"} {
		if LoopbackHost(h) {
			t.Errorf("LoopbackHost(%q) = true, want false", h)
		}
	}
}

// TestResourceMetadataURL: the well-known path goes before the resource's path (RFC 9728 §3.1),
// without a trailing slash; a resource URI without a host has none.
func TestResourceMetadataURL(t *testing.T) {
	for resource, want := range map[string]string{
		"https://jobs.example.com/mcp":  "https://jobs.example.com/.well-known/oauth-protected-resource/mcp",
		"https://jobs.example.com/mcp/": "https://jobs.example.com/.well-known/oauth-protected-resource/mcp",
		"http://127.0.0.1:8080":         "http://127.0.0.1:8080/.well-known/oauth-protected-resource",
		"/mcp":                          "",
		"":                              "",
	} {
		if got := ResourceMetadataURL(resource); got != want {
			t.Errorf("ResourceMetadataURL(%q) = %q, want %q", resource, got, want)
		}
	}
}

// TestLoopbackPeer: a request's TCP peer is loopback only as an address and port.
func TestLoopbackPeer(t *testing.T) {
	for _, a := range []string{"127.0.0.1:80", "127.9.9.9:1", "[::1]:443", "[::ffff:127.0.0.1]:8080"} {
		if !LoopbackPeer(a) {
			t.Errorf("LoopbackPeer(%q) = false, want true", a)
		}
	}
	for _, a := range []string{"", "127.0.0.1", "localhost:80", "10.0.0.1:80", "[::]:80", "0.0.0.0:80", "@"} {
		if LoopbackPeer(a) {
			t.Errorf("LoopbackPeer(%q) = true, want false", a)
		}
	}
}

// TestFetchMetadata: a metadata document is the body of a 200 answer asked for as JSON, within
// MaxMetadataBytes; any other status, a larger body or a dead address is a one-line error that
// leaves the URL to the caller.
func TestFetchMetadata(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			if r.Header.Get("Accept") != "application/json" {
				http.Error(w, "accept", http.StatusNotAcceptable)
				return
			}
			_, _ = w.Write([]byte(`{"issuer":"x"}`))
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat(" ", MaxMetadataBytes+1)))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	if b, err := FetchMetadata(ctx, srv.Client(), srv.URL+"/ok"); err != nil || string(b) != `{"issuer":"x"}` {
		t.Fatalf("ok: %q, %v", b, err)
	}
	if _, err := FetchMetadata(ctx, srv.Client(), srv.URL+"/missing"); err == nil || err.Error() != "HTTP 404" {
		t.Errorf("missing: %v", err)
	}
	if _, err := FetchMetadata(ctx, srv.Client(), srv.URL+"/big"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big: %v", err)
	}
	dead := srv.URL
	srv.Close()
	if _, err := FetchMetadata(ctx, http.DefaultClient, dead+"/ok"); err == nil || strings.Contains(err.Error(), dead) || strings.Contains(err.Error(), "\n") {
		t.Errorf("dead: %v", err)
	}
}
