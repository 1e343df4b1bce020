package oidctest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// Dir is tests/oidcidp, the Node project with idp.mjs, found from this file's place in the module.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "oidcidp")
}

func ensureDeps(t testing.TB, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "oidc-provider", "package.json")); err == nil {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Missing(t, "tests/oidcidp/node_modules is not installed and npm is not on PATH: run npm ci in tests/oidcidp")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in tests/oidcidp: %v\n%s", err, out)
	}
}

// fileConfig is the JSON idp.mjs reads (see the comment at its top).
func (c Config) fileConfig() map[string]any {
	users := []map[string]any{}
	for _, u := range c.Users {
		claims := map[string]any{}
		for k, v := range u.Claims {
			claims[k] = v
		}
		if u.Tenant != "" {
			claims["tenant"] = u.Tenant
		}
		users = append(users, map[string]any{"sub": u.Sub, "scopes": nonNil(u.Scopes), "claims": claims})
	}
	clients := []map[string]any{}
	noPKCE := []string{}
	for _, cl := range c.Clients {
		if cl.NoPKCE && cl.Secret != "" {
			noPKCE = append(noPKCE, cl.ID)
		}
		gt := cl.GrantTypes
		if len(gt) == 0 {
			gt = []string{"authorization_code", "refresh_token", GrantDeviceCode}
		}
		m := map[string]any{
			"client_id":      cl.ID,
			"redirect_uris":  nonNil(cl.RedirectURIs),
			"grant_types":    gt,
			"response_types": []string{"code"},
		}
		if cl.Secret == "" {
			m["token_endpoint_auth_method"] = "none"
		} else {
			m["client_secret"] = cl.Secret
			m["token_endpoint_auth_method"] = "client_secret_basic"
		}
		if cl.Native {
			m["application_type"] = "native"
		}
		if len(cl.PostLogoutRedirectURIs) > 0 {
			m["post_logout_redirect_uris"] = cl.PostLogoutRedirectURIs
		}
		clients = append(clients, m)
	}
	out := map[string]any{
		"resources": append([]string{c.Resource}, c.OtherResources...),
		"users":     users,
		"clients":   clients,
		// Only confidential clients: idp.mjs requires PKCE of every public one regardless.
		"pkce_optional_clients": noPKCE,
	}
	if c.AccessTokenTTL > 0 {
		out["access_token_ttl"] = int(c.AccessTokenTTL / time.Second)
	}
	if c.DeviceCodeTTL > 0 {
		out["device_code_ttl"] = int(c.DeviceCodeTTL / time.Second)
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
