package app

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestLoopbackBase: dev fetches its IdP's key set from its own listener, whatever --listen says.
func TestLoopbackBase(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		"0.0.0.0:8080":   "http://127.0.0.1:8080",
		"[::]:8080":      "http://[::1]:8080",
		"[::1]:9":        "http://[::1]:9",
		"10.1.2.3:80":    "http://10.1.2.3:80",
	} {
		a, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := loopbackBase(a); got != want {
			t.Errorf("loopbackBase(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestListenerClient: the dev pages' client dials the listener for the issuer's host (which
// names localhost, where a --listen on a specific address has nothing) and anything else as is.
func TestListenerClient(t *testing.T) {
	serve := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return s
	}
	idp, other := serve("idp"), serve("other")
	dead := deadLocalAddr(t) // nothing listens here: only the redirect reaches the listener
	c := listenerClient(dead, idp.Listener.Addr())
	for u, want := range map[string]string{"http://" + dead + "/oidc/keys": "idp", other.URL: "other"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != want {
			t.Errorf("GET %s reached %q, want %q", u, b, want)
		}
	}
}

// deadLocalAddr is a loopback host:port nothing listens on (bound, then closed).
func deadLocalAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// nonLoopbackIP is an address of this machine that is not loopback (nor link-local), where a
// listener can bind, or "" when the machine has none.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if ln, err := net.Listen("tcp", net.JoinHostPort(n.IP.String(), "0")); err == nil {
			ln.Close()
			return n.IP.String()
		}
	}
	return ""
}

// TestDevNonLoopbackListen: `dev --listen` on a specific non-loopback address starts (the
// pages discover the identity provider through the listener, not through localhost, which
// does not answer there), says in its banner that the identity provider answers loopback
// clients only, and holds to it: a client on that address gets 403 from the picker, the
// device page and /register, while the protocol endpoints answer. With --listen 0.0.0.0 the
// same stack serves the picker to a loopback client and refuses it to the LAN address.
func TestDevNonLoopbackListen(t *testing.T) {
	testenv.Heavy(t, "starts the dev stack (embedded Temporal) twice")
	ip := nonLoopbackIP(t)
	if ip == "" {
		// TestListenerClient and devidp's TestLoopbackOnly cover the parts without one; a skip
		// still fails CI, which must run the whole stack on such an address.
		testenv.Missing(t, "this machine has no non-loopback IPv4 address to listen on")
	}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := noRedirect.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	refused := func(base string) {
		t.Helper()
		for _, p := range []string{"/oidc/login?authRequestID=x", "/oidc/device"} {
			if code, body := get(base + p); code != http.StatusForbidden || body != devidp.RemoteOnlyMessage+"\n" {
				t.Errorf("GET %s%s from %s: %d %q", base, p, ip, code, body)
			}
		}
		resp, err := http.Post(base+"/oidc/register", "application/json", strings.NewReader(`{"redirect_uris":["http://127.0.0.1/cb"]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("register from %s: %s", ip, resp.Status)
		}
		if code, _ := get(base + "/oidc/keys"); code != http.StatusOK {
			t.Errorf("keys from %s: %d", ip, code)
		}
	}
	const note = "the identity provider answers loopback clients only (--listen "

	m, banner := startDev(t, "", net.JoinHostPort(ip, "0"))
	t.Cleanup(func() { _ = m.Close() })
	if !strings.Contains(banner, note+m.Addr()+" is not loopback)") {
		t.Fatalf("banner lacks the loopback-only line:\n%s", banner)
	}
	refused("http://" + m.Addr())
	// The pages are on (their discovery ran at start): /login sends the browser to the issuer.
	if resp, err := noRedirect.Get("http://" + m.Addr() + "/login"); err != nil {
		t.Fatal(err)
	} else if l := redirectTo(t, resp); !strings.HasPrefix(l, m.IdPIssuer()+"/authorize?") {
		t.Fatalf("/login sent the browser to %s", l)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	all, banner := startDev(t, "", "0.0.0.0:0")
	t.Cleanup(func() { _ = all.Close() })
	port := strconv.Itoa(all.serve.ln.Addr().(*net.TCPAddr).Port)
	if !strings.Contains(banner, note+all.Addr()+" is not loopback)") {
		t.Fatalf("banner lacks the loopback-only line:\n%s", banner)
	}
	refused("http://" + net.JoinHostPort(ip, port))
	// A loopback client gets the picker (400: the request ID is unknown, but not refused).
	if code, body := get("http://127.0.0.1:" + port + "/oidc/login?authRequestID=x"); code != http.StatusBadRequest {
		t.Errorf("picker from loopback: %d %q", code, body)
	}
}
