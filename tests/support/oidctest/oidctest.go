package oidctest

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// GrantDeviceCode is the device authorization grant type (RFC 8628).
const GrantDeviceCode = "urn:ietf:params:oauth:grant-type:device_code"

// User is one account of the provider. The login page lists them by Sub.
type User struct {
	Sub string
	// Tenant becomes the "tenant" claim; empty means the user's tokens have no tenant claim.
	Tenant string
	// Scopes are the resource scopes the user may be granted (e.g. jobs:read).
	Scopes []string
	// Claims are further claims for the access and ID tokens (name, email, or a tenant claim
	// under another name).
	Claims map[string]any
}

// Client is an oidc-provider client registration.
type Client struct {
	ID string
	// Secret empty means a public client (token_endpoint_auth_method none, PKCE).
	Secret       string
	RedirectURIs []string
	// GrantTypes default to authorization_code, refresh_token and the device code grant.
	GrantTypes []string
	// Native (application_type native): http loopback redirect URIs match on any port (RFC 8252).
	Native bool
	// PostLogoutRedirectURIs are where RP-initiated logout (/session/end) may send the browser
	// back to; none: the provider refuses a post_logout_redirect_uri.
	PostLogoutRedirectURIs []string
	// NoPKCE lets this confidential client (Secret set) redeem codes without PKCE, which the
	// provider otherwise requires of every client: Temporal's ui-server (v2.55) sends none.
	NoPKCE bool
}

// PublicClient is a native public client with a loopback redirect on any port, allowed the
// code, refresh and device grants: what a CLI registers.
func PublicClient(id string) Client {
	return Client{ID: id, Native: true, RedirectURIs: []string{"http://127.0.0.1/callback", "http://localhost/callback"}}
}

// Config is what the provider is started with.
type Config struct {
	// Resource is the resource indicator (RFC 8707) its access tokens are for by default: the
	// aud of every JWT access token. Required.
	Resource string
	// OtherResources are further resource indicators it issues tokens for (a client asks with
	// resource=…): tokens a jobgate serving Resource must refuse.
	OtherResources []string
	Users          []User
	Clients        []Client
	// AccessTokenTTL and DeviceCodeTTL default to 10 minutes.
	AccessTokenTTL, DeviceCodeTTL time.Duration
}

// Provider is one running oidc-provider process.
type Provider struct {
	// Issuer is its exact issuer URL (http://127.0.0.1:PORT, no trailing slash).
	Issuer string
	// JWKSURL is its JWK Set URL.
	JWKSURL string

	mu     sync.Mutex
	stderr strings.Builder
}

// Start runs a provider for t and kills it when t ends.
func Start(t testing.TB, c Config) *Provider {
	t.Helper()
	testenv.Heavy(t, "oidctest: starts the oidc-provider Node.js process")
	if c.Resource == "" {
		t.Fatal("oidctest.Config.Resource is required")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node not found on PATH: the second OpenID Provider (tests/oidcidp, npm oidc-provider) needs Node.js 20+ with npm")
	}
	dir := Dir()
	ensureDeps(t, dir)

	cfgPath := filepath.Join(t.TempDir(), "oidcidp.json")
	b, err := json.Marshal(c.fileConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, "idp.mjs", cfgPath)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe() // closed at cleanup: the process exits on EOF too
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{}
	cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.stderr.Write(b)
		return len(b), nil
	})
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("oidctest: start node idp.mjs: %v", err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("oidc-provider stderr:\n%s", p.Stderr())
		}
	})

	// The first JSON line on stdout names the issuer; it is printed once the port listens.
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "{") {
				select {
				case lines <- l:
				default:
				}
			}
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("oidctest: idp.mjs exited before naming its issuer; stderr:\n%s", p.Stderr())
		}
		var hello struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := json.Unmarshal([]byte(l), &hello); err != nil || hello.Issuer == "" {
			t.Fatalf("oidctest: idp.mjs printed %q, want {\"issuer\":…}", l)
		}
		p.Issuer, p.JWKSURL = hello.Issuer, hello.JWKSURI
	case <-time.After(startBudget):
		t.Fatalf("oidctest: idp.mjs named no issuer within %s; stderr:\n%s", startBudget, p.Stderr())
	}
	return p
}

// Stderr is what the process wrote on stderr so far (server errors are logged there).
func (p *Provider) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// startBudget bounds how long the provider may take to name its issuer. The wait ends as soon
// as it does; a cold Node.js loading oidc-provider while a whole CI run shares two cores took
// over 30 s once (TestBrowserSignIn/serve-oidc-provider, clean-clone CI at 680abe5).
const startBudget = 90 * time.Second
