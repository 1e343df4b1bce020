package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/chrome"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// TestBrowserApprovals drives Debian's Chromium through the /approvals pages of the built
// `jobgate dev` binary: ana starts an export of customers with the sensitive column email (MCP,
// her dev token from the banner); the steward signs in at the dev identity provider, finds it in
// the inbox, opens it, reads what approving means and approves; the job runs to succeeded with
// the steward as approver. ana sees her own request but no decision form (four eyes), and her
// job with a download button under "my jobs"; gus of globex sees an empty inbox and gets 404 on
// the job's guessed URL. The steward's sign-in aged by an hour cannot approve ana's second
// sensitive export; reloading signs them in again (prompt=login) and then it can. Screenshots (1200 and 390 px) of the inbox, the request, the outcome,
// my jobs and the job page go to a temp dir, or to $JOBGATE_SCREENSHOTS/approvals.
func TestBrowserApprovals(t *testing.T) {
	testenv.Heavy(t, "builds jobgate, runs jobgate dev and Chromium")
	chrome.Require(t)
	shots := os.Getenv("JOBGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	dataDir := t.TempDir()
	mcpURL, issuer, p := startDevProcessIn(t, dataDir)
	base := strings.TrimSuffix(mcpURL, "/mcp")
	cs := devBannerSession(t, p, mcpURL, "approvals-browser-test")
	v := mustView(t, call(t, cs, "start_export", map[string]any{"idempotency_key": uniqueKey(t), "dataset": "customers",
		"format": "csv", "columns": []string{"id", "name", "email"}, "purpose": "renewal mailing for Q3"}))
	w := exWait(t, cs, v.Handle, workflows.StatusAwaitingInput, 60*time.Second)
	reqURL := base + frontend.ApprovalPagePath(v.JobID)

	b := newBrowser(t, filepath.Join(shots, "approvals"))
	signIn := func(sub, path string) {
		b.Step("forget everything", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, network.ClearBrowserCookies, cdp.Empty{})
			return err
		}))
		b.Step("open "+path, chromedp.Navigate(base+path), chrome.At(issuer+"/login?"))
		b.Step("pick "+sub, chromedp.Click(chromedp.CSS(`button[name=user][value="`+sub+`"]`)), chrome.At(base+path))
	}
	has := func(what string, wants ...string) {
		t.Helper()
		body := b.Text()
		for _, want := range wants {
			if !strings.Contains(body, want) {
				t.Fatalf("%s lacks %q:\n%s", what, want, body)
			}
		}
	}

	// The steward: inbox → request → approve → outcome.
	signIn("steward", frontend.PathApprovals)
	has("the steward's inbox", "Approvals waiting for you", "ana", "renewal mailing for Q3", "customers", "email (sensitive)")
	b.shoot("inbox")
	b.Step("open the request", chromedp.Click(chromedp.CSS(`a[href="`+frontend.ApprovalPagePath(v.JobID)+`"]`)), chrome.At(reqURL))
	has("the request page", "What approving means", "Allow ana@acme to export id, name and email (sensitive) of customers",
		"renewal mailing for Q3", w.NeedsInput.ScopeDigest, "Approve", "Reject")
	b.shoot("request")
	b.Step("approve", chromedp.SendKeys(chromedp.CSS("#comment"), "ok for the Q3 mailing"),
		chromedp.Click(chromedp.CSS(`button[value=approve]`)), chrome.At(reqURL), chrome.Shows("Decision recorded"))
	has("the outcome page", "Decision recorded", "You approved this request", "ok for the Q3 mailing")
	b.shoot("outcome")
	done := exWait(t, cs, v.Handle, workflows.StatusSucceeded, 90*time.Second)
	if res, _ := done.Result.(map[string]any); res["approved_by"] != "steward" {
		t.Fatalf("result %v, want approved_by steward", done.Result)
	}
	// The export's manifest.json (dev keeps artifacts in <data dir>/artifacts) holds the page's
	// decision record: surface page, the steward's OIDC session (issuer the dev IdP, auth_time
	// of the sign-in), and the built `jobgate verify` checks it with the public keys alone (dev's
	// signing keys, written beside the manifest); one flipped byte in a copy fails it.
	mp := findManifestIn(t, filepath.Join(dataDir, "artifacts"), v.JobID)
	raw, err := os.ReadFile(mp)
	must(t, err)
	var man struct {
		Decision *contract.DecisionRecord `json:"decision"`
	}
	must(t, json.Unmarshal(raw, &man))
	if d := man.Decision; d == nil || d.Surface != workflows.SurfacePage || d.SignedInWith != jobcore.SignedInOIDCSession ||
		d.Issuer != issuer || d.By != "steward" || d.Decision != "approve" || d.Comment != "ok for the Q3 mailing" ||
		d.AuthTime.IsZero() || time.Since(d.AuthTime) > 10*time.Minute || d.Seal == "" {
		t.Fatalf("the manifest's decision record is not the steward's page approval:\n%s", raw)
	}
	keysFile := filepath.Join(filepath.Dir(mp), contract.SigningKeysObject)
	code, out := runVerify(t, mp)
	t.Logf("jobgate verify (page):\n%s", out)
	if code != 0 || !strings.Contains(out, "ok   decision signature (Ed25519, key dev1): approve by steward@acme") || !strings.Contains(out, " via page, scope ") ||
		!strings.Contains(out, "ok   manifest signature: ") || strings.Contains(out, "SKIP") ||
		!strings.Contains(out, "ok   artifact: ") || strings.Contains(out, "FAIL") {
		t.Fatalf("jobgate verify of the page's record: exit %d:\n%s", code, out)
	}
	i := strings.Index(string(raw), `"comment":"ok for the Q3 mailing"`)
	if i < 0 {
		t.Fatalf("the manifest's record has no comment:\n%s", raw)
	}
	raw[i+len(`"comment":"o`)] ^= 0x01 // ok -> oj: one bit of one byte
	flipped := filepath.Join(t.TempDir(), "manifest.json")
	must(t, os.WriteFile(flipped, raw, 0o644))
	if code, out := runVerify(t, flipped, "--keys-file", keysFile, "--artifact", filepath.Dir(mp)); code != 1 || !strings.Contains(out, "FAIL") {
		t.Fatalf("jobgate verify of a flipped byte: exit %d, want 1:\n%s", code, out)
	}

	// ana: her second sensitive export shows her request without a form (four eyes); her jobs
	// list the first one, whose page offers the download.
	v2 := mustView(t, call(t, cs, "start_export", map[string]any{"idempotency_key": uniqueKey(t) + "-2", "dataset": "customers",
		"format": "csv", "columns": []string{"id", "email"}, "purpose": "second look"}))
	exWait(t, cs, v2.Handle, workflows.StatusAwaitingInput, 60*time.Second)
	signIn("ana", frontend.ApprovalPagePath(v2.JobID))
	has("ana's own request", "You cannot decide this request")
	if n := b.Eval(`String(document.querySelectorAll("button[name=decision]").length)`); n != "0" {
		t.Fatalf("ana is offered %s decision buttons on her own request", n)
	}
	b.Step("my jobs", chromedp.Navigate(base+frontend.PathJobs), chrome.At(base+frontend.PathJobs))
	has("ana's jobs", "My jobs", v.JobID, "succeeded", "awaiting input")
	b.shoot("jobs")
	b.Step("the job", chromedp.Navigate(base+frontend.JobPagePath(v.JobID)), chrome.At(base+frontend.JobPagePath(v.JobID)))
	has("ana's job page", "succeeded", "steward", "Download the file")
	b.shoot("job")
	// The button's link, fetched with ana's session cookie, is the artifact (its digest the
	// result's); without the cookie, or with the steward's link rule broken, it is a 404.
	href := b.Eval(`document.querySelector("a[download]").getAttribute("href")`)
	get := func(cookie string) *http.Response {
		req, err := http.NewRequest("GET", base+href, nil)
		must(t, err)
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: "jobgate_session", Value: cookie})
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		must(t, err)
		resp.Body.Close()
		return resp
	}
	res, _ := done.Result.(map[string]any)
	if resp := get(b.Cookie(base, "jobgate_session").Value); resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `"`+res["sha256"].(string)+`"` {
		t.Fatalf("download with ana's session: %s, ETag %s, want %s", resp.Status, resp.Header.Get("ETag"), res["sha256"])
	}
	if resp := get(""); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("download without a session: %s, want 303 to sign in", resp.Status)
	}

	// gus of globex: nothing in the inbox, and the guessed URL is the 404 of a missing job.
	signIn("gus", frontend.PathApprovals)
	has("gus's inbox", "jobs:approve")
	if body := b.Text(); strings.Contains(body, "acme") {
		t.Fatalf("gus's inbox names acme:\n%s", body)
	}
	b.Step("guessed URL", chromedp.Navigate(reqURL), chrome.At(reqURL))
	has("gus on ana's request", "There is no such request or job for you")
	if resp := get(b.Cookie(base, "jobgate_session").Value); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("ana's download link with gus's session: %s, want 404", resp.Status)
	}

	// An old sign-in: the steward's session cookie, re-sealed with the dev stack's handle keys
	// with an auth_time an hour back. Approving from the open form is refused; reloading the
	// page comes back with a "Sign in again" link to the identity provider (prompt=login), and
	// after a fresh sign-in the approval goes through.
	req2 := base + frontend.ApprovalPagePath(v2.JobID)
	signIn("steward", frontend.ApprovalPagePath(v2.JobID))
	has("the second request", "second look", "Approve")
	spec, err := os.ReadFile(filepath.Join(dataDir, "dev-handle-keys"))
	must(t, err)
	keys, err := handle.ParseKeyring(strings.TrimSpace(string(spec)))
	must(t, err)
	c := b.Cookie(base, "jobgate_session")
	if c == nil {
		t.Fatal("no session cookie")
	}
	sess, err := keys.OpenSession(c.Value, time.Now())
	must(t, err)
	if time.Since(sess.AuthTime) > time.Minute {
		t.Fatalf("the fresh sign-in's auth_time is %s", sess.AuthTime)
	}
	sess.AuthTime = time.Now().Add(-time.Hour)
	b.Step("age the sign-in", chrome.SetCookie(base, "jobgate_session", keys.SealSession(sess)))
	b.Step("approve with an old sign-in", chromedp.Click(chromedp.CSS(`button[value=approve]`)), chrome.At(req2), chrome.Shows("Nothing was decided"))
	has("the refusal", "needs a sign-in from the last", "Sign in again and come back to this request")
	if got := mustView(t, call(t, cs, "get_export", map[string]any{"handle": v2.Handle})); got.Status != workflows.StatusAwaitingInput {
		t.Fatalf("approved with an old sign-in: %s", got.Status)
	}
	// The refusal keeps the form and offers a sign-in that comes back here (a GET, not a re-POST).
	b.Step("sign in again", chromedp.Click(chromedp.Search(`//a[contains(., "Sign in again")]`)), chrome.At(issuer+"/login?"))
	b.Step("pick steward again", chromedp.Click(chromedp.CSS(`button[name=user][value="steward"]`)), chrome.At(req2))
	b.Step("approve", chromedp.Click(chromedp.CSS(`button[value=approve]`)), chrome.At(req2), chrome.Shows("Decision recorded"))
	has("the second outcome", "You approved this request")
	exWait(t, cs, v2.Handle, workflows.StatusSucceeded, 90*time.Second)
	t.Logf("screenshots in %s", b.shots)
}

// startDevProcessIn is startDevProcess on data dir dir (its dev secrets readable by the test).
func startDevProcessIn(t *testing.T, dir string) (mcpURL, issuer string, p *proc) {
	t.Helper()
	p = startProc(t, exec.Command(jobgateBinary(t), "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--temporal-port", "0", "--ui-port", "-1"), true)
	eventually(t, 90*time.Second, "dev banner", func() bool { return strings.Contains(p.logs(), "Ctrl-C stops") })
	banner := p.logs()
	m := regexp.MustCompile(`MCP endpoint +(http://localhost:[0-9]+/mcp)\n`).FindStringSubmatch(banner)
	iss := regexp.MustCompile(`Identity provider (http://localhost:[0-9]+/oidc) \(dev only\)\n`).FindStringSubmatch(banner)
	if m == nil || iss == nil {
		t.Fatalf("banner:\n%s", banner)
	}
	return m[1], iss[1], p
}

// devBannerSession is an MCP session of acme/ana with the dev token `jobgate dev` (process p)
// printed in its banner, closed when the test ends.
func devBannerSession(t *testing.T, p *proc, mcpURL, client string) *mcp.ClientSession {
	t.Helper()
	tok := regexp.MustCompile(`\n +acme +ana +[a-z: ]+?(eyJ[A-Za-z0-9_.-]+)\n`).FindStringSubmatch(p.logs())
	if tok == nil {
		t.Fatalf("no dev token of ana in the banner:\n%s", p.logs())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: client, Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: mcpURL, HTTPClient: &http.Client{Transport: bearerRT{token: tok[1], base: http.DefaultTransport}},
			DisableStandaloneSSE: true}, nil)
	must(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}
