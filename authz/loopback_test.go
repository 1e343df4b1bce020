package authz

import "testing"

// TestLoopbackHost pins the one rule for "plain http is fine here" that --jwks-url, serve's
// issuer discovery, the pages and the CLI's login share: localhost in any case and loopback IP
// literals (IPv4-mapped too), never a name that merely resolves to one or a non-loopback address.
func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.8.9.10": true, "::1": true,
		"::ffff:127.0.0.1": true,
		"":                 false, "localhost.example": false, "example.com": false, "10.0.0.1": false, "::": false,
		"0.0.0.0": false, "[::1]": false, "127.0.0.1:80": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
