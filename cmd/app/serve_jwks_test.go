package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// TestServeJWKS runs ServeMain with --jwks-url against a local JWK Set and a
// Temporal address nobody listens on: a token signed by the identity
// provider's key passes authentication and reaches list_jobs (which then
// answers unavailable), while bad tokens get 401 with error="invalid_token".
func TestServeJWKS(t *testing.T) {
	const issuer = "https://idp.example"
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := jwkset.NewJWKFromKey(key.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "k1", ALG: jwkset.AlgEdDSA, USE: jwkset.UseSig}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	if err != nil {
		t.Fatal(err)
	}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(set)
	}))
	defer idp.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	config := func() ServeConfig {
		return withKeys(t, ServeConfig{
			Temporal: TemporalConfig{Address: dead, Namespace: "default", TaskQueue: "jobgate"},
			Listen:   "127.0.0.1:0", ResourceURI: "http://localhost/mcp", Issuer: issuer, JWKSURL: idp.URL,
			HandleKeys: "k1:" + strings.Repeat("ab", 32), ResumeKeys: "r1:" + strings.Repeat("cd", 32),
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &ServeMain{Config: config()}
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := "http://" + s.Addr() + "/mcp"

	token := func(m jwt.SigningMethod, k any, kid string, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(m, c)
		tok.Header["kid"] = kid
		out, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	claims := func(kv ...any) jwt.MapClaims {
		c := jwt.MapClaims{"iss": issuer, "aud": "http://localhost/mcp", "sub": "ana", "tenant": "acme",
			"exp": time.Now().Add(time.Hour).Unix(), "scope": "jobs:read"}
		for i := 0; i+1 < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	post := func(authorization, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	const listTools = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	const listJobs = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_jobs","arguments":{}}}`

	good := token(jwt.SigningMethodEdDSA, key, "k1", claims())
	if resp, body := post("Bearer "+good, listTools); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"list_jobs"`) {
		t.Fatalf("tools/list with an IdP token: %d %s", resp.StatusCode, body)
	}
	if resp, body := post("Bearer "+good, listJobs); resp.StatusCode != http.StatusOK || !strings.Contains(body, `\"code\":\"unavailable\"`) {
		t.Fatalf("list_jobs with an IdP token: %d %s", resp.StatusCode, body)
	}

	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"other key":                           token(jwt.SigningMethodEdDSA, other, "k1", claims()),
		"unknown kid":                         token(jwt.SigningMethodEdDSA, key, "k2", claims()),
		"wrong issuer":                        token(jwt.SigningMethodEdDSA, key, "k1", claims("iss", "https://evil.example")),
		"wrong audience":                      token(jwt.SigningMethodEdDSA, key, "k1", claims("aud", "http://elsewhere/mcp")),
		"expired":                             token(jwt.SigningMethodEdDSA, key, "k1", claims("exp", time.Now().Add(-time.Hour).Unix())),
		"HS256 with the public key as secret": token(jwt.SigningMethodHS256, []byte(key.Public().(ed25519.PublicKey)), "k1", claims()),
	} {
		resp, _ := post("Bearer "+bad, listTools)
		ch := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(ch, `Bearer error="invalid_token", resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp"`) {
			t.Errorf("%s: %d %q", name, resp.StatusCode, ch)
		}
	}
	// Without a token the challenge names no error (RFC 6750 §3.1).
	resp, _ := post("", listTools)
	if ch := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || strings.Contains(ch, "error=") || !strings.Contains(ch, "resource_metadata=") {
		t.Fatalf("no token: %d %q", resp.StatusCode, ch)
	}

	// RFC 9728 metadata names the issuer as the authorization server.
	mresp, err := http.Get("http://" + s.Addr() + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	err = json.NewDecoder(mresp.Body).Decode(&meta)
	mresp.Body.Close()
	if err != nil || meta.Resource != "http://localhost/mcp" || len(meta.AuthorizationServers) != 1 || meta.AuthorizationServers[0] != issuer {
		t.Fatalf("metadata %+v, %v", meta, err)
	}
}

func TestServeVerifierConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadJWKS := "http://" + ln.Addr().String() + "/jwks.json"
	ln.Close()
	for _, tc := range []struct {
		name string
		mod  func(*ServeConfig)
		want string
	}{
		// Neither: the JWK Set is discovered from --issuer (serve_discovery_test.go), which answers nothing here.
		{"neither", func(c *ServeConfig) { c.Issuer = strings.TrimSuffix(deadJWKS, "/jwks.json") },
			"--issuer " + strings.TrimSuffix(deadJWKS, "/jwks.json") + ": cannot discover its JWK Set"},
		{"both", func(c *ServeConfig) { c.JWKSURL, c.HS256SecretFile = deadJWKS, "/nonexistent" }, "exactly one of --jwks-url and --hs256-secret-file"},
		{"JWKS unreachable", func(c *ServeConfig) { c.JWKSURL = deadJWKS }, "cannot fetch the JWK Set at " + deadJWKS + " at start-up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ServeConfig{Listen: "127.0.0.1:0", ResourceURI: "http://localhost/mcp", Issuer: "https://idp.example",
				HandleKeys: "k1:" + strings.Repeat("ab", 32), ResumeKeys: "r1:" + strings.Repeat("cd", 32)}
			tc.mod(&c)
			s := &ServeMain{Config: c}
			err := s.Run(context.Background())
			defer s.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want %q", err, tc.want)
			}
		})
	}
}
