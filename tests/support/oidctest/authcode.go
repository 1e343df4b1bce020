package oidctest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// Token is what a client obtained from the token endpoint.
type Token struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	IDToken      string `json:"id_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
	Scope        string `json:"scope"`
}

// AuthCode runs the whole authorization code + PKCE flow for the public client clientID as
// subject, for resource ("" = the default) and scope, with redirectURI (one the client allows),
// and returns the token response: a test's quick way to a real token of this provider.
func (p *Provider) AuthCode(t testing.TB, clientID, redirectURI, subject, resource, scope string) Token {
	t.Helper()
	verifier := rand.Text() + rand.Text()
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"client_id":             {clientID},
		"response_type":         {"code"},
		"redirect_uri":          {redirectURI},
		"scope":                 {scope},
		"state":                 {rand.Text()},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}
	if resource != "" {
		q.Set("resource", resource)
	}
	back := p.Login(t, nil, p.Issuer+"/auth?"+q.Encode(), subject)
	bu, err := url.Parse(back)
	if err != nil {
		t.Fatal(err)
	}
	code := bu.Query().Get("code")
	if code == "" {
		t.Fatalf("oidctest: no code in the redirect %s", back)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirectURI},
		"client_id": {clientID}, "code_verifier": {verifier}}
	if resource != "" {
		form.Set("resource", resource)
	}
	resp, err := http.PostForm(p.Issuer+"/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("oidctest: token endpoint answered %d: %s", resp.StatusCode, b)
	}
	var tok Token
	if err := json.Unmarshal(b, &tok); err != nil {
		t.Fatal(err)
	}
	return tok
}
