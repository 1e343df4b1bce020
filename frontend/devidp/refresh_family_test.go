package devidp

import (
	"context"
	"testing"

	"golang.org/x/oauth2"
)

// TestRefreshReuseRevokesFamily: presenting a refresh token that was already rotated is a sign
// it leaked (OAuth 2.1 §4.3.1, RFC 9700 §4.14): the reuse gets invalid_grant and the whole family
// descended from the same sign-in is revoked, so the newest token (the thief's or the owner's)
// is refused too, across a restart as well. Another sign-in's family is untouched. Before the fix
// the newest token kept refreshing.
func TestRefreshReuseRevokesFamily(t *testing.T) {
	dir := t.TempDir()
	p := startIdP(t, dir)
	cfg := oauthConfig(p.discover(t), "jobs:read")
	ctx := context.Background()
	signIn := func() *oauth2.Token {
		pkce := oauth2.GenerateVerifier()
		code := p.login(t, cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce)), "ana", "s")
		tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(pkce))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	first, other := signIn(), signIn()
	second, err := refresh(ctx, cfg, first.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	newest, err := refresh(ctx, cfg, second.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := refresh(ctx, cfg, first.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("reuse of a rotated refresh token: %v, want invalid_grant", err)
	}
	if _, err := refresh(ctx, cfg, newest.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("the family's newest refresh token after a reuse: %v, want invalid_grant (the family is revoked)", err)
	}
	// The revocation is on disk: a restart does not bring the family back.
	p2 := startIdP(t, dir)
	cfg2 := oauthConfig(p2.discover(t), "jobs:read")
	if _, err := refresh(ctx, cfg2, newest.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("after a restart, the revoked family's newest token: %v, want invalid_grant", err)
	}
	if _, err := refresh(ctx, cfg2, other.RefreshToken); err != nil {
		t.Fatalf("another sign-in's refresh token: %v (only the reused family is revoked)", err)
	}
}
