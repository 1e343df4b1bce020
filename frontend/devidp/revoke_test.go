package devidp

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"golang.org/x/oauth2"
)

// TestRevokeRefreshToken: RFC 7009 revocation (what `jobgate logout` calls)
// kills the refresh token; another client cannot revoke it.
func TestRevokeRefreshToken(t *testing.T) {
	p := startIdP(t, t.TempDir())
	d := p.discover(t)
	cfg := oauthConfig(d, "jobs:read")
	pkce := oauth2.GenerateVerifier()
	code := p.login(t, cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce)), "ana", "s")
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	revoke := func(clientID string) int {
		resp, err := http.PostForm(p.issuer+"/revoke", url.Values{"token": {tok.RefreshToken}, "token_type_hint": {"refresh_token"}, "client_id": {clientID}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	status, m := postJSON(t, p.issuer+"/register", `{"redirect_uris":["http://127.0.0.1/cb"]}`)
	if status != http.StatusCreated {
		t.Fatalf("register: %d %v", status, m)
	}
	if got := revoke(m["client_id"].(string)); got == http.StatusOK {
		t.Fatal("another client revoked ana's refresh token")
	}
	if got := revoke(CLIClientID); got != http.StatusOK {
		t.Fatalf("revoke: %d", got)
	}
	if _, err := refresh(context.Background(), cfg, tok.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("refresh after revocation: %v, want invalid_grant", err)
	}
}
