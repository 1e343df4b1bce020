package tests

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/tests/support/chrome"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

const cbPurpose = "Quokka codec check 8TW"

// TestBrowserDevUIDecodes drives Chromium to a job's page in `jobgate dev`'s embedded Temporal
// Web UI: the UI calls the frontend's codec server (cross-origin, no sign-in: dev's operator)
// and shows the export's purpose, which Temporal holds only sealed. A screenshot goes to a
// temp dir, or to $JOBGATE_SCREENSHOTS/codec.
func TestBrowserDevUIDecodes(t *testing.T) {
	testenv.Heavy(t, "runs jobgate dev with its Web UI, and Chromium")
	chrome.Require(t)
	shots := os.Getenv("JOBGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	var out bytes.Buffer
	m := &app.DevMain{Config: app.DevConfig{Ephemeral: true, Listen: "127.0.0.1:0", TemporalPort: 0, UIPort: 0, TokenTTL: time.Hour}, Out: &out}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		_ = m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	tok, err := m.MintDevToken("acme", "ana", []authz.Scope{authz.ScopeRead, authz.ScopeWrite}, time.Hour)
	must(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "codec-browser-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: m.ResourceURI(), HTTPClient: &http.Client{Transport: bearerRT{token: tok, base: http.DefaultTransport}},
			DisableStandaloneSSE: true}, nil)
	must(t, err)
	defer cs.Close()
	// Non-sensitive columns only: it runs at once.
	v := mustView(t, call(t, cs, "start_export", map[string]any{"idempotency_key": uniqueKey(t), "dataset": "customers",
		"format": "csv", "purpose": cbPurpose}))
	done := exWait(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second)
	if done.UIURL == "" {
		t.Fatal("no ui_url in dev")
	}

	b := newBrowser(t, filepath.Join(shots, "codec"))
	b.Step("open the job in the Web UI", chromedp.Navigate(done.UIURL), chrome.At(done.UIURL))
	b.Step("the UI shows the decoded purpose", chrome.Shows(cbPurpose))
	b.shoot("workflow")
}
