package authz

import "testing"

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
