package tests

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobgate/jobgate/cmd/devtemporal/devpki"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// cimdDir holds the Client ID Metadata Document sign-in driven by the official TypeScript MCP
// client v2 (@modelcontextprotocol/client 2.4.0).
const cimdDir = "cimd"

// cimdDocs serves metadata documents over TLS on 127.0.0.1 with a certificate from a fresh
// devpki CA (for 127.0.0.1 and localhost), and counts fetches per path.
type cimdDocs struct {
	srv    *httptest.Server
	base   string // https://localhost:<port>
	caFile string
	ca     *devpki.CA
	mu     sync.Mutex
	docs   map[string]string
	hits   map[string]int
}

func startCIMDDocs(t *testing.T) *cimdDocs {
	t.Helper()
	ca, err := devpki.NewCA("jobgate CIMD test CA")
	must(t, err)
	pair, err := ca.Server("127.0.0.1", "localhost")
	must(t, err)
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	must(t, err)
	caFile, err := ca.WriteFile(t.TempDir(), "ca")
	must(t, err)
	d := &cimdDocs{ca: ca, caFile: caFile, docs: map[string]string{}, hits: map[string]int{}}
	d.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		body, ok := d.docs[r.URL.Path]
		d.hits[r.URL.Path]++
		d.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = io.WriteString(w, body)
	}))
	d.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	d.srv.StartTLS()
	t.Cleanup(d.srv.Close)
	d.base = "https://localhost:" + strings.TrimPrefix(d.srv.URL, "https://127.0.0.1:")
	return d
}

func (d *cimdDocs) url(path string) string { return d.base + path }

// put serves a document at path: client_id its own URL unless doc says otherwise.
func (d *cimdDocs) put(path string, doc map[string]any) {
	m := map[string]any{"client_id": d.url(path), "client_name": "jobgate CIMD test client", "client_uri": d.base + "/",
		"redirect_uris": []string{cimdRedirect}, "grant_types": []string{"authorization_code", "refresh_token"},
		"response_types": []string{"code"}, "token_endpoint_auth_method": "none"}
	for k, v := range doc {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	d.mu.Lock()
	d.docs[path] = string(b)
	d.mu.Unlock()
}

func (d *cimdDocs) fetches(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hits[path]
}

// cimdRedirect is the test client's redirect URI: nothing listens there, the test hands the
// redirect back to the client on stdin.
const cimdRedirect = "http://127.0.0.1:33419/callback"

// startDevCIMD runs the built `jobgate dev --ephemeral` with the dev opt-ins for a metadata
// document served on this machine with a dev CA: --cimd-allow-loopback and --cimd-ca-file.
func startDevCIMD(t *testing.T, caFile string) (mcpURL, issuer string) {
	t.Helper()
	p := startProc(t, exec.Command(jobgateBinary(t), "dev", "--ephemeral", "--listen", "127.0.0.1:0", "--temporal-port", "0", "--ui-port", "-1",
		"--cimd-allow-loopback", "--cimd-ca-file", caFile), true)
	eventually(t, 90*time.Second, "dev banner", func() bool { return strings.Contains(p.logs(), "Ctrl-C stops") })
	banner := p.logs()
	m := regexp.MustCompile(`MCP endpoint +(http://localhost:[0-9]+/mcp)\n`).FindStringSubmatch(banner)
	iss := regexp.MustCompile(`Identity provider (http://localhost:[0-9]+/oidc) \(dev only\)\n`).FindStringSubmatch(banner)
	if m == nil || iss == nil {
		t.Fatalf("banner:\n%s", banner)
	}
	return m[1], iss[1]
}

// TestCIMDClientSignsIn: the official TypeScript MCP client 2.4.0 signs in to `jobgate dev`
// with a Client ID Metadata Document served over loopback TLS (devpki): it reads
// client_id_metadata_document_supported and uses its document's URL as client_id (no
// registration), authorization code + PKCE through the dev IdP's picker (which names the client
// from its document), then calls list_jobs with the token. Then the refusals, each by status
// and error: a document naming another client_id, a redirect URI not in the document, an
// oversized document, a non-https client_id, and — on a provider without the dev opt-in — a
// client_id URL on a loopback address.
func TestCIMDClientSignsIn(t *testing.T) {
	testenv.Heavy(t, "runs jobgate dev and the TypeScript MCP client v2 on Node.js")
	node := tsNeed(t, "node")
	if _, err := os.Stat(filepath.Join(cimdDir, "node_modules", "@modelcontextprotocol", "client", "package.json")); err != nil {
		npmCI(t, tsNeed(t, "npm"), cimdDir, 5*time.Minute)
	}
	docs := startCIMDDocs(t)
	docs.put("/client.json", nil)
	mcpURL, issuer := startDevCIMD(t, docs.caFile)
	d := discoveryOf(t, issuer)
	if d["client_id_metadata_document_supported"] != true || d["registration_endpoint"] != issuer+"/register" {
		t.Fatalf("discovery: client_id_metadata_document_supported %v, registration_endpoint %v (DCR stays for older clients)",
			d["client_id_metadata_document_supported"], d["registration_endpoint"])
	}

	t.Run("sign in", func(t *testing.T) {
		clientID := docs.url("/client.json")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, "login.mjs")
		cmd.Dir = cimdDir
		cmd.Env = append(os.Environ(), "JOBGATE_URL="+mcpURL, "JOBGATE_CLIENT_ID="+clientID, "JOBGATE_REDIRECT_URL="+cimdRedirect)
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
				t.Logf("login.mjs: %s", sc.Text())
				var m map[string]json.RawMessage
				if json.Unmarshal(sc.Bytes(), &m) != nil {
					continue
				}
				if e, ok := m["error"]; ok {
					t.Fatalf("login.mjs failed: %s\nstderr:\n%s", e, stderr.String())
				}
				if v, ok := m[want]; ok {
					return v
				}
			}
			t.Fatalf("login.mjs ended before a %q line: %v\nstderr:\n%s", want, sc.Err(), stderr.String())
			return nil
		}
		var info struct {
			ClientID string `json:"client_id"`
		}
		must(t, json.Unmarshal(next("client"), &info))
		if info.ClientID != clientID {
			t.Fatalf("the client chose client_id %q, want its metadata document's URL %q (no registration)", info.ClientID, clientID)
		}
		var authorize string
		must(t, json.Unmarshal(next("authorize"), &authorize))
		au, err := url.Parse(authorize)
		must(t, err)
		for k, want := range map[string]string{"client_id": clientID, "redirect_uri": cimdRedirect, "code_challenge_method": "S256", "response_type": "code"} {
			if au.Query().Get(k) != want {
				t.Errorf("authorize %s=%q, want %q", k, au.Query().Get(k), want)
			}
		}
		// The picker names the client from its document, with its host and the loopback redirect.
		page := cimdPicker(t, authorize)
		for _, want := range []string{"&#34;jobgate CIMD test client&#34; (the name its metadata document at " + strings.TrimPrefix(docs.base, "https://") + " gives it)",
			"goes back to <strong>127.0.0.1:33419</strong>", "a program on this computer"} {
			if !strings.Contains(page, want) {
				t.Errorf("picker lacks %q:\n%s", want, page)
			}
		}
		back := formLogin(t, issuer, authorize, ana.sub)
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
			t.Errorf("login.mjs: %v\nstderr:\n%s", err, stderr.String())
		}
		if n := docs.fetches("/client.json"); n < 1 {
			t.Errorf("the provider never fetched the metadata document")
		}
	})

	docs.put("/other.json", map[string]any{"client_id": "https://app.example/client.json"})
	docs.put("/big.json", map[string]any{"logo_uri": "https://app.example/" + strings.Repeat("l", devidp.CIMDMaxBytes)})
	port := strings.TrimPrefix(docs.base, "https://localhost")
	strict := startCIMDStrictIdP(t, docs.ca)
	for _, c := range []struct {
		name, issuer, clientID, redirect, code, reason string
	}{
		{"document names another client_id", issuer, docs.url("/other.json"), cimdRedirect, "invalid_client",
			`client_id: the metadata document names client_id "https://app.example/client.json", not its own URL`},
		{"redirect URI not in the document", issuer, docs.url("/client.json"), "http://127.0.0.1:33419/elsewhere", "invalid_request",
			`redirect_uri: "http://127.0.0.1:33419/elsewhere" is not one of the redirect_uris in the client's metadata document`},
		{"oversized document", issuer, docs.url("/big.json"), cimdRedirect, "invalid_client", "the metadata document is larger than 5120 bytes"},
		{"non-https client_id", issuer, "http://localhost" + port + "/client.json", cimdRedirect, "invalid_client", "must use https"},
		{"loopback without the dev opt-in", strict, docs.url("/client.json"), cimdRedirect, "invalid_client",
			"refused to connect to localhost: a loopback address"},
		{"loopback IP without the dev opt-in", strict, "https://127.0.0.1" + port + "/client.json", cimdRedirect, "invalid_client",
			"refused to connect to 127.0.0.1: a loopback address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := url.Values{"client_id": {c.clientID}, "redirect_uri": {c.redirect}, "response_type": {"code"}, "scope": {"jobs:read"},
				"state": {"s"}, "code_challenge": {oidcS256(randHex(32))}, "code_challenge_method": {"S256"}}
			hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := hc.Get(c.issuer + "/authorize?" + q.Encode())
			must(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(string(b), c.code+": ") || !strings.Contains(string(b), c.reason) {
				t.Fatalf("authorize: %d %q (Location %q), want 400 %s: …%s…", resp.StatusCode, b, resp.Header.Get("Location"), c.code, c.reason)
			}
		})
	}
}

// cimdPicker is the dev IdP's picker page that authorizeURL leads to.
func cimdPicker(t *testing.T, authorizeURL string) string {
	t.Helper()
	resp, err := http.Get(authorizeURL) // follows authorize → /login on the IdP
	must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Request.URL.Path, "/login") {
		t.Fatalf("authorize led to %s (%d):\n%s", resp.Request.URL, resp.StatusCode, b)
	}
	return string(b)
}

// startCIMDStrictIdP is frontend/devidp on a server of its own, trusting the dev CA but
// without CIMDAllowLoopback: what a provider does with a client_id URL on a loopback address.
func startCIMDStrictIdP(t *testing.T, ca *devpki.CA) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	issuer := "http://" + ln.Addr().String() + "/oidc"
	roots, err := devidp.CIMDRootCAs(ca.CertPEM)
	must(t, err)
	idp, err := devidp.New(devidp.Options{Issuer: issuer, Resource: "http://" + ln.Addr().String() + "/mcp",
		Users: []devidp.User{{Subject: ana.sub, Tenant: ana.tenant, Scopes: ana.scopes}}, CIMDRootCAs: roots})
	must(t, err)
	srv := &http.Server{Handler: idp.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return issuer
}
