package tests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/devtemporal"
	"github.com/jobgate/jobgate/cmd/devtemporal/devpki"
	"github.com/jobgate/jobgate/tests/support/chrome"
	"github.com/jobgate/jobgate/tests/support/oidctest"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

const uiPurpose = "Wombat codec check 4QZ"

// TestBrowserUICodecTwoAdmins is issue 31's Web UI check, with sign-in: the Temporal Web UI
// (ui-server, signing people in with OpenID Connect at the npm oidc-provider, passing their
// access token to its codec) against a serve whose /codec it reaches over TLS (a loopback
// https front, as a load balancer terminating TLS), with --codec-cors-origin the UI's origin.
// Chromium signs in as acme's admin (ops) and sees acme's export purpose on its workflow page;
// then, in a fresh profile, as globex's admin (gwen), and sees the same input sealed: the
// payload's ciphertext and encoding, not the purpose. The codec server's log and
// jobgate_codec_payloads_total record both: ops's payloads opened, gwen's refused. Screenshots
// go to a temp dir, or to $JOBGATE_SCREENSHOTS/codec-ui.
func TestBrowserUICodecTwoAdmins(t *testing.T) {
	testenv.Heavy(t, "runs a Temporal server with its Web UI, the oidc-provider IdP and Chromium")
	chrome.Require(t)
	shots := os.Getenv("JOBGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	shots = filepath.Join(shots, "codec-ui")
	const resource = "http://localhost/mcp" // testBundle.resource()

	// The TLS front of serve's /codec: the UI passes tokens to https endpoints only.
	ca, err := devpki.NewCA("codec ui test CA")
	must(t, err)
	pair, err := ca.Server("127.0.0.1")
	must(t, err)
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	must(t, err)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	must(t, err)
	var backend atomic.Pointer[url.URL]
	front := httptest.NewUnstartedServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(backend.Load())
		r.SetXForwarded()
	}})
	front.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	front.StartTLS()
	t.Cleanup(front.Close)

	// The identity provider: ana starts the export, ops administers acme, gwen globex. The UI
	// is a confidential client sending no PKCE (ui-server has none), its callback on any port.
	uiSecret := randHex(16)
	idp := oidctest.Start(t, oidctest.Config{
		Resource: resource,
		Users: []oidctest.User{
			{Sub: "ana", Tenant: "acme", Scopes: []string{"jobs:read", "jobs:write"}},
			{Sub: "ops", Tenant: "acme", Scopes: []string{"jobs:read", "jobs:admin"}},
			{Sub: "gwen", Tenant: "globex", Scopes: []string{"jobs:read", "jobs:admin"}},
		},
		Clients: []oidctest.Client{
			oidctest.PublicClient("jobgate-cli"),
			{ID: "temporal-ui", Secret: uiSecret, Native: true, NoPKCE: true,
				RedirectURIs: []string{"http://127.0.0.1/auth/sso/callback"}, GrantTypes: []string{"authorization_code", "refresh_token"}},
		},
	})

	// Temporal and its Web UI, signing in at the IdP and passing the token to the https codec.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devtemporal.Start(ctx, devtemporal.Options{UIPort: 0, SearchAttributes: workflows.SearchAttributeTypes(),
		UICodecEndpoint: front.URL + "/codec",
		UIAuth: &devtemporal.UIAuth{ProviderURL: idp.Issuer, ClientID: "temporal-ui", ClientSecret: uiSecret,
			Scopes: []string{"openid", "profile", "email", "jobs:read", "jobs:admin"}}})
	must(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	ui := srv.UIURL()

	// serve: trusts the IdP's keys, allows the UI's origin on /codec, counts on /metrics.
	jwks, err := authz.NewJWKSVerifier(ctx, authz.JWKSOptions{URL: idp.JWKSURL, Issuer: idp.Issuer, Audience: resource})
	must(t, err)
	t.Cleanup(func() { jwks.Close() })
	b := setup(t, setupOpts{temporalAddr: srv.FrontendHostPort(), verifier: jwks, authServer: idp.Issuer, codecOrigins: ui,
		metrics: true, datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	be, err := url.Parse("http://" + b.frontends[0].Addr())
	must(t, err)
	backend.Store(be)

	// ana's export (non-sensitive columns: it runs at once), with her IdP token.
	anaTok := idp.AuthCode(t, "jobgate-cli", "http://127.0.0.1:4321/callback", "ana", "", "openid jobs:read jobs:write")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "codec-ui-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: b.url(0), DisableStandaloneSSE: true,
			HTTPClient: &http.Client{Transport: bearerRT{token: anaTok.AccessToken, base: http.DefaultTransport}, Timeout: 30 * time.Second}}, nil)
	must(t, err)
	defer cs.Close()
	v := mustView(t, call(t, cs, "start_export", map[string]any{"idempotency_key": uniqueKey(t), "dataset": "customers",
		"format": "csv", "purpose": uiPurpose}))
	done := exWait(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second)

	// What Temporal holds as the workflow's input, read without the keys: the ciphertext the
	// UI must show to gwen.
	raw, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Namespace: namespace})
	must(t, err)
	defer raw.Close()
	it := raw.GetWorkflowHistory(ctx, done.JobID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	first, err := it.Next()
	must(t, err)
	in := first.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	if len(in) != 1 {
		t.Fatalf("the workflow's input has %d payloads, want 1", len(in))
	}
	if tenant, sealed := payloadcrypt.SealedTenant(in[0]); !sealed || tenant != "acme" {
		t.Fatalf("the workflow's input is not sealed for acme (sealed %v, tenant %q)", sealed, tenant)
	}
	if strings.Contains(string(in[0].GetData()), uiPurpose) {
		t.Fatal("Temporal holds the purpose in clear")
	}
	cipher := base64.StdEncoding.EncodeToString(in[0].GetData())

	runID := first.GetWorkflowExecutionStartedEventAttributes().GetOriginalExecutionRunId()
	page := ui + "/namespaces/" + namespace + "/workflows/" + url.PathEscape(done.JobID) + "/" + runID + "/history"
	signIn := func(b *browser, sub string) {
		b.Step("open the job's page: the UI sends "+sub+" to the IdP", chromedp.Navigate(page), chrome.At(idp.Issuer+"/interaction/"))
		b.Step("sign in as "+sub, chromedp.Click(chromedp.CSS(`button[name=sub][value="`+sub+`"]`)), chrome.At(page))
	}
	metrics := b.frontends[0].MetricsAddr()

	t.Run("acme admin sees the purpose", func(t *testing.T) {
		br := &browser{Browser: chrome.New(t, chrome.TrustCert(leaf)), t: t, shots: shots}
		signIn(br, "ops")
		// The UI shows a payload as stored until the codec answers: then only decoded copies
		// of the input remain (its card and its history row).
		br.Step("the UI shows the decoded purpose, and the input sealed nowhere", chrome.Shows(uiPurpose), chrome.Lacks(cipher[:24]))
		scrollTo(br, uiPurpose)
		br.shoot("acme-admin")
		decodes := codecDecodes(b.logs, "ops")
		if len(decodes) == 0 {
			t.Fatal("the codec server logged no decode by ops")
		}
		opened := 0
		for _, d := range decodes {
			opened += d["opened"]
			if d["refused"] != 0 {
				t.Errorf("the codec server refused ops a payload of his own tenant: %v", d)
			}
		}
		if opened == 0 {
			t.Errorf("the codec server opened nothing for ops: %v", decodes)
		}
		m := scrape(t, metrics)
		if n := metricValue(t, m, `jobgate_codec_payloads_total{op="decode",outcome="opened"}`); n < 1 {
			t.Errorf("jobgate_codec_payloads_total opened = %v, want ≥ 1", n)
		}
		if n := metricValue(t, m, `jobgate_codec_payloads_total{op="decode",outcome="refused"}`); n != 0 {
			t.Errorf("jobgate_codec_payloads_total refused = %v after acme's admin only, want 0", n)
		}
	})

	t.Run("globex admin sees ciphertext", func(t *testing.T) {
		br := &browser{Browser: chrome.New(t, chrome.TrustCert(leaf)), t: t, shots: shots}
		signIn(br, "gwen")
		// The UI shows the input as stored until the codec answers, so the ciphertext on the
		// page proves nothing until the codec server has answered her (it logs a decode by a
		// verified token: the UI passed hers) and refused.
		br.Step("the UI shows the sealed input", chrome.Shows(cipher))
		eventually(t, 30*time.Second, "the codec server refuses gwen acme's payloads", func() bool {
			refused := false
			for _, d := range codecDecodes(b.logs, "gwen") {
				if d["opened"] != 0 {
					t.Fatalf("the codec server opened a payload for globex's admin: %v", d)
				}
				refused = refused || d["refused"] > 0
			}
			return refused
		})
		br.Step("the UI still shows the sealed input", chrome.Shows(cipher))
		if body := br.Text(); strings.Contains(body, uiPurpose) {
			t.Errorf("globex's admin reads acme's purpose:\n%s", body)
		}
		scrollTo(br, cipher[:24])
		br.shoot("globex-admin")
		if n := metricValue(t, scrape(t, metrics), `jobgate_codec_payloads_total{op="decode",outcome="refused"}`); n < 1 {
			t.Errorf("jobgate_codec_payloads_total refused = %v, want ≥ 1", n)
		}
	})
}

// scrollTo scrolls the innermost element whose text holds text into the middle of its
// scrolling boxes, for the screenshot.
func scrollTo(b *browser, text string) {
	b.t.Helper()
	js := `(() => { const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
		for (let n = w.nextNode(); n; n = w.nextNode()) if (n.nodeValue.includes(` + strconv.Quote(text) + `)) {
			n.parentElement.scrollIntoView({block: "center"}); return "found"; }
		return "missing"; })()`
	if got := b.Eval(js); got != "found" {
		b.t.Fatalf("no text node holds %q", text)
	}
}

// codecDecodes are the codec server's decode log lines of sub, as their counts.
func codecDecodes(logs *observer.ObservedLogs, sub string) []map[string]int {
	var out []map[string]int
	for _, e := range logs.FilterMessage("codec server: decode").All() {
		f := e.ContextMap()
		if f["sub"] != sub {
			continue
		}
		m := map[string]int{}
		for _, k := range []string{"payloads", "opened", "refused", "clear", "failed"} {
			if n, ok := f[k].(int64); ok {
				m[k] = int(n)
			}
		}
		out = append(out, m)
	}
	return out
}

// metricValue is the value of the sample named series (name{labels} as exposed) in a scrape.
func metricValue(t testing.TB, scrape, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		t.Fatalf("no %s in /metrics", series)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	must(t, err)
	return f
}
