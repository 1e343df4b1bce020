package app

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/frontend/pages"
)

// DevIdPPath is where `jobgate dev` serves its identity provider, on the MCP endpoint's own
// listener: the issuer is http://localhost:<port>/oidc.
const DevIdPPath = "/oidc"

// devIdPDir is the identity provider's state (signing key, registered clients, refresh-token
// hashes, the pages client's secret) under the dev data dir.
const devIdPDir = "dev-idp"

// devIdPUsers are the dev principals as the identity provider's picker offers them.
func devIdPUsers() []devidp.User {
	ps := DevPrincipals()
	us := make([]devidp.User, len(ps))
	for i, p := range ps {
		us[i] = devidp.User{Subject: p.Subject, Tenant: p.Tenant, Scopes: p.Scopes}
	}
	return us
}

// DevIdPConfig is what `jobgate dev` lets a developer change about its identity provider's
// Client ID Metadata Document fetches (devidp.Options.CIMD*).
type DevIdPConfig struct {
	// CIMDAllowLoopback lets client_id URLs resolve to loopback addresses (a client under
	// development on this machine). Default off: public addresses only.
	CIMDAllowLoopback bool
	// CIMDCAFile is a PEM file of CA certificates trusted, besides the system's, when fetching
	// metadata documents (e.g. a dev CA). Default none.
	CIMDCAFile string
}

func (c *DevIdPConfig) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.CIMDAllowLoopback, "cimd-allow-loopback", false,
		"let the dev identity provider fetch Client ID Metadata Documents from loopback addresses (a client developed on this machine)")
	fs.StringVar(&c.CIMDCAFile, "cimd-ca-file", "",
		"PEM CA certificates the dev identity provider trusts, besides the system's, when fetching Client ID Metadata Documents")
}

// options are the devidp.Options these settings make.
func (c DevIdPConfig) options(o *devidp.Options) error {
	o.CIMDAllowLoopback = c.CIMDAllowLoopback
	if c.CIMDCAFile == "" {
		return nil
	}
	pem, err := os.ReadFile(c.CIMDCAFile)
	if err != nil {
		return fmt.Errorf("--cimd-ca-file: %w", err)
	}
	if o.CIMDRootCAs, err = devidp.CIMDRootCAs(pem); err != nil {
		return fmt.Errorf("--cimd-ca-file %s: %w", c.CIMDCAFile, err)
	}
	return nil
}

// newDevIdP builds the dev identity provider for the frontend bound at port, keeping its state
// in dataDir/dev-idp ("" = in memory, --ephemeral), and the handlers that mount it: the issuer's
// path, and the RFC 8414 metadata location that MCP clients try first
// (/.well-known/oauth-authorization-server/oidc, outside the issuer's path).
func (m *DevMain) newDevIdP(port int, dataDir string) (*devidp.IdP, map[string]http.Handler, error) {
	base := "http://localhost:" + strconv.Itoa(port)
	dir := ""
	if dataDir != "" {
		dir = filepath.Join(dataDir, devIdPDir)
	}
	opts := devidp.Options{
		Issuer: base + DevIdPPath, Resource: m.resource, Users: devIdPUsers(), Dir: dir,
		// jobgate's own pages sign in as the confidential client jobgate-pages.
		PagesRedirectURIs: []string{base + pages.PathCallback},
		// and sign out there too (RP-initiated logout), landing on the signed-out page.
		PagesPostLogoutRedirectURIs: []string{base + pages.PathSignedOut},
	}
	if err := m.Config.IdP.options(&opts); err != nil {
		return nil, nil, err
	}
	idp, err := devidp.New(opts)
	if err != nil {
		return nil, nil, err
	}
	h := idp.Handler() // routes by full path, so it is mounted unchanged
	return idp, map[string]http.Handler{
		DevIdPPath + "/": h,
		"/.well-known/oauth-authorization-server" + DevIdPPath: h,
	}, nil
}

// devVerifier accepts the dev stack's two kinds of tokens: HS256 ones (`jobgate token`, the
// banner's) under DevIssuer, and the identity provider's RS256 ones, verified through its JWK
// Set exactly as `serve --jwks-url` verifies a production IdP's. It is built once the
// listener serves, since NewJWKSVerifier fetches the key set at once; the key set
// (issuer/keys, http://localhost:<port>/oidc/keys) is fetched through listenerClient, which
// dials the listener itself, so a --listen of any interface works, a specific non-loopback
// address included (the issuer and tokens still say localhost). The JWKS refresh ends with ctx.
func (m *DevMain) devVerifier(ctx context.Context, ln net.Addr, issuer string) (authz.Verifier, error) {
	hs, err := authz.NewHS256Verifier(DevIssuer, m.resource, m.secret, "")
	if err != nil {
		return nil, err
	}
	iu, err := url.Parse(issuer)
	if err != nil {
		return nil, err
	}
	jwks, err := authz.NewJWKSVerifier(ctx, authz.JWKSOptions{URL: issuer + "/keys", Issuer: issuer, Audience: m.resource,
		HTTPClient: listenerClient(iu.Host, ln),
		RefreshError: func(u string, err error) {
			m.Logger.Warn("dev identity provider: JWK Set refresh failed; keeping the keys held", zap.String("url", u), zap.Error(err))
		}})
	if err != nil {
		return nil, err
	}
	mv, err := authz.NewMultiVerifier(hs, jwks)
	if err != nil {
		jwks.Close()
		return nil, err
	}
	return mv, nil
}

// loopbackBase is an http base URL that reaches the listener at a from this process: an
// unspecified address (0.0.0.0, ::) is reached at the loopback address of its family.
func loopbackBase(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return "http://" + a.String()
	}
	ip := ta.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
		if ta.IP != nil && ta.IP.To4() == nil {
			ip = net.IPv6loopback
		}
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(ta.Port))
}

// loopbackListener reports whether the listener at a serves loopback clients only (what the
// dev identity provider's pages answer, devidp.Options.AllowRemote): false for an unspecified
// address (0.0.0.0, ::) or any other host's.
func loopbackListener(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// devHostGuard is `jobgate dev`'s defence against DNS rebinding, around every route of its
// listener (the MCP endpoint, the events streams, the pages and the dev identity provider). A
// page at http://evil.example:8080 whose name is then re-pointed at 127.0.0.1 talks to the dev
// stack from this machine's loopback, so the provider's loopback-only picker and device page
// served it, and it could sign in as any dev user and read the tokens. The browser still sends
// the page's name as Host, so only the names of this machine's loopback pass: localhost,
// 127.0.0.1 or [::1], on any port (the name is what a rebound page cannot change; a proxy in
// front, such as the conformance suite's, forwards its own port). A connection that arrived on another address (a
// --listen on a LAN address) may also name that address's IP literal: an IP literal cannot be
// rebound. The go-sdk does the same for /mcp (StreamableHTTPOptions.DisableLocalhostProtection);
// this covers the routes beside it. An Origin, when sent, must name one of those hosts (any
// port: a local tool such as the MCP Inspector is not foreign), unless the browser says the
// request is its own page's (Sec-Fetch-Site same-origin or none); "null" and other sites are
// refused. Production serve has no such guard: its Host is its public name.
func devHostGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local := localIP(r)
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host // no port: the scheme's
		}
		if !devHost(host, local) {
			refuseHost(w, fmt.Sprintf("Host: %q is not localhost, 127.0.0.1 or [::1]", r.Host))
			return
		}
		// A browser's own page may send Origin "null": a same-origin form POST under
		// Referrer-Policy: no-referrer (jobgate's pages set it) or after a redirect through
		// another origin (sign-out through the IdP). Sec-Fetch-Site, which no page can set,
		// says so; the Host check above already refused a rebound name.
		site := r.Header.Get("Sec-Fetch-Site")
		if o := r.Header.Get("Origin"); o != "" && site != "same-origin" && site != "none" {
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
