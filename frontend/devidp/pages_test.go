package devidp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
)

// TestPagesClient: the confidential jobgate-pages client signs in with its
// secret and gets an ID token a relying party can use (sub, nonce, its
// client id in aud, auth_time, amr=dev) next to an access token authz
// accepts; a wrong secret is invalid_client; the secret survives a restart.
func TestPagesClient(t *testing.T) {
	dir := t.TempDir()
	p := startIdPWith(t, Options{Dir: dir, PagesRedirectURIs: []string{redirectURI}})
	secret := p.PagesClientSecret()
	if len(secret) < 40 {
		t.Fatalf("pages secret %q", secret)
	}
	d := p.discover(t)
	cfg := oauthConfig(d, "openid", "jobs:read")
	cfg.ClientID, cfg.ClientSecret = PagesClientID, secret
	cfg.Endpoint.AuthStyle = oauth2.AuthStyleInHeader
	pkce := oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce), oauth2.SetAuthURLParam("nonce", "n-123"))
	code := p.login(t, authURL, "ana", "s")

	wrong := *cfg
	wrong.ClientSecret = "not-the-secret"
	if _, err := wrong.Exchange(context.Background(), code, oauth2.VerifierOption(pkce)); !isOAuthError(err, "invalid_client") {
		t.Fatalf("exchange with a wrong secret: %v, want invalid_client", err)
	}
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, p, d)
	checkAccess(t, v, tok.AccessToken, "ana", "acme", authz.ScopeRead)
	idt, _ := tok.Extra("id_token").(string)
	// pkg/op gives the ID token the same aud (the resource URI is in it), so
	// it must fail as a bearer some other way: it has no tenant claim (and
	// WP1 makes authz refuse at_hash/c_hash/nonce outright).
	if _, err := v.Verify(context.Background(), idt); err == nil {
		t.Fatal("authz accepted the ID token as an access token")
	}
	parts := strings.Split(idt, ".")
	if len(parts) != 3 {
		t.Fatalf("no ID token: %q", idt)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Iss, Sub, Nonce string
		Aud             []string
		AuthTime        int64 `json:"auth_time"`
		AMR             []string
		Scope, Tenant   *string
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	if c.Iss != p.issuer || c.Sub != "ana" || c.Nonce != "n-123" || !slices.Contains(c.Aud, PagesClientID) ||
		c.AuthTime == 0 || !slices.Equal(c.AMR, []string{"dev"}) || c.Scope != nil {
		t.Fatalf("ID token claims %s", payload)
	}

	p.srv.Close()
	p2 := startIdPWith(t, Options{Dir: dir, PagesRedirectURIs: []string{redirectURI}})
	if p2.PagesClientSecret() != secret {
		t.Fatal("pages client secret changed across restart")
	}
	if _, err := New(Options{Issuer: "http://127.0.0.1:1/oidc", Resource: testResource, Users: testUsers,
		PagesRedirectURIs: []string{"http://evil.example/cb"}}); err == nil {
		t.Fatal("accepted a non-loopback http redirect for jobgate-pages")
	}
}
