package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

// startDev runs the dev stack in-process on listen, its state in dir ("" = --ephemeral).
func startDev(t *testing.T, dir, listen string) (*DevMain, string) {
	t.Helper()
	var out bytes.Buffer
	m := &DevMain{Config: DevConfig{DataDir: dir, Ephemeral: dir == "", Listen: listen, TemporalPort: 0, UIPort: -1, TokenTTL: time.Hour}, Out: &out}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel() // Run's ctx ends here, as in tests/dev_test.go: the stack must outlive it
	if err := m.Run(ctx); err != nil {
		_ = m.Close()
		t.Fatal(err)
	}
	return m, out.String()
}

// devBase is the stack's http://localhost:<port>, as its resource URI and issuer name it.
func devBase(m *DevMain) string { return strings.TrimSuffix(m.ResourceURI(), "/mcp") }

func getJSONMap(t *testing.T, u string) map[string]any {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	return v
}

var (
	reAuthReqID = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
	reCSRFField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// noRedirect is a browser that stops at every redirect, so each hop is checked.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func redirectTo(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		t.Fatalf("%s %s: want a redirect, got %s: %s", resp.Request.Method, resp.Request.URL, resp.Status, b)
	}
	l, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return l.String()
}

// pickUser is a person at the dev IdP: authorize → the picker page → POST the picker as
// user → the callback; it returns the code the IdP sends to redirect.
func pickUser(t *testing.T, authURL, user, redirect string) string {
	t.Helper()
	get := func(u string) *http.Response {
		t.Helper()
		resp, err := noRedirect.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	picker := redirectTo(t, get(authURL))
	resp := get(picker)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id, csrf := reAuthReqID.FindSubmatch(page), reCSRFField.FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || id == nil || csrf == nil || !bytes.Contains(page, []byte("Development only")) {
		t.Fatalf("picker %s: %s\n%s", picker, resp.Status, page)
	}
	pu, _ := url.Parse(picker)
	pu.RawQuery = ""
	presp, err := noRedirect.PostForm(pu.String(), url.Values{"authRequestID": {string(id[1])}, "csrf": {string(csrf[1])}, "user": {user}})
	if err != nil {
		t.Fatal(err)
	}
	final, err := url.Parse(redirectTo(t, get(redirectTo(t, presp))))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(final.String(), redirect+"?") || final.Query().Get("code") == "" {
		t.Fatalf("the IdP sent the browser to %s", final)
	}
	return final.Query().Get("code")
}

// codeLogin is a whole authorization code + PKCE login of user with cfg (x/oauth2).
func codeLogin(t *testing.T, cfg *oauth2.Config, user string) *oauth2.Token {
	t.Helper()
	pkce := oauth2.GenerateVerifier()
	code := pickUser(t, cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(pkce)), user, cfg.RedirectURL)
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// listJobs calls list_jobs through the go-sdk MCP client with token and returns the result.
func listJobs(t *testing.T, m *DevMain, token string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "devidp-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: m.ResourceURI(), HTTPClient: &http.Client{Transport: bearerTransport{token}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_jobs", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("list_jobs: %v", err)
	}
	if res.IsError {
		t.Fatalf("list_jobs answered an error: %+v", res.Content)
	}
	return res
}

// postMCP sends tools/list with token and returns the status and challenge.
func postMCP(t *testing.T, m *DevMain, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, m.ResourceURI(), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}
