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
	for _, h := range []string{"", "localhost.example", "example.com", "10.0.0.1", "::", "0.0.0.0", "[::1]", "127.0.0.1:80"} {
		if LoopbackHost(h) {
			t.Errorf("LoopbackHost(%q) = true, want false", h)
		}
	}
}
