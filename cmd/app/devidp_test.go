package app

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestDevIdentityProvider runs the dev stack twice on one data dir and port: the banner and the
// RFC 9728 metadata name the identity provider; its metadata at both locations MCP clients try
// has what they need; a token from a real code + PKCE login calls list_jobs through the MCP
// client, as does an HS256 `jobgate token`; tokens of another issuer or key are refused with
// 401; after a restart the kid, a dynamically registered client and its refresh token remain.
func TestDevIdentityProvider(t *testing.T) {
	testenv.Heavy(t, "starts the dev stack (embedded Temporal) twice")
	dir := t.TempDir()
	m, banner := startDev(t, dir, "127.0.0.1:0")
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = m.Close()
		}
	})
	base := devBase(m)
	issuer := base + "/oidc"
	if m.IdPIssuer() != issuer {
		t.Fatalf("IdPIssuer %q, want %q", m.IdPIssuer(), issuer)
	}
	for _, want := range []string{
		"Identity provider " + issuer + " (dev only)",
		"jobgate login --url " + base + "/mcp",
		"claude mcp add --transport http jobgate " + base + "/mcp\n",
		`"mcpServers"`,
	} {
		if !strings.Contains(banner, want) {
			t.Fatalf("banner lacks %q:\n%s", want, banner)
		}
	}
	if strings.Contains(banner, "loopback clients only") {
		t.Fatalf("banner of a loopback --listen warns about remote clients:\n%s", banner)
	}

	// RFC 9728: the protected resource names the IdP, at both metadata URLs.
	for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		prm := getJSONMap(t, base+p)
		if as, _ := prm["authorization_servers"].([]any); len(as) != 1 || as[0] != issuer || prm["resource"] != base+"/mcp" {
			t.Fatalf("%s: %v", p, prm)
		}
	}
	// The IdP's metadata where MCP clients look first (RFC 8414 path insertion) and where OIDC
	// clients look: PKCE S256 (MCP clients refuse without it), registration, device grant.
	for _, u := range []string{base + "/.well-known/oauth-authorization-server/oidc", issuer + "/.well-known/openid-configuration"} {
		md := getJSONMap(t, u)
		ccm, _ := md["code_challenge_methods_supported"].([]any)
		gts, _ := md["grant_types_supported"].([]any)
		if md["issuer"] != issuer || !slices.Contains(ccm, any("S256")) || md["registration_endpoint"] != issuer+"/register" ||
			md["device_authorization_endpoint"] != issuer+"/device_authorization" || md["jwks_uri"] != issuer+"/keys" ||
			!slices.Contains(gts, any("refresh_token")) || !slices.Contains(gts, any("urn:ietf:params:oauth:grant-type:device_code")) {
			t.Fatalf("%s: %v", u, md)
		}
	}
	endpoint := oauth2.Endpoint{AuthURL: issuer + "/authorize", TokenURL: issuer + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}

	// A person logs in as ana with the pre-registered public client and PKCE.
	cli := &oauth2.Config{ClientID: devidp.CLIClientID, Endpoint: endpoint, RedirectURL: "http://127.0.0.1:45678/callback",
		Scopes: []string{"openid", "jobs:read", "jobs:write"}}
	tok := codeLogin(t, cli, "ana")
	res := listJobs(t, m, tok.AccessToken)
	if sc, _ := res.StructuredContent.(map[string]any); sc == nil || sc["jobs"] == nil {
		t.Fatalf("list_jobs with a dev IdP token: %+v", res.StructuredContent)
	}
	// The device grant (RFC 8628), approved as ops on the device page under /oidc/device.
	dev := &oauth2.Config{ClientID: devidp.CLIClientID, Endpoint: oauth2.Endpoint{DeviceAuthURL: issuer + "/device_authorization",
		TokenURL: issuer + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}, Scopes: []string{"jobs:read", "jobs:admin"}}
	da, err := dev.DeviceAuth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if da.VerificationURI != issuer+"/device" {
		t.Fatalf("verification_uri %s", da.VerificationURI)
	}
	resp, err := http.Get(da.VerificationURI + "?user_code=" + url.QueryEscape(da.UserCode))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf := reCSRFField.FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || csrf == nil {
		t.Fatalf("device page: %s\n%s", resp.Status, page)
	}
	resp, err = http.PostForm(da.VerificationURI, url.Values{"user_code": {da.UserCode}, "csrf": {string(csrf[1])}, "user": {"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("device approval: %s", resp.Status)
	}
	// Approved already, so one token request answers (no polling interval to wait out).
	resp, err = http.PostForm(issuer+"/oauth/token", url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"},
		"device_code": {da.DeviceCode}, "client_id": {devidp.CLIClientID}})
	if err != nil {
		t.Fatal(err)
	}
	var dtr struct {
		AccessToken string `json:"access_token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&dtr)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || dtr.AccessToken == "" {
		t.Fatalf("device token: %s %v", resp.Status, err)
	}
	listJobs(t, m, dtr.AccessToken)

	// `jobgate token` (HS256, iss jobgate-dev) keeps working beside it.
	hs, err := m.MintDevToken("acme", "bo", []authz.Scope{authz.ScopeRead}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	listJobs(t, m, hs)

	// Refused, each with 401 invalid_token: another issuer; the IdP's issuer and kid signed
	// with another key; the IdP's issuer with the dev HS256 secret; the ID token.
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{"iss": issuer, "aud": []string{m.ResourceURI()}, "sub": "ana", "tenant": "acme", "scope": "jobs:read",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	forged := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	forged.Header["kid"] = m.IdP().KeyID()
	forgedTok, err := forged.SignedString(other)
	if err != nil {
		t.Fatal(err)
	}
	hsAsIdP, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(m.secret)
	if err != nil {
		t.Fatal(err)
	}
	claims["iss"] = "http://localhost:1/oidc"
	otherIss := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	otherIss.Header["kid"] = m.IdP().KeyID()
	otherIssTok, err := otherIss.SignedString(other)
	if err != nil {
		t.Fatal(err)
	}
	idTok, _ := tok.Extra("id_token").(string)
	if idTok == "" {
		t.Fatal("no ID token for scope openid")
	}
	for name, bad := range map[string]string{"other issuer": otherIssTok, "other key, IdP's kid": forgedTok, "HS256 under the IdP's issuer": hsAsIdP, "ID token": idTok} {
		if code, ch := postMCP(t, m, bad); code != http.StatusUnauthorized || !strings.HasPrefix(ch, `Bearer error="invalid_token"`) {
			t.Errorf("%s: %d %q", name, code, ch)
		}
	}

	// An MCP client registers itself (RFC 7591) and logs in on its own loopback port.
	resp, err = http.Post(issuer+"/register", "application/json", strings.NewReader(
		`{"client_name":"test agent","redirect_uris":["http://localhost:33418/callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || reg.ClientID == "" {
		t.Fatalf("register: %s %v %+v", resp.Status, err, reg)
	}
	dcr := &oauth2.Config{ClientID: reg.ClientID, Endpoint: endpoint, RedirectURL: "http://localhost:33418/callback", Scopes: []string{"jobs:read"}}
	dtok := codeLogin(t, dcr, "gus")
	listJobs(t, m, dtok.AccessToken)
	if dtok.RefreshToken == "" {
		t.Fatal("no refresh token for the registered client")
	}

	// Restart on the same data dir and port.
	kid, addr := m.IdP().KeyID(), m.Addr()
	closed = true
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, _ := startDev(t, dir, addr)
	t.Cleanup(func() { _ = m2.Close() })
	if m2.IdPIssuer() != issuer || m2.IdP().KeyID() != kid {
		t.Fatalf("after restart: issuer %s kid %s, want %s %s", m2.IdPIssuer(), m2.IdP().KeyID(), issuer, kid)
	}
	// The old refresh token still works for the registered client, and its new access token
	// (and the one from before the restart) pass the restarted stack's JWKS verification.
	rtok, err := dcr.TokenSource(context.Background(), &oauth2.Token{RefreshToken: dtok.RefreshToken, Expiry: time.Now().Add(-time.Hour)}).Token()
	if err != nil {
		t.Fatalf("refresh after restart: %v", err)
	}
	listJobs(t, m2, rtok.AccessToken)
	listJobs(t, m2, tok.AccessToken)
	// The registered client can still start a fresh login.
	listJobs(t, m2, codeLogin(t, dcr, "gus").AccessToken)
}
