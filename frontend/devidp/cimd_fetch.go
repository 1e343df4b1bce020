package devidp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/jobgate/jobgate/authz"
)

// Fetching and caching Client ID Metadata Documents (draft §4, §6.6, §6.7). The fetch follows
// no redirect, accepts 200 only, reads at most CIMDMaxBytes, ends after the fetch timeout, uses
// no proxy from the environment, and dials public addresses only: the webhooks' rule
// (authz.PrivateIP, the one activities.NotifyClient applies), checked on the address actually
// dialed, after DNS resolution, so a name re-pointed at 127.0.0.1 or 169.254.169.254 is refused
// too. Options.CIMDAllowLoopback lets loopback addresses through (and nothing else private),
// for a client developed on this machine and for the tests' devpki TLS server.

const (
	// CIMDFetchTimeoutDefault is Options.CIMDFetchTimeout's default.
	CIMDFetchTimeoutDefault = 5 * time.Second
	// cimdDefaultTTL is how long a document without caching headers is reused.
	cimdDefaultTTL = 5 * time.Minute
	// cimdMaxTTL caps what a document's caching headers may ask for.
	cimdMaxTTL = 24 * time.Hour
	// cimdMaxEntries bounds the cache: a stream of distinct client IDs cannot grow it further.
	cimdMaxEntries = 1000
)

// cimdResolver fetches, checks and caches metadata documents.
type cimdResolver struct {
	hc            *http.Client
	allowLoopback bool
	timeout       time.Duration
	now           func() time.Time
	loginURL      func(string) string

	mu    sync.Mutex
	cache map[string]cimdEntry
}

type cimdEntry struct {
	c       *client
	expires time.Time
}

func newCIMDResolver(opts Options, loginURL func(string) string) *cimdResolver {
	d := &net.Dialer{Timeout: opts.CIMDFetchTimeout, Control: cimdDialControl(opts.CIMDAllowLoopback)}
	tr := &http.Transport{
		DialContext: d.DialContext, Proxy: nil, ForceAttemptHTTP2: true, MaxIdleConns: 10,
		IdleConnTimeout: 30 * time.Second, TLSHandshakeTimeout: opts.CIMDFetchTimeout,
		TLSClientConfig: &tls.Config{RootCAs: opts.CIMDRootCAs, MinVersion: tls.VersionTLS12},
		// A document is small: the size cap applies to what is read, this to the headers.
		MaxResponseHeaderBytes: 16 << 10,
	}
	return &cimdResolver{
		hc: &http.Client{Transport: tr, Timeout: opts.CIMDFetchTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		allowLoopback: opts.CIMDAllowLoopback, timeout: opts.CIMDFetchTimeout, now: opts.Now, loginURL: loginURL,
		cache: map[string]cimdEntry{},
	}
}

// cimdDialControl is the dialer's Control hook: the address being connected to (an IP, after
// resolution) must be public, or loopback when allowLoopback.
func cimdDialControl(allowLoopback bool) func(string, string, syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("refused to connect to %s: not an IP address", address)
		}
		return refusedAddr(ap.Addr(), address, allowLoopback)
	}
}

// refusedAddr says why ip may not be fetched from (nil when it may).
func refusedAddr(ip netip.Addr, shown string, allowLoopback bool) error {
	why := authz.PrivateIP(ip)
	if why == "" || (allowLoopback && ip.Unmap().IsLoopback()) {
		return nil
	}
	return fmt.Errorf("refused to connect to %s: %s (only public addresses%s)", shown, why, loopbackHint(allowLoopback))
}

func loopbackHint(allowLoopback bool) string {
	if allowLoopback {
		return " and loopback"
	}
	return "; devidp.Options.CIMDAllowLoopback, `jobgate dev --cimd-allow-loopback`, allows loopback for development"
}

// resolve is the client a URL client_id names: from the cache while its document is fresh,
// else fetched and checked. Failures are never cached (draft §4.3).
func (r *cimdResolver) resolve(ctx context.Context, id string) (*client, error) {
	u, err := parseClientIDURL(id)
	if err != nil {
		return nil, err
	}
	now := r.now()
	r.mu.Lock()
	e, ok := r.cache[id]
	r.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.c, nil
	}
	// The host as written, before any lookup: an IP literal or localhost is refused at once
	// with a clearer reason than the dialer's.
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := refusedAddr(ip, host, r.allowLoopback); err != nil {
			return nil, cimdErrorf("client_id: %v", err)
		}
	} else if why := authz.PrivateHost(host); why != "" && !(r.allowLoopback && authz.LoopbackHost(host)) {
		return nil, cimdErrorf("client_id: refused to connect to %s: %s (only public addresses%s)", host, why, loopbackHint(r.allowLoopback))
	}
	doc, ttl, err := r.fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	c := r.clientFrom(doc, u)
	if ttl > 0 {
		r.mu.Lock()
		r.sweepLocked(now)
		if len(r.cache) < cimdMaxEntries {
			r.cache[id] = cimdEntry{c: c, expires: now.Add(ttl)}
		}
		r.mu.Unlock()
	} else {
		r.mu.Lock()
		delete(r.cache, id)
		r.mu.Unlock()
	}
	return c, nil
}

func (r *cimdResolver) sweepLocked(now time.Time) {
	for k, e := range r.cache {
		if !now.Before(e.expires) {
			delete(r.cache, k)
		}
	}
}

// fetch GETs the document and checks it; ttl is how long it may be reused (0: not at all).
func (r *cimdResolver) fetch(ctx context.Context, id string) (doc *cimdDocument, ttl time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, 0, cimdErrorf("client_id: %q is not a URL the provider can fetch", id)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "jobgate-devidp (Client ID Metadata Document fetch)")
	resp, err := r.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, 0, cimdErrorf("client_id: fetching the metadata document: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, cimdErrorf("client_id: the metadata document's URL answered %q; only 200 OK is accepted (redirects are not followed)", resp.Status)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil ||
		!(mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return nil, 0, cimdErrorf("client_id: the metadata document's Content-Type %q is not application/json", resp.Header.Get("Content-Type"))
	}
	if resp.ContentLength > CIMDMaxBytes {
		return nil, 0, cimdErrorf("client_id: the metadata document is larger than %d bytes (Content-Length %d)", CIMDMaxBytes, resp.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, CIMDMaxBytes+1))
	if err != nil {
		return nil, 0, cimdErrorf("client_id: reading the metadata document: %v", err)
	}
	if len(body) > CIMDMaxBytes {
		return nil, 0, cimdErrorf("client_id: the metadata document is larger than %d bytes", CIMDMaxBytes)
	}
	doc, err = parseCIMD(body, id)
	if err != nil {
		return nil, 0, err
	}
	return doc, cacheTTL(resp.Header, r.now()), nil
}

// cacheTTL is how long a response may be reused by RFC 9111's rules, as a private cache:
// no-store and no-cache not at all, else max-age (less Age), else Expires (against Date),
// else cimdDefaultTTL (heuristic freshness); never over cimdMaxTTL.
func cacheTTL(h http.Header, now time.Time) time.Duration {
	var ttl time.Duration
	maxAge := -1
	for _, d := range strings.Split(strings.Join(h.Values("Cache-Control"), ","), ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
		switch strings.ToLower(name) {
		case "no-store", "no-cache":
			return 0
		case "max-age":
			n, err := strconv.Atoi(strings.Trim(val, `"`))
			if err != nil || n < 0 {
				return 0 // an invalid max-age is stale (RFC 9111 §4.2.1)
			}
			maxAge = n
		}
	}
	switch {
	case maxAge >= 0:
		ttl = time.Duration(maxAge) * time.Second
		if age, err := strconv.Atoi(h.Get("Age")); err == nil && age > 0 {
			ttl -= time.Duration(age) * time.Second
		}
	case h.Get("Expires") != "":
		exp, err := http.ParseTime(h.Get("Expires"))
		if err != nil {
			return 0
		}
		base := now
		if d, err := http.ParseTime(h.Get("Date")); err == nil {
			base = d
		}
		ttl = exp.Sub(base)
	default:
		ttl = cimdDefaultTTL
	}
	return max(0, min(ttl, cimdMaxTTL))
}

// clientFrom is the op.Client a checked document describes: a public native client (pkg/op
// then takes a loopback redirect URI on any port, RFC 8252 §7.3, and https ones exactly).
func (r *cimdResolver) clientFrom(d *cimdDocument, u *url.URL) *client {
	gts := make([]oidc.GrantType, len(d.GrantTypes))
	for i, g := range d.GrantTypes {
		gts[i] = oidc.GrantType(g)
	}
	return &client{
		id: d.ClientID, name: cimdName(d, u), redirectURIs: d.RedirectURIs,
		appType: op.ApplicationTypeNative, authMethod: oidc.AuthMethodNone,
		grantTypes: gts, loginURL: r.loginURL, doc: d,
	}
}

// cimdName is how the pages name a metadata-document client: the name is the document's own
// claim, the host serving it is what a person can trust (draft §6.3).
func cimdName(d *cimdDocument, u *url.URL) string {
	s := fmt.Sprintf("%q (the name its metadata document at %s gives it", d.ClientName, u.Host)
	if d.ClientURI != "" {
		if cu, err := url.Parse(d.ClientURI); err == nil && cu.Host != u.Host {
			s += "; it says it is from " + cu.Host
		}
	}
	return s + ")"
}

// CIMDRootCAs is the system's trusted roots plus the PEM certificates in extraPEM, for
// Options.CIMDRootCAs (e.g. the dev CA that signed a client's local metadata server).
func CIMDRootCAs(extraPEM []byte) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(extraPEM) {
		return nil, errors.New("devidp: CIMDRootCAs: no PEM certificate found")
	}
	return pool, nil
}
