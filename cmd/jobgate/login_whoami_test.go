package main

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLogoutOffline: with the IdP gone, logout still deletes the sign-in and says the
// revocation failed.
func TestLogoutOffline(t *testing.T) {
	store := isolate(t)
	tf := &tokenFile{Logins: []storedLogin{{Issuer: "http://127.0.0.1:1/oidc", Resource: "http://localhost:8080/mcp", URL: "http://localhost:8080/mcp",
		ClientID: defaultClientID, TokenEndpoint: "http://127.0.0.1:1/oidc/oauth/token", RevocationEndpoint: "http://127.0.0.1:1/oidc/revoke",
		AccessToken: "a", RefreshToken: "r", Expiry: time.Now().Add(time.Hour), SavedAt: time.Now()}}}
	if err := saveTokens(store, tf); err != nil {
		t.Fatal(err)
	}
	out := runOK(t, "logout", "--url", "http://LOCALHOST:8080/mcp/")
	if !strings.Contains(out, "revocation failed (") || !strings.Contains(out, "stored tokens deleted") || strings.Count(out, "\n") != 1 {
		t.Errorf("offline logout: %q", out)
	}
	if got := readStore(t, store); len(got.Logins) != 0 {
		t.Fatalf("offline logout kept %+v", got.Logins)
	}
	if out := runOK(t, "logout", "--url", "http://localhost:8080/mcp"); !strings.Contains(out, "Not signed in") {
		t.Errorf("second logout: %q", out)
	}
}

// TestWhoamiCleansClaims: whoami shows claims of a token it has not verified; control
// characters in them are not written to the terminal.
func TestWhoamiCleansClaims(t *testing.T) {
	isolate(t)
	claims, _ := json.Marshal(map[string]any{"iss": "https://i\x1b[2J", "sub": "ana\x1b]0;pwned\x07", "tenant": "acme\r", "exp": time.Now().Add(time.Hour).Unix()})
	t.Setenv("JOBGATE_TOKEN", "e30."+base64.RawURLEncoding.EncodeToString(claims)+".sig")
	out := runOK(t, "whoami", "--url", "http://127.0.0.1:1/mcp")
	if strings.ContainsAny(out, "\x1b\x07\r") || !strings.Contains(out, "subject:  ana ]0;pwned\n") {
		t.Fatalf("whoami printed claims raw:\n%q", out)
	}
}
