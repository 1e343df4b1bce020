package oidctest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/tests/support/oidctest"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

const resource = "http://127.0.0.1:1/mcp"

func start(t *testing.T) *oidctest.Provider {
	t.Helper()
	return oidctest.Start(t, oidctest.Config{
		Resource:       resource,
		OtherResources: []string{"http://127.0.0.1:2/other"},
		Users: []oidctest.User{
			{Sub: "ana", Tenant: "acme", Scopes: []string{"jobs:read", "jobs:write"}, Claims: map[string]any{"name": "Ana"}},
			{Sub: "nobody", Scopes: []string{"jobs:read"}},
		},
		Clients: []oidctest.Client{oidctest.PublicClient("cli")},
	})
}

// discovery is the provider's OpenID configuration.
func discovery(t *testing.T, p *oidctest.Provider) map[string]any {
	t.Helper()
	resp, err := http.Get(p.Issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

func verifier(t *testing.T, p *oidctest.Provider) *authz.JWKSVerifier {
	t.Helper()
	v, err := authz.NewJWKSVerifier(context.Background(), authz.JWKSOptions{URL: p.JWKSURL, Issuer: p.Issuer, Audience: resource})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return v
}

// The provider's metadata has what MCP's authorization spec and RFC 8628 clients look for.
func TestDiscovery(t *testing.T) {
	p := start(t)
	d := discovery(t, p)
	if d["issuer"] != p.Issuer {
		t.Errorf("issuer %v, want %s", d["issuer"], p.Issuer)
	}
	for _, k := range []string{"registration_endpoint", "device_authorization_endpoint", "revocation_endpoint", "jwks_uri"} {
		if s, _ := d[k].(string); !strings.HasPrefix(s, p.Issuer+"/") {
			t.Errorf("%s = %v, want an endpoint of %s", k, d[k], p.Issuer)
		}
	}
	if d["jwks_uri"] != p.JWKSURL {
		t.Errorf("jwks_uri %v, want %s", d["jwks_uri"], p.JWKSURL)
	}
	methods, _ := json.Marshal(d["code_challenge_methods_supported"])
	if !strings.Contains(string(methods), `"S256"`) {
		t.Errorf("code_challenge_methods_supported %s lacks S256", methods)
	}
}

// Authorization code + PKCE as ana: the access token passes jobgate's JWKS verifier with her
// tenant and the scopes she has of those asked for; a refresh gives another that does too.
func TestAuthCodeTokenVerifies(t *testing.T) {
	p := start(t)
	v := verifier(t, p)
	tok := p.AuthCode(t, "cli", "http://127.0.0.1:4321/callback", "ana", "", "openid jobs:read jobs:admin")
	c, err := v.Verify(context.Background(), tok.AccessToken)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if c.Principal.Tenant != "acme" || c.Principal.Subject != "ana" {
		t.Errorf("principal %+v, want acme/ana", c.Principal)
	}
	if len(c.Principal.Scopes) != 1 || c.Principal.Scopes[0] != authz.ScopeRead {
		t.Errorf("scopes %v, want only jobs:read (jobs:admin is not ana's)", c.Principal.Scopes)
	}
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token")
	}
	if tok.IDToken == "" {
		t.Error("no ID token for scope openid")
	}
	// An ID token is no access token.
	if _, err := v.Verify(context.Background(), tok.IDToken); err == nil {
		t.Error("the ID token was accepted as a bearer token")
	}

	cfg := oauth2.Config{ClientID: "cli", Endpoint: oauth2.Endpoint{TokenURL: p.Issuer + "/token", AuthStyle: oauth2.AuthStyleInParams}}
	old := &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Minute)}
	nt, err := cfg.TokenSource(context.Background(), old).Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if nt.AccessToken == tok.AccessToken {
		t.Error("refresh returned the same access token")
	}
	if _, err := v.Verify(context.Background(), nt.AccessToken); err != nil {
		t.Errorf("refreshed token: %v", err)
	}
}

// A user without a tenant gets a token without the tenant claim, and a token for another
// resource has another aud: jobgate refuses both.
func TestTokensJobgateRefuses(t *testing.T) {
	p := start(t)
	v := verifier(t, p)
	noTenant := p.AuthCode(t, "cli", "http://127.0.0.1:4321/callback", "nobody", "", "jobs:read")
	if _, err := v.Verify(context.Background(), noTenant.AccessToken); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("token without tenant: err %v, want one naming the tenant claim", err)
	}
	other := p.AuthCode(t, "cli", "http://127.0.0.1:4321/callback", "ana", "http://127.0.0.1:2/other", "jobs:read")
	if _, err := v.Verify(context.Background(), other.AccessToken); err == nil || !strings.Contains(err.Error(), "aud") {
		t.Errorf("token for another resource: err %v, want one naming aud", err)
	}
}

// Deny on the login page returns access_denied to the client.
func TestDeny(t *testing.T) {
	p := start(t)
	q := url.Values{"client_id": {"cli"}, "response_type": {"code"}, "redirect_uri": {"http://127.0.0.1:9/callback"},
		"scope": {"jobs:read"}, "code_challenge": {strings.Repeat("a", 43)}, "code_challenge_method": {"S256"}, "state": {"s1"}}
	back := p.Deny(t, nil, p.Issuer+"/auth?"+q.Encode())
	u, err := url.Parse(back)
	if err != nil {
		t.Fatal(err)
	}
	if u.Query().Get("error") != "access_denied" || u.Query().Get("state") != "s1" {
		t.Errorf("redirect %s, want error=access_denied&state=s1", back)
	}
}

// The device grant (RFC 8628) with golang.org/x/oauth2: approved → tokens; aborted → access_denied.
func TestDevice(t *testing.T) {
	p := start(t)
	v := verifier(t, p)
	d := discovery(t, p)
	cfg := oauth2.Config{ClientID: "cli", Scopes: []string{"openid", "jobs:read", "jobs:write"}, Endpoint: oauth2.Endpoint{
		DeviceAuthURL: d["device_authorization_endpoint"].(string), TokenURL: d["token_endpoint"].(string),
		AuthStyle: oauth2.AuthStyleInParams}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.ApproveDevice(t, da.VerificationURIComplete, "ana")
	da.Interval = 1 // the approval is done: one poll is enough, don't wait 5s
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	c, err := v.Verify(ctx, tok.AccessToken)
	if err != nil || c.Principal.Subject != "ana" || c.Principal.Tenant != "acme" || len(c.Principal.Scopes) != 2 {
		t.Errorf("device token: %+v, %v", c.Principal, err)
	}

	da, err = cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.DenyDevice(t, da.UserCode)
	da.Interval = 1
	_, err = cfg.DeviceAccessToken(ctx, da)
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "access_denied" {
		t.Errorf("aborted device code: %v, want access_denied", err)
	}
}

// A device code nobody approves expires: the poll ends with expired_token (RFC 8628 §3.5).
func TestDeviceCodeExpires(t *testing.T) {
	p := oidctest.Start(t, oidctest.Config{Resource: resource, DeviceCodeTTL: 2 * time.Second,
		Users: []oidctest.User{{Sub: "ana", Tenant: "acme", Scopes: []string{"jobs:read"}}}, Clients: []oidctest.Client{oidctest.PublicClient("cli")}})
	d := discovery(t, p)
	cfg := oauth2.Config{ClientID: "cli", Scopes: []string{"jobs:read"}, Endpoint: oauth2.Endpoint{
		DeviceAuthURL: d["device_authorization_endpoint"].(string), TokenURL: d["token_endpoint"].(string),
		AuthStyle: oauth2.AuthStyleInParams}}
	da, err := cfg.DeviceAuth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if da.Expiry.IsZero() || time.Until(da.Expiry) > 5*time.Second {
		t.Fatalf("expires_in gives %v, want the configured 2s", da.Expiry)
	}
	// x/oauth2's poll gives up at the expiry itself (a context deadline), so poll by hand:
	// pending (or slow_down) until the provider itself says expired_token.
	poll := func() string {
		resp, err := http.PostForm(cfg.Endpoint.TokenURL, url.Values{"grant_type": {oidctest.GrantDeviceCode},
			"device_code": {da.DeviceCode}, "client_id": {"cli"}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return e.Error
	}
	var last string
	testenv.Eventually(t, 30*time.Second, "the device code to expire", func() bool {
		last = poll()
		return last != "authorization_pending" && last != "slow_down"
	})
	if last != "expired_token" {
		t.Fatalf("poll of an unapproved code answered %q, want expired_token", last)
	}
}

// A confidential client (what jobgate's pages register) gets tokens with its secret and PKCE;
// a wrong secret is invalid_client, and (the provider authenticates the client before it looks
// at the code) the code still works with the right one.
func TestConfidentialClient(t *testing.T) {
	p := oidctest.Start(t, oidctest.Config{Resource: resource,
		Users:   []oidctest.User{{Sub: "ana", Tenant: "acme", Scopes: []string{"jobs:read"}}},
		Clients: []oidctest.Client{{ID: "pages", Secret: "s3cret", RedirectURIs: []string{"http://127.0.0.1:7777/auth/callback"}}}})
	d := discovery(t, p)
	cfg := oauth2.Config{ClientID: "pages", ClientSecret: "wrong", RedirectURL: "http://127.0.0.1:7777/auth/callback",
		Scopes: []string{"openid", "jobs:read"}, Endpoint: oauth2.Endpoint{AuthURL: d["authorization_endpoint"].(string),
			TokenURL: d["token_endpoint"].(string), AuthStyle: oauth2.AuthStyleInHeader}}
	pkce := oauth2.GenerateVerifier()
	back := p.Login(t, nil, cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(pkce)), "ana")
	u, err := url.Parse(back)
	if err != nil {
		t.Fatal(err)
	}
	code := u.Query().Get("code")
	if u.Query().Get("iss") != p.Issuer || code == "" {
		t.Fatalf("redirect %s, want code and iss (RFC 9207)", back)
	}
	_, err = cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "invalid_client" {
		t.Fatalf("wrong secret: %v, want invalid_client", err)
	}
	cfg.ClientSecret = "s3cret"
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatalf("right secret: %v", err)
	}
	if idt, _ := tok.Extra("id_token").(string); idt == "" {
		t.Error("no id_token for scope openid")
	}
	if _, err := verifier(t, p).Verify(context.Background(), tok.AccessToken); err != nil {
		t.Errorf("access token: %v", err)
	}
}

// A confidential client registered with NoPKCE (Temporal's ui-server sends none) redeems a code
// without PKCE; another confidential client is still refused at the authorization endpoint.
func TestConfidentialClientNoPKCE(t *testing.T) {
	const redirect = "http://127.0.0.1:7777/auth/sso/callback"
	p := oidctest.Start(t, oidctest.Config{Resource: resource,
		Users: []oidctest.User{{Sub: "ana", Tenant: "acme", Scopes: []string{"jobs:read"}}},
		Clients: []oidctest.Client{
			{ID: "ui", Secret: "s3cret", NoPKCE: true, RedirectURIs: []string{redirect}},
			{ID: "pages", Secret: "s3cret", RedirectURIs: []string{redirect}},
		}})
	d := discovery(t, p)
	cfg := func(id string) oauth2.Config {
		return oauth2.Config{ClientID: id, ClientSecret: "s3cret", RedirectURL: redirect, Scopes: []string{"openid", "jobs:read"},
			Endpoint: oauth2.Endpoint{AuthURL: d["authorization_endpoint"].(string), TokenURL: d["token_endpoint"].(string)}}
	}

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	pages := cfg("pages")
	resp, err := noFollow.Get(pages.AuthCodeURL("st"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc, _ := url.Parse(resp.Header.Get("Location")); loc == nil || loc.Query().Get("error") != "invalid_request" ||
		!strings.Contains(loc.Query().Get("error_description"), "PKCE") {
		t.Fatalf("pages without PKCE: %d to %q, want invalid_request naming PKCE", resp.StatusCode, resp.Header.Get("Location"))
	}

	ui := cfg("ui")
	back, err := url.Parse(p.Login(t, nil, ui.AuthCodeURL("st"), "ana"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ui.Exchange(context.Background(), back.Query().Get("code"))
	if err != nil {
		t.Fatalf("ui without PKCE: %v", err)
	}
	if _, err := verifier(t, p).Verify(context.Background(), tok.AccessToken); err != nil {
		t.Errorf("access token: %v", err)
	}
}
