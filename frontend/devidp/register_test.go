package devidp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
)

func postJSON(t *testing.T, u, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %s", resp.Status, b)
	}
	return resp.StatusCode, m
}

func getJSON(t *testing.T, u string) map[string]any {
	t.Helper()
	resp := get(t, http.DefaultClient, u)
	defer resp.Body.Close()
	var m map[string]any
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&m) != nil {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	return m
}

// TestDynamicRegistration: both metadata locations name the registration
// endpoint; a registered loopback client logs in with PKCE on another port,
// gets a token authz accepts, and survives a restart with its refresh token.
func TestDynamicRegistration(t *testing.T) {
	dir := t.TempDir()
	p := startIdP(t, dir)
	oidcMeta := getJSON(t, p.issuer+"/.well-known/openid-configuration")
	base := strings.TrimSuffix(p.issuer, "/oidc")
	asMeta := getJSON(t, base+"/.well-known/oauth-authorization-server/oidc")
	for name, m := range map[string]map[string]any{"openid-configuration": oidcMeta, "oauth-authorization-server": asMeta} {
		if m["registration_endpoint"] != p.issuer+"/register" || m["issuer"] != p.issuer || m["device_authorization_endpoint"] != p.issuer+"/device_authorization" {
			t.Fatalf("%s: %v", name, m)
		}
	}
	status, reg := postJSON(t, p.issuer+"/register", `{"client_name":"Claude Code","redirect_uris":["http://localhost:33418/callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"]}`)
	id, _ := reg["client_id"].(string)
	if status != http.StatusCreated || !strings.HasPrefix(id, "dcr-") || reg["token_endpoint_auth_method"] != "none" || reg["client_secret"] != nil {
		t.Fatalf("register: %d %v", status, reg)
	}
	if fi, err := os.Stat(filepath.Join(dir, clientsFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("clients file: %v %v", fi, err)
	}
	d := p.discover(t)
	cfg := oauthConfig(d, "jobs:read", "jobs:write")
	cfg.ClientID = id
	cfg.RedirectURL = "http://localhost:40001/callback" // another port: RFC 8252 §7.3
	pkce := oauth2.GenerateVerifier()
	code := p.loginTo(t, cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce)), "bo", "s", cfg.RedirectURL)
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	checkAccess(t, verifier(t, p, d), tok.AccessToken, "bo", "acme", authz.ScopeRead, authz.ScopeWrite)

	p.srv.Close()
	p2 := startIdP(t, dir)
	d2 := p2.discover(t)
	cfg2 := oauthConfig(d2, cfg.Scopes...)
	cfg2.ClientID, cfg2.RedirectURL = id, cfg.RedirectURL
	tok2, err := refresh(context.Background(), cfg2, tok.RefreshToken)
	if err != nil {
		t.Fatalf("refresh after restart: %v", err)
	}
	checkAccess(t, verifier(t, p2, d2), tok2.AccessToken, "bo", "acme", authz.ScopeRead, authz.ScopeWrite)
	// Another client cannot use bo's refresh token.
	cfg2.ClientID = CLIClientID
	if _, err := refresh(context.Background(), cfg2, tok2.RefreshToken); !isOAuthError(err, "invalid_grant") && !isOAuthError(err, "invalid_client") {
		t.Fatalf("refresh with another client's token: %v", err)
	}
}

func TestRegistrationRefusals(t *testing.T) {
	p := startIdP(t, "")
	for _, tc := range []struct{ body, code, field string }{
		{`{"redirect_uris":["http://evil.example/cb"]}`, "invalid_redirect_uri", "redirect_uris"},
		{`{"redirect_uris":[]}`, "invalid_redirect_uri", "redirect_uris"},
		{`{"redirect_uris":["https://app.example/cb#x"]}`, "invalid_redirect_uri", "redirect_uris"},
		{`{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"client_secret_basic"}`, "invalid_client_metadata", "token_endpoint_auth_method"},
		{`{"redirect_uris":["http://127.0.0.1/cb"],"grant_types":["client_credentials"]}`, "invalid_client_metadata", "grant_types"},
		{`{"redirect_uris":["http://127.0.0.1/cb"],"response_types":["token"]}`, "invalid_client_metadata", "response_types"},
		{`{"redirect_uris":["http://127.0.0.1/cb"],"client_id":"jobgate-cli"}`, "invalid_client_metadata", "client_id"},
		{`[`, "invalid_client_metadata", "body"},
	} {
		status, m := postJSON(t, p.issuer+"/register", tc.body)
		desc, _ := m["error_description"].(string)
		if status != 400 || m["error"] != tc.code || !strings.HasPrefix(desc, tc.field) {
			t.Errorf("register %s: %d %v, want 400 %s naming %s", tc.body, status, m, tc.code, tc.field)
		}
	}
	p.store.clientsMu.RLock()
	n := len(p.store.clients)
	p.store.clientsMu.RUnlock()
	if n != 1 {
		t.Fatalf("%d clients after refused registrations, want only jobgate-cli", n)
	}
}

// TestTokenEndpointClientErrors: an unknown client is refused at the token
// endpoint with invalid_client (not a 500).
func TestTokenEndpointClientErrors(t *testing.T) {
	p := startIdP(t, "")
	d := p.discover(t)
	for name, form := range map[string]url.Values{
		"unknown client": {"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {"nope"}},
	} {
		resp, err := http.Post(d.TokenEndpoint, "application/x-www-form-urlencoded", bytes.NewBufferString(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode < 400 || (m["error"] != "invalid_client" && m["error"] != "unauthorized_client") {
			t.Errorf("%s: %s %v, want invalid_client", name, resp.Status, m)
		}
	}
}
