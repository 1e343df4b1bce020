package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/wire"
)

// Everything the client commands (jobs …, approvals …) share: the endpoint and token flags, the
// connection, one tool call decoded the way every client must (wire.ParseResult), finding
// a job's kind from its handle, and exit codes.

// callTimeout bounds the connect and each tool call.
const callTimeout = 30 * time.Second

// defaultURL is the dev stack's MCP endpoint.
const defaultURL = "http://localhost:8080/mcp"

// connFlags are the endpoint and credentials of a client command.
type connFlags struct {
	url, token, tokenFile string
	cmd                   string // "jobs list", … for messages
}

// register adds --url, --token and --token-file to fs.
func (c *connFlags) register(fs *flag.FlagSet, cmd string) {
	c.cmd = cmd
	fs.StringVar(&c.url, "url", envOr("JOBGATE_URL", defaultURL), "MCP endpoint (env JOBGATE_URL)")
	fs.StringVar(&c.token, "token", "", "bearer token (default: env JOBGATE_TOKEN, else the 'jobgate login' of --url)")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token")
}

// explicitToken is the token the person gave: --token, then --token-file, then JOBGATE_TOKEN;
// "" when none was given. desc says which, for whoami.
func (c connFlags) explicitToken() (tok, desc string, err error) {
	tok, desc = c.token, "--token"
	switch {
	case tok != "" && c.tokenFile != "":
		return "", "", fmt.Errorf("%s: give --token or --token-file, not both", c.cmd)
	case tok == "" && c.tokenFile != "":
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return "", "", fmt.Errorf("--token-file: %w", err)
		}
		tok, desc = string(b), "--token-file "+c.tokenFile
	case tok == "":
		tok, desc = os.Getenv("JOBGATE_TOKEN"), "env JOBGATE_TOKEN"
	}
	tok = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(tok), "Bearer "))
	if tok == "" {
		return "", "", nil
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", "", fmt.Errorf("%s: the token contains whitespace", c.cmd)
	}
	return tok, desc, nil
}

// tokenSource picks the credentials: a token the person gave (explicitToken), else the
// 'jobgate login' of --url from the token store, refreshed when it expires.
func (c connFlags) tokenSource() (*credentials, error) {
	tok, desc, err := c.explicitToken()
	if err != nil {
		return nil, err
	}
	if tok != "" {
		return &credentials{static: tok, desc: desc}, nil
	}
	path, err := tokenStorePath()
	if err != nil {
		return nil, err
	}
	tf, err := loadTokens(path)
	if err != nil {
		return nil, err
	}
	l := tf.forURL(c.url)
	if l == nil {
		return nil, fmt.Errorf("%s: no token; run 'jobgate login' (for --url %s), or pass --token or --token-file, or set JOBGATE_TOKEN", c.cmd, c.url)
	}
	// forURL matches by URL, so the check is on the URL the token is about to be sent to.
	if err := secureURL("--url", c.url); err != nil {
		return nil, fmt.Errorf("%s: %w; the stored sign-in is not sent in clear", c.cmd, err)
	}
	return &credentials{login: l, path: path, desc: "jobgate login (" + path + ")"}, nil
}

// client is a connected MCP client session plus what commands need besides it (the
// credentials for artifact downloads, the endpoint URL).
type client struct {
	cs       *mcp.ClientSession
	endpoint string
	creds    *credentials
}

// connect resolves the credentials and connects to the endpoint. A stored sign-in that
// expired is refreshed first, so a refresh that fails is its own one-line error.
func (c connFlags) connect() (*client, error) {
	creds, err := c.tokenSource()
	if err != nil {
		return nil, err
	}
	if _, err := creds.Token(); err != nil {
		return nil, err
	}
	cs, err := connectMCP(c.url, creds)
	if err != nil {
		return nil, err
	}
	return &client{cs: cs, endpoint: c.url, creds: creds}, nil
}

// bearer is the current access token (refreshed if it expired).
func (cl *client) bearer() (string, error) {
	t, err := cl.creds.Token()
	if err != nil {
		return "", err
	}
	return t.AccessToken, nil
}

// tenant is the tenant the token names (read, not verified: the server verified it, and only
// jobs of that tenant reach the caller), for the meaning sentence; "" when it cannot be read.
func (cl *client) tenant() string {
	if cl.creds == nil {
		return ""
	}
	tok, err := cl.bearer()
	if err != nil {
		return ""
	}
	claim := authz.TenantClaimDefault
	if cl.creds.login != nil && cl.creds.login.TenantClaim != "" {
		claim = cl.creds.login.TenantClaim
	}
	i, _, err := readTokenInfo(tok, claim)
	if err != nil {
		return ""
	}
	return i.Tenant
}

func (cl *client) Close() error { return cl.cs.Close() }

// bearerTransport adds the Authorization header to every request of the MCP client, asking
// the token source each time, so a long `jobs watch` outlives its first access token.
type bearerTransport struct {
	src  oauth2.TokenSource
	base http.RoundTripper
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := t.src.Token()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	return t.base.RoundTrip(r)
}

// connectMCP connects a go-sdk MCP client over Streamable HTTP, without the standalone SSE
// stream (the server is stateless and has none).
func connectMCP(endpoint string, src oauth2.TokenSource) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: bearerTransport{src: src, base: http.DefaultTransport}, Timeout: callTimeout}
	c := mcp.NewClient(&mcp.Implementation{Name: "jobgate-cli", Version: wire.Version}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		return nil, refusal(fmt.Errorf("connect %s: %w%s", endpoint, err, authHint(err)), err)
	}
	return cs, nil
}

func authHint(err error) string {
	switch s := err.Error(); {
	case strings.Contains(s, "401") || strings.Contains(s, "Unauthorized"):
		return " (the token was refused: expired, wrong issuer/audience or secret?)"
	case strings.Contains(s, "403") || strings.Contains(s, "Forbidden"):
		return " (the token lacks the scope this needs: see 'jobgate token -h')"
	}
	return ""
}

// refusal gives wrapped exit code 1 when cause is the server refusing the token (HTTP 401 or
// 403), like a tool error; other transport errors keep exit code 2.
func refusal(wrapped, cause error) error {
	if authHint(cause) != "" {
		return &exitError{code: 1, err: wrapped}
	}
	return wrapped
}

// call calls tool and decodes its result into out (nil: don't decode). It returns the
// structuredContent as JSON (for --json). A tool error comes back as the *wire.ToolError
// itself, so it prints as "code: message" and exits 1.
func (cl *client) call(ctx context.Context, tool string, args map[string]any, out any) (json.RawMessage, error) {
	return cl.callMeta(ctx, tool, args, nil, out)
}

// callMeta is call with the request's _meta (nil for none).
func (cl *client) callMeta(ctx context.Context, tool string, args map[string]any, meta mcp.Meta, out any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res, err := cl.cs.CallTool(ctx, &mcp.CallToolParams{Meta: meta, Name: tool, Arguments: args})
	if err != nil {
		return nil, refusal(fmt.Errorf("%s: %w%s", tool, err, authHint(err)), err)
	}
	var sink json.RawMessage
	if out == nil {
		out = &sink
	}
	te, err := wire.ParseResult(res, out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	if te != nil {
		return nil, te
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	return asSent(res, raw), nil
}

// asSent is the structured result as the server wrote it: the text content carries the same JSON
// (CONTRACT.md "Tools"), in the server's key order, where re-encoding the decoded
// structuredContent (raw) sorts the keys. The text is used only when it is that same value.
func asSent(res *mcp.CallToolResult, raw json.RawMessage) json.RawMessage {
	if len(res.Content) == 0 {
		return raw
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok || !json.Valid([]byte(tc.Text)) {
		return raw
	}
	var a, b any
	if json.Unmarshal([]byte(tc.Text), &a) != nil || json.Unmarshal(raw, &b) != nil || !reflect.DeepEqual(a, b) {
		return raw
	}
	return json.RawMessage(tc.Text)
}

// probeKind is the kind whose get_* getJob asks first: the first get_<kind> tool the server
// lists (every get_* tool is a kind's, CONTRACT.md "Tools by kind"). Any kind would do, since
// every kind's get_* answers a handle of another kind with a tool error whose kind field names
// the handle's kind; asking the server rather than naming a kind here keeps the CLI free of
// kind names and right against a server that serves only some kinds (only evals, say).
func (cl *client) probeKind(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	for t, err := range cl.cs.Tools(ctx, nil) {
		if err != nil {
			return "", refusal(fmt.Errorf("tools/list: %w%s", err, authHint(err)), err)
		}
		if kind, ok := strings.CutPrefix(t.Name, "get_"); ok && kind != "" {
			return kind, nil
		}
	}
	return "", errors.New("tools/list: the server lists no get_* tool (it serves no kind of job)")
}

// job is one get_* answer: the view, its raw JSON, and the kind (which tools to use).
type job struct {
	kind string
	view wire.JobView
	raw  json.RawMessage
}

// getJob reads the job a handle names. A handle is opaque, so the CLI does not decode the kind
// from it. Instead it asks get_<probeKind>, and the server tells it when the handle names a job
// of another kind: a tool error (invalid_argument) whose kind field is the job's kind — sent
// only after the server has verified the handle's signature and tenant, so it leaks nothing —
// and getJob then asks get_<kind>. It reads the field, never the message. Every other answer
// (not_found, which carries no kind; invalid_handle, forbidden, …, whose kind is the one asked)
// is final. One tools/list, one get_* call and one more for a handle of another kind; no scan
// of the jobs, and no dependency on the handle's format or on a list of kinds.
func (cl *client) getJob(ctx context.Context, h string) (*job, error) {
	kind, err := cl.probeKind(ctx)
	if err != nil {
		return nil, err
	}
	tried := map[string]bool{}
	for {
		tried[kind] = true
		j := &job{kind: kind}
		raw, err := cl.call(ctx, "get_"+kind, map[string]any{"handle": h}, &j.view)
		if err == nil {
			j.raw = raw
			if j.view.Kind != "" && j.view.Kind != kind {
				return nil, fmt.Errorf("get_%s answered a %s job", kind, j.view.Kind)
			}
			return j, nil
		}
		var te *wire.ToolError
		if !errors.As(err, &te) || te.Kind == "" || tried[te.Kind] {
			return nil, err
		}
		kind = te.Kind
	}
}

// exitError carries a process exit code other than the default for its error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the process exit code for an error run returned: 1 when the server refused
// (a tool error) or the job failed, 2 for usage and transport errors.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var te *wire.ToolError
	if errors.As(err, &te) {
		return 1
	}
	return 2
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
