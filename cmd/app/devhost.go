package app

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// devHostGuard is `jobgate dev`'s defence against DNS rebinding, around every route of its
// listener (the MCP endpoint, the events streams, the pages and the dev identity provider). A
// page at http://evil.example:8080 whose name is then re-pointed at 127.0.0.1 talks to the dev
// stack from this machine's loopback, so the provider's loopback-only picker and device page
// served it, and it could sign in as any dev user and read the tokens. The browser still sends
// the page's name as Host, so only the names of this machine's loopback pass: localhost,
// 127.0.0.1 or [::1], on the bound port. A connection that arrived on another address (a
// --listen on a LAN address) may also name that address's IP literal: an IP literal cannot be
// rebound. The go-sdk does the same for /mcp (StreamableHTTPOptions.DisableLocalhostProtection);
// this covers the routes beside it. An Origin, when sent, must name one of those hosts (any
// port: a local tool such as the MCP Inspector is not foreign); "null" and other sites are
// refused. Production serve has no such guard: its Host is its public name.
func devHostGuard(port int, next http.Handler) http.Handler {
	want := strconv.Itoa(port)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local := localIP(r)
		host, p, err := net.SplitHostPort(r.Host)
		if err != nil {
			host, p = r.Host, "80" // no port: the scheme's
		}
		if p != want || !devHost(host, local) {
			refuseHost(w, fmt.Sprintf("Host: %q is not localhost, 127.0.0.1 or [::1] on port %s", r.Host, want))
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !devHost(u.Hostname(), local) {
				refuseHost(w, fmt.Sprintf("Origin: %q is not a page of localhost, 127.0.0.1 or [::1]", o))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// devHost: one of the loopback names, or the IP literal of the address the connection arrived
// on (local; invalid when unknown).
func devHost(host string, local netip.Addr) bool {
	switch strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return err == nil && local.IsValid() && !local.IsLoopback() && ip.Unmap() == local
}

// localIP is the address the connection arrived on (http.Server puts it in the context).
func localIP(r *http.Request) netip.Addr {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func refuseHost(w http.ResponseWriter, why string) {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "403: jobgate dev answers its own loopback names only (DNS rebinding guard): "+why, http.StatusForbidden)
}
