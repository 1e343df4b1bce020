package devidp

import (
	"net/url"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// CLIClientID is the pre-registered public client: native, no secret, PKCE
// required by pkg/op for AuthMethodNone, loopback redirects on any port
// (RFC 8252 §7.3: pkg/op matches http://127.0.0.1:<any>/callback against the
// registered port-less URI).
const CLIClientID = "jobgate-cli"

// client implements op.Client for the dev provider's clients.
type client struct {
	id           string
	name         string // what the picker and the device page call it
	redirectURIs []string
	appType      op.ApplicationType
	authMethod   oidc.AuthMethod
	grantTypes   []oidc.GrantType
	loginURL     func(string) string
	reg          *registration // set for dynamically registered clients
	doc          *cimdDocument // set for clients named by a metadata document (cimd.go)
	secret       string        // confidential clients only
	postLogout   []string      // post_logout_redirect_uri values end_session accepts
}

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return c.redirectURIs }
func (c *client) PostLogoutRedirectURIs() []string    { return c.postLogout }
func (c *client) ApplicationType() op.ApplicationType { return c.appType }
func (c *client) AuthMethod() oidc.AuthMethod         { return c.authMethod }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType        { return c.grantTypes }
func (c *client) LoginURL(id string) string           { return c.loginURL(id) }
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration      { return time.Hour }
func (c *client) DevMode() bool                       { return false }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// IsScopeAllowed admits the jobs:* scopes: pkg/op silently drops any
// non-OIDC scope a client is not allowed, and the MCP clients ask for the
// scopes the protected-resource metadata lists.
func (c *client) IsScopeAllowed(scope string) bool     { return strings.HasPrefix(scope, "jobs:") }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return 0 }

func (c *client) allows(g oidc.GrantType) bool {
	for _, have := range c.grantTypes {
		if have == g {
			return true
		}
	}
	return false
}

func cliClient(loginURL func(string) string) *client {
	return &client{
		id: CLIClientID, name: cliClientName,
		// Both loopback spellings: RFC 8252 recommends 127.0.0.1, many tools use localhost.
		redirectURIs: []string{"http://127.0.0.1/callback", "http://localhost/callback", "http://[::1]/callback"},
		appType:      op.ApplicationTypeNative,
		authMethod:   oidc.AuthMethodNone,
		grantTypes:   []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken, oidc.GrantTypeDeviceCode},
		loginURL:     loginURL,
	}
}

// PagesClientID is the confidential web client jobgate's own pages (the
// browser sign-in relying party) use; it exists when Options.PagesRedirectURIs is set.
const PagesClientID = "jobgate-pages"

func pagesClient(loginURL func(string) string, redirects []string, secret string) *client {
	return &client{
		id: PagesClientID, name: "jobgate's pages (browser sign-in)", redirectURIs: redirects,
		// Web = confidential: pkg/op requires the secret at the token endpoint
		// and accepts an http redirect only for such a client (loopback dev).
		appType: op.ApplicationTypeWeb, authMethod: oidc.AuthMethodBasic,
		grantTypes: []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken},
		loginURL:   loginURL, secret: secret,
	}
}

// loginURLFor returns Client.LoginURL: the picker under the issuer's path.
func loginURLFor(issuerPath string) func(string) string {
	return func(id string) string {
		return issuerPath + "/login?" + url.Values{"authRequestID": {id}}.Encode()
	}
}

// cliClientName is how the device page and the picker name jobgate-cli.
const cliClientName = "jobgate command-line client (jobgate login)"
