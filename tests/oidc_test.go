package tests

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/tests/support/oidctest"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/tests/support/webclient"
)

// loginIdP is an OpenID Provider under test, as jobgate and a human see it.
type loginIdP struct {
	issuer, jwksURL string
	// login acts as the human at authorizeURL: signs in as sub, consents, and returns the URL
	// the provider sends the browser back to (the client's redirect URI with code and state).
	login func(t *testing.T, authorizeURL, sub string) string
	// token is a real access token of sub for the resource (authorization code + PKCE).
	token func(t *testing.T, sub string) string
}

// oidcIdPs are the providers every login test runs against, each as a stack: the IdP and a
// jobgate MCP endpoint (its resource URI) that trusts it. The npm oidc-provider (OpenID
// Certified, a separate process) and frontend/devidp (zitadel/oidc pkg/op), here mounted by hand
// on a server of its own, each beside a frontend built by oidcStack. `jobgate dev` serves devidp
// at <listen>/oidc and trusts it itself: its row starts dev and returns its IdP and /mcp.
var oidcIdPs = []struct {
	name  string
	stack func(t *testing.T) (idp loginIdP, resource string)
}{
	{"oidc-provider", func(t *testing.T) (loginIdP, string) { return oidcStack(t, startOIDCProvider) }},
	{"devidp", func(t *testing.T) (loginIdP, string) { return oidcStack(t, startDevIdP) }},
	{"jobgate-dev", devOIDCStack},
}

// devOIDCStack is the built `jobgate dev --ephemeral` binary as a process: its identity
// provider at <listen>/oidc (the picker driven by formLogin, the pre-registered public client
// jobgate-cli for the quick token) and its own /mcp, which trusts that provider's JWK Set.
func devOIDCStack(t *testing.T) (loginIdP, string) {
	mcpURL, issuer, _ := startDevProcess(t)
	d := discoveryOf(t, issuer)
	l := loginIdP{issuer: issuer, jwksURL: d["jwks_uri"].(string)}
	l.login = func(t *testing.T, authorizeURL, sub string) string { return formLogin(t, issuer, authorizeURL, sub) }
	l.token = func(t *testing.T, sub string) string {
		return pkceToken(t, d, "jobgate-cli", "http://127.0.0.1:4321/callback", "openid jobs:read jobs:write", mcpURL,
			func(u string) string { return l.login(t, u, sub) })
	}
	return l, mcpURL
}

// oidcUsers are the dev principals (tests/harness_test.go), plus nobody: a user whose tokens
// carry no tenant claim (oidc-provider only).
func oidcUsers() []oidctest.User {
	var us []oidctest.User
	for _, p := range []principal{ana, bo, steward, ops, gus} {
		us = append(us, oidctest.User{Sub: p.sub, Tenant: p.tenant, Scopes: authz.ScopeStrings(p.scopes)})
	}
	return append(us, oidctest.User{Sub: "nobody", Scopes: []string{"jobs:read"}})
}

const oidcOtherResource = "http://127.0.0.1:1/elsewhere/mcp"

func startOIDCProvider(t *testing.T, resource string) loginIdP {
	p := oidctest.Start(t, oidctest.Config{Resource: resource, OtherResources: []string{oidcOtherResource},
		Users: oidcUsers(), Clients: []oidctest.Client{oidctest.PublicClient("jobgate-cli")}})
	return loginIdP{
		issuer: p.Issuer, jwksURL: p.JWKSURL,
		login: func(t *testing.T, authorizeURL, sub string) string { return p.Login(t, nil, authorizeURL, sub) },
		token: func(t *testing.T, sub string) string {
			return p.AuthCode(t, "jobgate-cli", "http://127.0.0.1:4321/callback", sub, "", "openid jobs:read jobs:write").AccessToken
		},
	}
}

func startDevIdP(t *testing.T, resource string) loginIdP {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	issuer := "http://" + ln.Addr().String() + "/oidc"
	var users []devidp.User
	for _, p := range []principal{ana, bo, steward, ops, gus} {
		users = append(users, devidp.User{Subject: p.sub, Tenant: p.tenant, Scopes: p.scopes})
	}
	idp, err := devidp.New(devidp.Options{Issuer: issuer, Resource: resource, Users: users})
	must(t, err)
	srv := &http.Server{Handler: idp.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	d := discoveryOf(t, issuer)
	l := loginIdP{issuer: issuer, jwksURL: d["jwks_uri"].(string)}
	l.login = func(t *testing.T, authorizeURL, sub string) string { return formLogin(t, issuer, authorizeURL, sub) }
	l.token = func(t *testing.T, sub string) string {
		return pkceToken(t, d, "jobgate-cli", "http://127.0.0.1:4321/callback", "openid jobs:read jobs:write", resource,
			func(u string) string { return l.login(t, u, sub) })
	}
	return l
}

func discoveryOf(t *testing.T, issuer string) map[string]any {
	t.Helper()
	resp, err := http.Get(issuer + "/.well-known/openid-configuration")
	must(t, err)
	defer resp.Body.Close()
	var d map[string]any
	must(t, json.NewDecoder(resp.Body).Decode(&d))
	if d["issuer"] != issuer {
		t.Fatalf("discovery of %s names issuer %v", issuer, d["issuer"])
	}
	return d
}

var (
	oidcFormRe  = regexp.MustCompile(`(?is)<form[^>]*\baction="([^"]*)"[^>]*>(.*?)</form>`)
	oidcInputRe = regexp.MustCompile(`(?is)<input\b[^>]*\bname="([^"]*)"[^>]*\bvalue="([^"]*)"`)
)

// formLogin is the devidp picker driven without a browser: follow the provider's redirects
// with a cookie jar, post the picker form (its hidden fields plus user=sub), and stop at the
// redirect that leaves the issuer.
func formLogin(t *testing.T, issuer, authorizeURL, sub string) string {
	t.Helper()
	base, err := url.Parse(issuer)
	must(t, err)
	onIdP := func(u *url.URL) bool { return u.Host == base.Host }
	hc := webclient.New(onIdP)
	resp, err := hc.Get(authorizeURL)
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := oidcFormRe.FindStringSubmatch(string(body))
	if m == nil {
		t.Fatalf("no login form at %s (%d):\n%s", resp.Request.URL, resp.StatusCode, body)
	}
	form := url.Values{"user": {sub}}
	for _, in := range oidcInputRe.FindAllStringSubmatch(m[2], -1) {
		form.Set(html.UnescapeString(in[1]), html.UnescapeString(in[2]))
	}
	action, err := resp.Request.URL.Parse(html.UnescapeString(m[1]))
	must(t, err)
	resp, err = hc.PostForm(action.String(), form)
	must(t, err)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode < 300 || resp.StatusCode >= 400 || loc == "" {
		t.Fatalf("login as %s did not redirect back to the client: %d at %s", sub, resp.StatusCode, resp.Request.URL)
	}
	back, err := resp.Request.URL.Parse(loc)
	must(t, err)
	return back.String()
}

// pkceToken runs authorization code + PKCE for a public client through login and returns the
// access token.
func pkceToken(t *testing.T, d map[string]any, clientID, redirectURI, scope, resource string, login func(string) string) string {
	t.Helper()
	verifier := randHex(32)
	q := url.Values{"client_id": {clientID}, "response_type": {"code"}, "redirect_uri": {redirectURI}, "scope": {scope},
		"state": {"st"}, "code_challenge": {oidcS256(verifier)}, "code_challenge_method": {"S256"}, "resource": {resource}}
	back, err := url.Parse(login(d["authorization_endpoint"].(string) + "?" + q.Encode()))
	must(t, err)
	code := back.Query().Get("code")
	if code == "" {
		t.Fatalf("no code in %s", back)
	}
	resp, err := http.PostForm(d["token_endpoint"].(string), url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {redirectURI}, "client_id": {clientID}, "code_verifier": {verifier}, "resource": {resource}})
	must(t, err)
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &tok) != nil || tok.AccessToken == "" {
		t.Fatalf("token endpoint: %d %s", resp.StatusCode, b)
	}
	return tok.AccessToken
}

// oidcServe is a real frontend (no worker: the tests only list) that verifies tokens through
// the JWKS path of production, --issuer and --jwks-url naming idp, on ln.
func oidcServe(t *testing.T, ln net.Listener, resource, issuer, jwksURL string) *app.ServeMain {
	t.Helper()
	key := handle.GenerateKey()
	keys, err := handle.NewKeyring("t1", map[string][]byte{"t1": key})
	must(t, err)
	rkey := handle.GenerateKey()
	rkeys, err := handle.NewKeyring("r1", map[string][]byte{"r1": rkey})
	must(t, err)
	u := authz.Unlimited()
	s := &app.ServeMain{
		Config: app.ServeConfig{
			Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace, TaskQueue: "tq-" + randHex(6),
				Payloads: testPayloadKEK(t)},
			ResourceURI: resource, Issuer: issuer, JWKSURL: jwksURL, Tenants: &u,
			ArtifactsURL: "file://" + t.TempDir() + "/artifacts", SigningKeys: "s1:" + handle.GenerateSigningSeedHex(),
		},
		Logger: zap.NewNop(), Keys: keys, ResumeKeys: rkeys, Listener: ln,
	}
	must(t, s.Run(context.Background()))
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// oidcStack is an IdP and a frontend whose resource URI is its real address, as an MCP
// client checks (the protected-resource metadata's resource must be the URL it connects to).
func oidcStack(t *testing.T, start func(*testing.T, string) loginIdP) (loginIdP, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	resource := "http://" + ln.Addr().String() + "/mcp"
	idp := start(t, resource)
	oidcServe(t, ln, resource, idp.issuer, idp.jwksURL)
	return idp, resource
}

// TestOIDCMCPClientLogsIn: the official TypeScript MCP SDK client (tests/tsclient/oauth.mjs)
// logs itself in against each IdP: 401 → protected-resource metadata → the IdP's metadata →
// dynamic client registration → authorize (PKCE S256, resource) → the test signs in as ana →
// code exchange → list_jobs succeeds through jobgate's JWKS verification of the IdP's token.
func TestOIDCMCPClientLogsIn(t *testing.T) {
	testenv.Heavy(t, "runs an OpenID Provider and the TypeScript MCP client on Node.js")
	node := tsNeed(t, "node")
	if _, err := os.Stat(filepath.Join(tsClientDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		npmCI(t, tsNeed(t, "npm"), tsClientDir, 5*time.Minute)
	}
	for _, row := range oidcIdPs {
		t.Run(row.name, func(t *testing.T) {
			idp, resource := row.stack(t)
			origin := strings.TrimSuffix(resource, "/mcp")

			// The metadata names the IdP, the first thing an MCP client reads.
			resp, err := http.Get(origin + "/.well-known/oauth-protected-resource/mcp")
			must(t, err)
			var prm struct {
				Resource             string   `json:"resource"`
				AuthorizationServers []string `json:"authorization_servers"`
			}
			must(t, json.NewDecoder(resp.Body).Decode(&prm))
			resp.Body.Close()
			if prm.Resource != resource || len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != idp.issuer {
				t.Fatalf("protected-resource metadata %+v, want resource %s and authorization_servers [%s]", prm, resource, idp.issuer)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "oauth.mjs")
			cmd.Dir = tsClientDir
			cmd.Env = append(os.Environ(), "JOBGATE_URL="+resource)
			cmd.WaitDelay = 5 * time.Second
			stdin, err := cmd.StdinPipe()
			must(t, err)
			stdout, err := cmd.StdoutPipe()
			must(t, err)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			must(t, cmd.Start())
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64*1024), 1024*1024)
			next := func(want string) json.RawMessage {
				t.Helper()
				for sc.Scan() {
					t.Logf("oauth.mjs: %s", sc.Text())
					var m map[string]json.RawMessage
					if json.Unmarshal(sc.Bytes(), &m) != nil {
						continue
					}
					if e, ok := m["error"]; ok {
						t.Fatalf("oauth.mjs failed: %s\nstderr:\n%s", e, stderr.String())
					}
					if v, ok := m[want]; ok {
						return v
					}
				}
				t.Fatalf("oauth.mjs ended before a %q line: %v\nstderr:\n%s", want, sc.Err(), stderr.String())
				return nil
			}

			var reg struct {
				ClientID string `json:"client_id"`
			}
			must(t, json.Unmarshal(next("registered"), &reg))
			if reg.ClientID == "" {
				t.Fatal("dynamic client registration gave no client_id")
			}
			var authorize string
			must(t, json.Unmarshal(next("authorize"), &authorize))
			au, err := url.Parse(authorize)
			must(t, err)
			q := au.Query()
			d := discoveryOf(t, idp.issuer)
			if got := au.Scheme + "://" + au.Host + au.Path; got != d["authorization_endpoint"] {
				t.Errorf("authorize at %s, want the IdP's %v", got, d["authorization_endpoint"])
			}
			for k, want := range map[string]string{"client_id": reg.ClientID, "code_challenge_method": "S256", "resource": resource, "response_type": "code"} {
				if q.Get(k) != want {
					t.Errorf("authorize %s=%q, want %q", k, q.Get(k), want)
				}
			}

			back := idp.login(t, authorize, ana.sub)
			_, err = fmt.Fprintln(stdin, back)
			must(t, err)

			var listed struct {
				Jobs []json.RawMessage `json:"jobs"`
			}
			raw := next("list_jobs")
			must(t, json.Unmarshal(raw, &listed))
			if listed.Jobs == nil {
				t.Errorf("list_jobs answered %s, want a jobs array", raw)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("oauth.mjs: %v\nstderr:\n%s", err, stderr.String())
			}
		})
	}
}

// TestOIDCJWKSVerification: the MCP endpoint verifies each IdP's access tokens through the JWKS
// path of production, and refuses with a clear reason oidc-provider's token without a tenant
// claim and its token for another resource (aud).
func TestOIDCJWKSVerification(t *testing.T) {
	testenv.Heavy(t, "runs an OpenID Provider")
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_jobs","arguments":{}}}`
	for _, row := range oidcIdPs {
		t.Run(row.name, func(t *testing.T) {
			idp, resource := row.stack(t)
			resp, body := postMCP(t, http.DefaultClient, resource, "Bearer "+idp.token(t, ana.sub), list)
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"jobs"`) {
				t.Fatalf("ana's token: %d %s", resp.StatusCode, body)
			}
			resp, body = postMCP(t, http.DefaultClient, resource, "Bearer "+idp.token(t, gus.sub), list)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("gus's token: %d %s", resp.StatusCode, body)
			}
		})
	}
	t.Run("oidc-provider/refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		resource := "http://" + ln.Addr().String() + "/mcp"
		p := oidctest.Start(t, oidctest.Config{Resource: resource, OtherResources: []string{oidcOtherResource},
			Users: oidcUsers(), Clients: []oidctest.Client{oidctest.PublicClient("jobgate-cli")}})
		oidcServe(t, ln, resource, p.Issuer, p.JWKSURL)
		for _, c := range []struct{ name, sub, resource, reason string }{
			{"no tenant claim", "nobody", "", `missing "tenant" (tenant) claim`},
			{"another resource", ana.sub, oidcOtherResource, "audience does not include this server"},
		} {
			tok := p.AuthCode(t, "jobgate-cli", "http://127.0.0.1:4321/callback", c.sub, c.resource, "jobs:read").AccessToken
			resp, body := postMCP(t, http.DefaultClient, resource, "Bearer "+tok, list)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, c.reason) {
				t.Errorf("%s: %d %q, want 401 with %q", c.name, resp.StatusCode, body, c.reason)
			}
			if ch := resp.Header.Get("WWW-Authenticate"); !strings.Contains(ch, `error="invalid_token"`) {
				t.Errorf("%s: challenge %q lacks invalid_token", c.name, ch)
			}
		}
	})
}

// oidcS256 is the PKCE S256 challenge of verifier (RFC 7636).
func oidcS256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
