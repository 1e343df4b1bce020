package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// hostRequest sends method path to the listener at addr with Host host and Origin origin ("" =
// none), as a browser on a rebound name would (the TCP peer is this machine's loopback).
// site, if given, is the Sec-Fetch-Site a browser would send.
func hostRequest(t *testing.T, method, addr, path, host, origin string, site ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	for _, s := range site {
		req.Header.Set("Sec-Fetch-Site", s)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// TestDevRefusesForeignHost: DNS rebinding. A page at http://evil.example:<port> whose name
// then resolves to 127.0.0.1 reaches the dev listener from a loopback peer, so the dev IdP's
// loopback-only pages served it: it ran the device flow as steward with no click and read the
// tokens. Every dev route now answers only Host localhost, 127.0.0.1 or [::1] (any port: a
// proxy in front forwards its own), and refuses a foreign Origin. Before the fix the device page, the discovery document,
// the events stream and the pages answered Host evil.example.
func TestDevRefusesForeignHost(t *testing.T) {
	testenv.Heavy(t, "starts the dev stack (embedded Temporal)")
	m, _ := startDev(t, "", "127.0.0.1:0")
	t.Cleanup(func() { _ = m.Close() })
	addr := m.Addr()
	port := strconv.Itoa(m.serve.ln.Addr().(*net.TCPAddr).Port)
	routes := []struct{ method, path string }{
		{"GET", "/oidc/device"},
		{"GET", "/oidc/login?authRequestID=x"},
		{"GET", "/oidc/.well-known/openid-configuration"},
		{"GET", "/.well-known/oauth-authorization-server/oidc"},
		{"POST", "/oidc/device_authorization"},
		{"POST", "/oidc/register"},
		{"GET", "/jobs/jgh1.x.y/events"},
		{"GET", "/approvals"},
		{"GET", "/login"},
		{"GET", "/me"},
		{"GET", "/.well-known/oauth-protected-resource/mcp"},
		{"GET", "/healthz"},
		{"POST", "/mcp"},
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.2:" + port, "localhost.evil.example:" + port} {
		for _, rt := range routes {
			if code, body := hostRequest(t, rt.method, addr, rt.path, host, ""); code != http.StatusForbidden || !strings.Contains(body, "Host") {
				t.Errorf("%s %s with Host %s: %d %.200q, want 403 naming Host", rt.method, rt.path, host, code, body)
			}
		}
	}
	for _, origin := range []string{"http://evil.example:" + port, "null", "http://localhost.evil.example"} {
		for _, rt := range routes {
			if code, body := hostRequest(t, rt.method, addr, rt.path, "localhost:"+port, origin); code != http.StatusForbidden || !strings.Contains(body, "Origin") {
				t.Errorf("%s %s with Origin %s: %d %.200q, want 403 naming Origin", rt.method, rt.path, origin, code, body)
			}
		}
	}
	// The loopback names on the bound port still reach every route (whatever it then answers).
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port} {
		for _, rt := range []struct{ method, path string }{{"GET", "/oidc/device"}, {"GET", "/healthz"}, {"GET", "/oidc/keys"}} {
			if code, body := hostRequest(t, rt.method, addr, rt.path, host, "http://"+host); code != http.StatusOK {
				t.Errorf("%s %s with Host %s: %d %.200q, want 200", rt.method, rt.path, host, code, body)
			}
		}
	}
	if code, body := hostRequest(t, "GET", addr, "/oidc/device", "localhost:"+port, "http://localhost:6274"); code != http.StatusOK {
		t.Errorf("GET /oidc/device from another loopback origin: %d %.200q, want 200 (a local tool is not foreign)", code, body)
	}
}

// TestDevHostGuard is the guard alone on a real listener: the loopback names on the bound port,
// the IP literal of the address a connection arrived on (a --listen on a LAN address, which no
// rebound name can be), and Origins of those hosts pass; anything else is 403 naming the header.
func TestDevHostGuard(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	srv.Config.Handler = devHostGuard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	srv.Start()
	t.Cleanup(srv.Close)
	addr, p := srv.Listener.Addr().String(), strconv.Itoa(port)
	for _, tc := range []struct {
		host, origin string
		want         int
		names        string
		site         string
	}{
		{"localhost:" + p, "", 200, "", ""},
		{"127.0.0.1:" + p, "http://127.0.0.1:" + p, 200, "", ""},
		{"[::1]:" + p, "http://[::1]:9", 200, "", ""},
		{"LOCALHOST:" + p, "", 200, "", ""},
		{"localhost:" + p, "https://localhost", 200, "", ""},
		{"evil.example:" + p, "", 403, "Host", ""},
		// Any port, or none: a proxy in front forwards its own; the name is what a rebound
		// page cannot change.
		{"127.0.0.1", "", 200, "", ""},
		{"127.1:" + p, "", 403, "Host", ""},
		{"localhost:" + p + "0", "", 200, "", ""},
		{"[::1]", "", 200, "", ""},
		{"localhost:" + p, "http://evil.example", 403, "Origin", ""},
		{"localhost:" + p, "null", 403, "Origin", ""},
		{"localhost:" + p, "file://", 403, "Origin", ""},
		{"localhost:" + p, "http://127.evil.example", 403, "Origin", ""},
		// A page's own form POST under Referrer-Policy: no-referrer, or after a redirect
		// through the IdP: Origin "null", and the browser says it is the same origin
		// (TestBrowserSignIn's sign-out). Cross-site it stays refused; a rebound Host too.
		{"localhost:" + p, "null", 200, "", "same-origin"},
		{"localhost:" + p, "null", 403, "Origin", "cross-site"},
		{"localhost:" + p, "http://evil.example", 403, "Origin", "cross-site"},
		{"evil.example:" + p, "null", 403, "Host", "same-origin"},
	} {
		code, body := hostRequest(t, "GET", addr, "/", tc.host, tc.origin, tc.site)
		if code != tc.want || (tc.names != "" && !strings.Contains(body, tc.names)) {
			t.Errorf("Host %q Origin %q Sec-Fetch-Site %q: %d %q, want %d %s", tc.host, tc.origin, tc.site, code, body, tc.want, tc.names)
		}
	}
	if ip := nonLoopbackIP(t); ip != "" {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		lan := &httptest.Server{Listener: ln, Config: &http.Server{Handler: devHostGuard(
			http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))}}
		lan.Start()
		t.Cleanup(lan.Close)
		if code, body := hostRequest(t, "GET", ln.Addr().String(), "/", ln.Addr().String(), ""); code != 200 {
			t.Errorf("Host %s on that address: %d %q, want 200", ln.Addr(), code, body)
		}
		if code, _ := hostRequest(t, "GET", ln.Addr().String(), "/", "evil.example:"+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), ""); code != 403 {
			t.Errorf("Host evil.example on a LAN listener: %d, want 403", code)
		}
	}
}

// TestServeAnswersPublicHost: the guard is dev's alone. serve behind a public URL answers the
// Host its clients use (here a public name, on a loopback listener as behind a local proxy).
func TestServeAnswersPublicHost(t *testing.T) {
	config := withKeys(t, ServeConfig{
		Temporal: TemporalConfig{Address: deadAddr(t), Namespace: "default", TaskQueue: "jobgate"},
		Listen:   "127.0.0.1:0", ResourceURI: "https://jobgate.example.com/mcp", Issuer: "https://idp.example.com",
		HandleKeys: "k1:" + strings.Repeat("ab", 32), ResumeKeys: "r1:" + strings.Repeat("cd", 32),
	})
	s := &ServeMain{Config: config, Verifier: &authz.LateVerifier{}}
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []string{"/healthz", "/.well-known/oauth-protected-resource/mcp"} {
		if code, body := hostRequest(t, "GET", s.Addr(), p, "jobgate.example.com", "https://app.example.com"); code != http.StatusOK {
			t.Errorf("serve: GET %s with Host jobgate.example.com: %d %q, want 200", p, code, body)
		}
	}
}
