package devidp

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"
)

// TestPKCEPlainRefused: discovery says S256 only, so a plain (or method-less, which RFC 7636
// reads as plain) code challenge is refused at authorize, and a code bound to one is never
// redeemed at the token endpoint. Before the fix, authorize sent the browser to the picker and
// the token endpoint redeemed the plain verifier.
func TestPKCEPlainRefused(t *testing.T) {
	p := startIdP(t, "")
	d := p.discover(t)
	if strings.Join(d.CodeChallengeMethods, ",") != "S256" {
		t.Fatalf("code_challenge_methods_supported = %v, want [S256]", d.CodeChallengeMethods)
	}
	cfg := oauthConfig(d, "jobs:read")
	verifier := oauth2.GenerateVerifier()
	for _, method := range []string{"plain", ""} {
		opts := []oauth2.AuthCodeOption{oauth2.SetAuthURLParam("code_challenge", verifier)}
		if method != "" {
			opts = append(opts, oauth2.SetAuthURLParam("code_challenge_method", method))
		}
		loc := location(t, d.AuthorizationEndpoint, get(t, browser(), cfg.AuthCodeURL("s", opts...)))
		u, _ := url.Parse(loc)
		if !strings.HasPrefix(loc, redirectURI+"?") || u.Query().Get("error") != "invalid_request" ||
			!strings.Contains(u.Query().Get("error_description"), "code_challenge_method") {
			t.Fatalf("authorize with code_challenge_method %q sent the browser to %s, want %s?error=invalid_request naming code_challenge_method", method, loc, redirectURI)
		}
	}

	// A method without a challenge is no PKCE at all.
	loc := location(t, d.AuthorizationEndpoint, get(t, browser(), cfg.AuthCodeURL("s", oauth2.SetAuthURLParam("code_challenge_method", "S256"))))
	if u, _ := url.Parse(loc); u.Query().Get("error") != "invalid_request" || !strings.HasPrefix(u.Query().Get("error_description"), "code_challenge") {
		t.Fatalf("authorize with code_challenge_method S256 and no code_challenge sent the browser to %s, want invalid_request naming code_challenge", loc)
	}

	// The token endpoint refuses a plain challenge too, should one ever be stored.
	a := &authRequest{id: "plain-req", clientID: CLIClientID, redirectURI: redirectURI, scopes: []string{"jobs:read"},
		responseType: oidc.ResponseTypeCode, audience: p.store.audience(CLIClientID), created: time.Now(),
		challenge: &oidc.CodeChallenge{Challenge: verifier, Method: oidc.CodeChallengeMethodPlain},
		subject:   "ana", authTime: time.Now(), done: true}
	p.store.mu.Lock()
	p.store.authReqs[a.id], p.store.codes["plain-code"] = a, a.id
	p.store.mu.Unlock()
	resp, err := http.PostForm(d.TokenEndpoint, url.Values{"grant_type": {"authorization_code"}, "code": {"plain-code"},
		"redirect_uri": {redirectURI}, "client_id": {CLIClientID}, "code_verifier": {verifier}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("token endpoint redeemed a code with a plain challenge: %s, want 400 invalid_grant", resp.Status)
	}
}
