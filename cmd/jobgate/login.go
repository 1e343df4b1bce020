package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
)

// `jobgate login`: a person signs in at the server's identity provider and the CLI keeps the
// tokens (tokenstore.go). The device authorization grant (RFC 8628) by default, since it works
// over ssh and in containers; authorization code + PKCE with a loopback redirect (RFC 8252) with
// --browser. The issuer comes from the server's RFC 9728 metadata unless --issuer names it.
//
// Discovery is done here rather than with coreos/go-oidc: go-oidc reads only OpenID discovery,
// while an OAuth authorization server may publish only RFC 8414 metadata (and MCP clients try
// that first), and go-oidc would add nothing else the CLI uses — the CLI verifies no ID token
// (the server verifies the access token on every call). Both documents are tried in the order
// MCP's authorization spec gives, and the issuer they name must be the one asked for.

const loginSummary = `Signs you in at the server's identity provider and keeps the tokens for the client commands
(jobs, approvals), which use them whenever --token, --token-file and JOBGATE_TOKEN are absent.
By default it prints a code to enter on a page you open anywhere (device authorization, RFC 8628);
--browser signs in through this machine's browser instead (authorization code + PKCE, RFC 8252).
Tokens are kept in <user config dir>/jobgate/tokens.json (mode 0600) and refreshed when expired.`

const defaultClientID = "jobgate-cli"

// loginHTTPTimeout bounds each request to the server's metadata and the identity provider.
const loginHTTPTimeout = 30 * time.Second

type loginOpts struct {
	url, issuer, resource, clientID, secretFile, scope, tenantClaim string
	browser, open                                                   bool
	timeout                                                         time.Duration
}

func runLogin(args []string, stdout, stderr io.Writer) error {
	var o loginOpts
	fs := newFlagSet("login", loginSummary, stderr)
	fs.StringVar(&o.url, "url", envOr("JOBGATE_URL", defaultURL), "MCP endpoint to sign in for (env JOBGATE_URL)")
	fs.StringVar(&o.issuer, "issuer", "", "identity provider's issuer URL (default: the first authorization server in the server's RFC 9728 metadata)")
	fs.StringVar(&o.resource, "resource", "", "the server's resource URI, put in the token's aud (default: the resource the server's metadata names, which must be --url)")
	fs.StringVar(&o.clientID, "client-id", defaultClientID, "OAuth client ID registered at the identity provider (a public client unless --client-secret-file)")
	fs.StringVar(&o.secretFile, "client-secret-file", "", "file holding the client secret, for a confidential client (default none: a public client)")
	fs.StringVar(&o.scope, "scope", "", "space-separated scopes to ask for (default: the server's scopes_supported plus openid offline_access)")
	fs.StringVar(&o.tenantClaim, "tenant-claim", "tenant", "access-token claim holding the tenant (as the server's --tenant-claim)")
	fs.BoolVar(&o.browser, "browser", false, "sign in with this machine's browser (authorization code + PKCE on a 127.0.0.1 redirect) instead of a device code")
	fs.BoolVar(&o.open, "open", true, "with --browser: open the sign-in URL with xdg-open (open on macOS) when there is one; the URL is printed either way")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "with --browser: how long to wait for the sign-in")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if o.timeout <= 0 {
		return errors.New("login: --timeout must be positive")
	}
	ctx, stop := untilInterrupted()
	defer stop()
	return login(ctx, o, stdout)
}

func login(ctx context.Context, o loginOpts, stdout io.Writer) error {
	hc := &http.Client{Timeout: loginHTTPTimeout}
	if _, ok := normURL(o.url); !ok {
		return fmt.Errorf("login: --url %q is not an http(s) URL", o.url)
	}
	// The commands send the stored token to --url: refuse before the person signs in.
	if err := secureURL("--url", o.url); err != nil {
		return fmt.Errorf("login: %w; the token would cross the network in clear", err)
	}
	// The server's RFC 9728 metadata: issuer, resource and scopes. With --issuer and --resource
	// it is optional (a server that publishes none can still be signed in to).
	prm, prmErr := fetchResourceMetadata(ctx, hc, o.url)
	if prmErr != nil && (o.issuer == "" || o.resource == "") {
		return prmErr
	}
	resource, err := loginResource(o, prm)
	if err != nil {
		return err
	}
	issuer := o.issuer
	if issuer == "" {
		if len(prm.AuthorizationServers) == 0 || prm.AuthorizationServers[0] == "" {
			return fmt.Errorf("login: the server at %s names no authorization server in its RFC 9728 metadata; pass --issuer", o.url)
		}
		issuer = prm.AuthorizationServers[0]
	}
	scopes := loginScopes(o.scope, prm)
	meta, err := discoverIssuer(ctx, hc, issuer)
	if err != nil {
		return err
	}
	secret, err := readClientSecret(o.secretFile)
	if err != nil {
		return err
	}
	path, err := tokenStorePath()
	if err != nil {
		return err
	}
	// Read the store before signing in, so a broken store fails before the person's effort.
	if _, err := loadTokens(path); err != nil {
		return err
	}
	cfg := oauthConfig(meta, o.clientID, secret, scopes)
	ictx := idpContext(ctx, meta, o.clientID, secret, resource)
	var tok *oauth2.Token
	if o.browser {
		tok, err = browserLogin(ictx, cfg, meta, resource, o, stdout)
	} else {
		tok, err = deviceLogin(ictx, cfg, meta, stdout)
	}
	if err != nil {
		return err
	}
	info, err := checkAccessToken(tok.AccessToken, issuer, resource, o.tenantClaim, time.Now())
	if err != nil {
		return err
	}
	l := storedLogin{
		Issuer: meta.Issuer, Resource: resource, URL: o.url, ClientID: o.clientID, TokenEndpoint: meta.TokenEndpoint,
		RevocationEndpoint: meta.RevocationEndpoint, TenantClaim: o.tenantClaim,
		AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, Expiry: info.expiry(tok.Expiry), SavedAt: time.Now().UTC(),
	}
	if o.secretFile != "" {
		l.ClientSecretFile = absPath(o.secretFile)
	}
	if err := putLogin(path, l); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Signed in to %s as %s (tenant %s; scopes %s) for %s.\n", cleanText(meta.Issuer), cleanText(info.Subject), cleanText(info.Tenant),
		cleanText(orNone(info.Scopes)), resource)
	refresh := "no refresh token: run 'jobgate login' again when it expires"
	if tok.RefreshToken != "" {
		refresh = "refreshed automatically"
	}
	fmt.Fprintf(stdout, "Token saved in %s (expires %s, %s).\n", path, l.Expiry.Local().Format(time.RFC3339), refresh)
	return nil
}

// loginResource is the resource the token is for: --resource, else the one the server's
// metadata (prm) names, which must then be --url; when both are there they must agree.
func loginResource(o loginOpts, prm *resourceMetadata) (string, error) {
	resource := o.resource
	switch {
	case prm != nil && resource == "" && !sameURL(prm.Resource, o.url):
		// RFC 9728 §3.3: metadata naming another resource must not be used, or a server could
		// collect tokens meant for another. Behind a proxy the operator says so with --resource.
		return "", fmt.Errorf("login: the server at %s names its resource %q, not %s; if that is right (a proxy or another spelling), pass --resource %s",
			o.url, prm.Resource, o.url, prm.Resource)
	case prm != nil && resource != "" && !sameURL(prm.Resource, resource):
		return "", fmt.Errorf("login: --resource %s, but the server at %s names its resource %q", resource, o.url, prm.Resource)
	case resource == "":
		resource = prm.Resource
	}
	return resource, nil
}

// loginScopes is the scopes to ask for: --scope as given, else the server's scopes_supported
// (every scope without metadata) plus openid and offline_access.
func loginScopes(scope string, prm *resourceMetadata) []string {
	if scope != "" {
		return strings.Fields(scope)
	}
	var scopes []string
	if prm != nil {
		scopes = slices.Clone(prm.ScopesSupported)
	} else {
		scopes = authz.ScopeStrings(authz.AllScopes())
	}
	// openid: standard IdPs key consent and sessions on it; offline_access: a refresh token.
	for _, s := range []string{"openid", "offline_access"} {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	return scopes
}

// putLogin saves l in the token store at path beside the other logins, re-reading the store
// first: another command may have refreshed another login meanwhile.
func putLogin(path string, l storedLogin) error {
	tf, err := loadTokens(path)
	if err != nil {
		return err
	}
	tf.put(l)
	return saveTokens(path, tf)
}

func readClientSecret(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("login: --client-secret-file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("login: --client-secret-file %s is empty", file)
	}
	return s, nil
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
