package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/jobgate/jobgate/authz"
)

// resourceMetadata is the part of RFC 9728 metadata login reads.
type resourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

// serverMetadata is the part of RFC 8414 / OpenID discovery metadata login reads.
type serverMetadata struct {
	Issuer                      string   `json:"issuer"`
	AuthorizationEndpoint       string   `json:"authorization_endpoint"`
	TokenEndpoint               string   `json:"token_endpoint"`
	DeviceAuthorizationEndpoint string   `json:"device_authorization_endpoint"`
	RevocationEndpoint          string   `json:"revocation_endpoint"`
	CodeChallengeMethods        []string `json:"code_challenge_methods_supported"`
	// IssInResponse: the IdP puts iss in every authorization response (RFC 9207 §3).
	IssInResponse bool `json:"authorization_response_iss_parameter_supported"`
}

// fetchResourceMetadata reads the RFC 9728 metadata of the MCP endpoint u: first at the
// path-inserted well-known URL (/.well-known/oauth-protected-resource/mcp), then at the root.
func fetchResourceMetadata(ctx context.Context, hc *http.Client, u string) (*resourceMetadata, error) {
	pu, _ := url.Parse(u)
	origin := pu.Scheme + "://" + pu.Host
	var urls []string
	if p := strings.TrimSuffix(pu.EscapedPath(), "/"); p != "" {
		urls = append(urls, origin+"/.well-known/oauth-protected-resource"+p)
	}
	urls = append(urls, origin+"/.well-known/oauth-protected-resource")
	var m resourceMetadata
	found, err := getFirstJSON(ctx, hc, urls, &m)
	switch {
	case err != nil:
		return nil, fmt.Errorf("login: cannot read the server's metadata: %w", err)
	case !found:
		return nil, fmt.Errorf("login: the server at %s publishes no RFC 9728 metadata (%s); pass --issuer and --resource", u, urls[len(urls)-1])
	case m.Resource == "":
		return nil, fmt.Errorf("login: the server's RFC 9728 metadata at %s has no resource", origin)
	}
	return &m, nil
}

// discoverIssuer reads the issuer's metadata, trying (as MCP clients do) RFC 8414 then OpenID
// discovery, path-inserted first, and checks the document names the issuer asked for.
func discoverIssuer(ctx context.Context, hc *http.Client, issuer string) (*serverMetadata, error) {
	iu, err := url.Parse(issuer)
	if err != nil || iu.Host == "" || (iu.Scheme != "https" && iu.Scheme != "http") || iu.RawQuery != "" || iu.Fragment != "" {
		return nil, fmt.Errorf("login: issuer %q is not an http(s) URL without query", issuer)
	}
	if err := secureURL("issuer", issuer); err != nil {
		return nil, fmt.Errorf("login: %w", err)
	}
	origin := iu.Scheme + "://" + iu.Host
	p := strings.TrimSuffix(iu.EscapedPath(), "/")
	urls := []string{origin + "/.well-known/oauth-authorization-server" + p, origin + "/.well-known/openid-configuration" + p}
	if p != "" {
		urls = append(urls, origin+p+"/.well-known/openid-configuration")
	}
	var m serverMetadata
	found, err := getFirstJSON(ctx, hc, urls, &m)
	switch {
	case err != nil:
		return nil, fmt.Errorf("login: cannot reach the identity provider %s: %w", issuer, err)
	case !found:
		return nil, fmt.Errorf("login: %s publishes no OAuth or OpenID metadata (tried %s); is it an issuer URL?", issuer, strings.Join(urls, ", "))
	case strings.TrimSuffix(m.Issuer, "/") != strings.TrimSuffix(issuer, "/"):
		// RFC 8414 §3.3 / OIDC Discovery §4.3: metadata for another issuer must not be used.
		return nil, fmt.Errorf("login: the metadata of %s names issuer %q; refusing it", issuer, m.Issuer)
	case m.TokenEndpoint == "":
		return nil, fmt.Errorf("login: the metadata of %s has no token_endpoint", issuer)
	}
	// Codes, tokens and the client secret go to these endpoints, and the authorization
	// endpoint is handed to the desktop's URL opener: each must be https (or loopback http),
	// whatever the issuer's own URL was.
	for _, e := range []struct{ name, u string }{
		{"authorization_endpoint", m.AuthorizationEndpoint}, {"token_endpoint", m.TokenEndpoint},
		{"device_authorization_endpoint", m.DeviceAuthorizationEndpoint}, {"revocation_endpoint", m.RevocationEndpoint},
	} {
		if e.u == "" {
			continue
		}
		if err := secureURL(e.name, e.u); err != nil {
			return nil, fmt.Errorf("login: the metadata of %s: %w", issuer, err)
		}
	}
	return &m, nil
}

// secureURL refuses a URL that credentials would cross a network in clear to: it must be
// https, or http to a loopback host (127.0.0.0/8, ::1, localhost), where nothing leaves the
// machine (as serve's --issuer discovery and RFC 8252 §8.3 allow). The error names the URL.
func secureURL(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("%s %q is not an absolute http(s) URL", what, cleanText(raw))
	}
	if u.Scheme == "http" && !authz.LoopbackHost(u.Hostname()) {
		return fmt.Errorf("%s %s must use https (plain http only to a loopback host: 127.0.0.0/8, ::1, localhost)", what, cleanText(raw))
	}
	return nil
}

// getFirstJSON decodes the first of urls that answers 200 into out. A 404 (or 405/400 from
// servers that route unknown paths oddly) moves to the next; found is false when none did.
func getFirstJSON(ctx context.Context, hc *http.Client, urls []string, out any) (found bool, err error) {
	for _, u := range urls {
		resp, err := getAccepting(ctx, hc, u, "application/json")
		if err != nil {
			return false, flatErr(err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return false, fmt.Errorf("GET %s: %w", u, err)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			if err := json.Unmarshal(body, out); err != nil {
				return false, fmt.Errorf("GET %s: not a JSON metadata document (%v)", u, err)
			}
			return true, nil
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusBadRequest:
			continue
		default:
			return false, fmt.Errorf("GET %s: %s", u, resp.Status)
		}
	}
	return false, nil
}

// getAccepting GETs u with hc, asking for the media types accept names; the caller checks the
// status, reads the body within its own bound and closes it. The discovery documents and verify's
// public keys are fetched alike.
func getAccepting(ctx context.Context, hc *http.Client, u, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	return hc.Do(req)
}
