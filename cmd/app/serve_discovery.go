package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/jobgate/jobgate/authz"
)

// discoveryURLs are where an issuer's metadata may be, in the order tried: OpenID Connect
// Discovery (<issuer>/.well-known/openid-configuration, what Keycloak, Okta, Entra ID, Auth0
// and Google serve), then RFC 8414 (/.well-known/oauth-authorization-server inserted before
// the issuer's path), for authorization servers that are not OpenID Providers.
func discoveryURLs(issuer string) ([]string, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("--issuer %q is not an http(s) URL without query, fragment or user info, so its JWK Set cannot be discovered; give --jwks-url", issuer)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && authz.LoopbackHost(u.Hostname()):
	default:
		// The discovered jwks_uri decides which keys are trusted: never read over plain http
		// across a network (authz holds --jwks-url to the same rule).
		return nil, fmt.Errorf("--issuer %q: discovering its JWK Set needs https (http only for a loopback host); give --jwks-url", issuer)
	}
	path := strings.TrimSuffix(u.Path, "/")
	base := u.Scheme + "://" + u.Host
	return []string{base + path + "/.well-known/openid-configuration", base + "/.well-known/oauth-authorization-server" + path}, nil
}

// discoverJWKSURL reads jwks_uri from the issuer's metadata (see discoveryURLs): the first
// document that answers 200 decides. Every failure is one line naming the issuer and what
// each location answered, and says to give --jwks-url instead.
func discoverJWKSURL(ctx context.Context, issuer string, hc *http.Client) (string, error) {
	urls, err := discoveryURLs(issuer)
	if err != nil {
		return "", err
	}
	if hc == nil {
		hc = &http.Client{Timeout: authz.JWKSHTTPTimeoutDefault}
	}
	var tried []string
	for _, u := range urls {
		body, err := authz.FetchMetadata(ctx, hc, u)
		if err != nil {
			tried = append(tried, u+": "+err.Error())
			continue
		}
		j, err := parseDiscovery(body, issuer)
		if err != nil {
			return "", fmt.Errorf("--issuer %s: metadata at %s: %w", issuer, u, err)
		}
		return j, nil
	}
	return "", fmt.Errorf("--issuer %s: cannot discover its JWK Set (%s); give --jwks-url", issuer, strings.Join(tried, "; "))
}

// parseDiscovery returns the jwks_uri of a metadata document that is issuer's own: its
// "issuer" must equal the configured one exactly (OpenID Connect Discovery §4.3, RFC 8414
// §3.3), or a document served at that address could name anyone's keys. Errors name the field.
func parseDiscovery(body []byte, issuer string) (string, error) {
	var doc struct {
		Issuer  *string `json:"issuer"`
		JWKSURI *string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", fmt.Errorf("not a JSON object: %s", oneLineErr(err))
	}
	switch {
	case doc.Issuer == nil:
		return "", errors.New(`no "issuer"`)
	case *doc.Issuer != issuer:
		return "", fmt.Errorf(`"issuer" is %q, not %q (give --issuer exactly as the provider names itself)`, clip(*doc.Issuer), issuer)
	case doc.JWKSURI == nil || *doc.JWKSURI == "":
		return "", errors.New(`no "jwks_uri"`)
	}
	u, err := url.Parse(*doc.JWKSURI)
	if err != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", fmt.Errorf(`"jwks_uri" %q is not an absolute http(s) URL`, clip(*doc.JWKSURI))
	}
	return *doc.JWKSURI, nil
}

// clip keeps a value from a remote document short and on one line in an error.
func clip(s string) string {
	s = oneLineErr(errors.New(s))
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}

func oneLineErr(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
