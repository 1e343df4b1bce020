package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/jobgate/jobgate/authz"
)

// deadAddr is a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// TestServeDiscoversJWKS: with --issuer and neither --jwks-url nor --hs256-secret-file, serve
// takes jwks_uri from the issuer's OpenID Connect discovery document, or else from its RFC 8414
// metadata (path inserted after /.well-known), and verifies that IdP's tokens; a metadata
// document that is not the issuer's own, or names no usable jwks_uri, and an issuer that does
// not answer, each fail start-up with one line.
func TestServeDiscoversJWKS(t *testing.T) {
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
	mux := http.NewServeMux()
	idp := httptest.NewServer(mux)
	defer idp.Close()
	doc := func(v map[string]any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(set) })
	// An OpenID Provider at the root; an RFC 8414-only server with a path (its OIDC location 404s).
	mux.Handle("GET /.well-known/openid-configuration", doc(map[string]any{"issuer": idp.URL, "jwks_uri": idp.URL + "/jwks"}))
	mux.Handle("GET /.well-known/oauth-authorization-server/as", doc(map[string]any{"issuer": idp.URL + "/as", "jwks_uri": idp.URL + "/jwks"}))
	// Broken ones.
	mux.Handle("GET /wrong/.well-known/openid-configuration", doc(map[string]any{"issuer": "https://evil.example", "jwks_uri": idp.URL + "/jwks"}))
	mux.Handle("GET /nojwks/.well-known/openid-configuration", doc(map[string]any{"issuer": idp.URL + "/nojwks"}))
	mux.Handle("GET /relative/.well-known/openid-configuration", doc(map[string]any{"issuer": idp.URL + "/relative", "jwks_uri": "/jwks"}))
	mux.HandleFunc("GET /html/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<html>\nnot\nmetadata</html>")
	})
	dead := "http://" + deadAddr(t)

	config := func(issuer string) ServeConfig {
		return withKeys(t, ServeConfig{
			Temporal: TemporalConfig{Address: deadAddr(t), Namespace: "default", TaskQueue: "jobgate"},
			Listen:   "127.0.0.1:0", ResourceURI: "http://localhost/mcp", Issuer: issuer,
			HandleKeys: "k1:" + strings.Repeat("ab", 32), ResumeKeys: "r1:" + strings.Repeat("cd", 32),
		})
	}
	for _, issuer := range []string{idp.URL, idp.URL + "/as"} {
		t.Run("ok "+strings.TrimPrefix(issuer, idp.URL), func(t *testing.T) {
			s := &ServeMain{Config: config(issuer)}
			if err := s.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": issuer, "aud": "http://localhost/mcp", "sub": "ana",
				"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix(), "scope": "jobs:read"})
			tok.Header["kid"] = "k1"
			good, err := tok.SignedString(key)
			if err != nil {
				t.Fatal(err)
			}
			for token, want := range map[string]int{good: http.StatusOK, good + "x": http.StatusUnauthorized} {
				req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr()+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("MCP-Protocol-Version", "2025-06-18")
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Fatalf("tools/list: %d, want %d", resp.StatusCode, want)
				}
			}
		})
	}
	// Entra ID's scp is a space-separated string: read with --scope-claim scp, list_jobs passes
	// the scope check (and reaches the unreachable Temporal); by default it is refused.
	t.Run("scope claim scp", func(t *testing.T) {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": idp.URL, "aud": "http://localhost/mcp", "sub": "ana",
			"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix(), "scp": "jobs:read jobs:write"})
		tok.Header["kid"] = "k1"
		entra, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		for claim, want := range map[string]string{"scp": `\"code\":\"unavailable\"`, "": "401"} {
			c := config(idp.URL)
			c.ScopeClaim = claim
			s := &ServeMain{Config: c}
			if err := s.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr()+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_jobs","arguments":{}}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
			req.Header.Set("Authorization", "Bearer "+entra)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			s.Close()
			if got := strconv.Itoa(resp.StatusCode) + " " + string(b); !strings.Contains(got, want) {
				t.Errorf("--scope-claim %q: %s, want %s", claim, got, want)
			}
		}
	})
	for _, tc := range []struct{ issuer, want string }{
		{dead, "--issuer " + dead + ": cannot discover its JWK Set (" + dead + "/.well-known/openid-configuration: dial tcp"},
		{idp.URL + "/none", "/.well-known/openid-configuration: HTTP 404; " + idp.URL + "/.well-known/oauth-authorization-server/none: HTTP 404); give --jwks-url"},
		{idp.URL + "/wrong", `/wrong/.well-known/openid-configuration: "issuer" is "https://evil.example", not "` + idp.URL + `/wrong"`},
		{idp.URL + "/nojwks", `: no "jwks_uri"`},
		{idp.URL + "/relative", `"jwks_uri" "/jwks" is not an absolute http(s) URL`},
		{idp.URL + "/html", "not a JSON object"},
		{"http://idp.example", "needs https (http only for a loopback host); give --jwks-url"},
		{"https://idp.example/?tenant=a", "is not an http(s) URL without query"},
	} {
		t.Run("refused "+tc.issuer, func(t *testing.T) {
			s := &ServeMain{Config: config(tc.issuer)}
			err := s.Run(context.Background())
			defer s.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("Run: %v\nwant one line with %q", err, tc.want)
			}
		})
	}
}

// TestServeMounts: Mounts are served beside the frontend's routes on the same listener; a
// conflicting or nil mount fails Run instead of panicking.
func TestServeMounts(t *testing.T) {
	config := withKeys(t, ServeConfig{
		Temporal: TemporalConfig{Address: deadAddr(t), Namespace: "default", TaskQueue: "jobgate"},
		Listen:   "127.0.0.1:0", ResourceURI: "http://localhost/mcp", Issuer: "http://localhost/oidc",
		HandleKeys: "k1:" + strings.Repeat("ab", 32), ResumeKeys: "r1:" + strings.Repeat("cd", 32),
	})
	idp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "idp "+r.URL.Path) })
	s := &ServeMain{Config: config, Verifier: &authz.LateVerifier{}, Mounts: map[string]http.Handler{
		"/oidc/": idp, "/.well-known/oauth-authorization-server/oidc": idp}}
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	get := func(p string) (int, string) {
		resp, err := http.Get("http://" + s.Addr() + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for p, want := range map[string]string{
		"/oidc/keys": "idp /oidc/keys",
		"/.well-known/oauth-authorization-server/oidc": "idp /.well-known/oauth-authorization-server/oidc",
		"/healthz": "ok\n",
	} {
		if code, body := get(p); code != http.StatusOK || body != want {
			t.Errorf("GET %s: %d %q, want %q", p, code, body, want)
		}
	}
	var prm struct {
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if code, body := get("/.well-known/oauth-protected-resource/mcp"); code != http.StatusOK || json.Unmarshal([]byte(body), &prm) != nil ||
		len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != "http://localhost/oidc" {
		t.Errorf("PRM: %d %s", code, body)
	}
	// /mcp is still the frontend's: no token, 401 with the RFC 9728 challenge.
	resp, err := http.Post("http://"+s.Addr()+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Errorf("POST /mcp: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	for name, tc := range map[string]struct {
		mounts map[string]http.Handler
		want   string
	}{
		"the frontend's /":  {map[string]http.Handler{"/": idp}, `ServeMain.Mounts["/"]: `},
		"a nil handler":     {map[string]http.Handler{"/oidc/": nil}, `ServeMain.Mounts["/oidc/"] is nil`},
		"a bad pattern":     {map[string]http.Handler{"GET": idp}, `ServeMain.Mounts["GET"]: `},
		"two for one thing": {map[string]http.Handler{"/a/": idp, "GET /a/": idp, "/a/{x}": idp}, `ServeMain.Mounts[`},
	} {
		s := &ServeMain{Config: config, Verifier: &authz.LateVerifier{}, Mounts: tc.mounts}
		err := s.Run(context.Background())
		s.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Run: %v, want %q", name, err, tc.want)
		}
	}
}

// FuzzParseDiscovery: any metadata document, for any issuer, gives a jwks_uri only when the
// document is that issuer's own and the URI is an absolute http(s) URL, else a one-line error;
// never a panic.
func FuzzParseDiscovery(f *testing.F) {
	for _, s := range [][2]string{
		{`{"issuer":"https://idp.example","jwks_uri":"https://idp.example/keys"}`, "https://idp.example"},
		{`{"issuer":"https://idp.example/realms/a","jwks_uri":"https://idp.example/realms/a/protocol/openid-connect/certs","registration_endpoint":"x"}`, "https://idp.example/realms/a"},
		{`{"issuer":"https://idp.example","jwks_uri":"/keys"}`, "https://idp.example"},
		{`{"issuer":"https://evil.example","jwks_uri":"https://evil.example/keys"}`, "https://idp.example"},
		{`{"issuer":null,"jwks_uri":"https://idp.example/keys"}`, "https://idp.example"},
		{`{"issuer":"https://idp.example","jwks_uri":""}`, "https://idp.example"},
		{`{"issuer":"https://idp.example","jwks_uri":"javascript:alert(1)"}`, "https://idp.example"},
		{`{"issuer":"https://idp.example","jwks_uri":7}`, "https://idp.example"},
		{`[]`, ""},
		{"<html>\n</html>", "https://idp.example"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, body, issuer string) {
		j, err := parseDiscovery([]byte(body), issuer)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			return
		}
		var d struct {
			Issuer string `json:"issuer"`
		}
		if json.Unmarshal([]byte(body), &d) != nil || d.Issuer != issuer {
			t.Fatalf("accepted the metadata of issuer %q for %q", d.Issuer, issuer)
		}
		u, perr := url.Parse(j)
		if perr != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			t.Fatalf("accepted jwks_uri %q", j)
		}
	})
}
