package pages

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobgate/jobgate/tests/support/chrome"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestBrowser drives a real Chromium (headless) through sign-in against the dev IdP: the picker,
// /me showing ana of acme, a cross-site POST refused, sign-out, /me then asking to sign in
// again, a forged cookie refused, gus of globex never seeing acme, and the error page.
// Screenshots at 1200 and 390 px go to $JOBGATE_SCREENSHOTS (default: the test's temp dir).
func TestBrowser(t *testing.T) {
	testenv.Heavy(t, "starts Chromium")
	chrome.Require(t)
	shots := os.Getenv("JOBGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	e := startEnv(t, envOpts{})
	// Another site (localhost is not 127.0.0.1's site) with a form posting to our /logout.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<!doctype html><form method="post" action="`+e.base+`/logout"><input type="hidden" name="csrf" value="guess"><button id="go">win a prize</button></form>`)
	}))
	defer evil.Close()
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)

	b := chrome.New(t)
	step, at, text := b.Step, chrome.At, b.Text
	shoot := func(name string) { t.Helper(); b.Shoot(shots, name) }

	// Signing in starts at a protected page: the picker of the dev IdP.
	step("open /me", chromedp.Navigate(e.base+"/me"), at(e.issuer+"/login?"))
	shoot("picker")
	step("pick ana", chromedp.Click(chromedp.CSS(`button[value="ana"]`)), at(e.base+"/me"))
	body := text()
	for _, want := range []string{"Signed in as ana", "acme", "jobs:read jobs:write", "Sign out"} {
		if !strings.Contains(body, want) {
			t.Fatalf("/me lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "globex") {
		t.Fatalf("ana's page names globex:\n%s", body)
	}
	shoot("me")

	// A form on another site posting to /logout is refused; the session stays.
	step("cross-site form", chromedp.Navigate(evilURL), chromedp.Click(chromedp.CSS("#go")), at(e.base+"/logout"))
	if body := text(); !strings.Contains(body, "came from another site") {
		t.Fatalf("cross-site POST:\n%s", body)
	}
	step("still signed in", chromedp.Navigate(e.base+"/me"), at(e.base+"/me"))

	// Sign out (through the IdP's end_session), then /me asks to sign in again.
	step("sign out", chromedp.Click(chromedp.CSS(`form[action$="/logout"] button`)), at(e.base+PathSignedOut))
	if body := text(); !strings.Contains(body, "You are signed out") {
		t.Fatalf("signed-out page:\n%s", body)
	}
	shoot("signed-out")
	step("/me after sign-out", chromedp.Navigate(e.base+"/me"), at(e.issuer+"/login?"))

	// A forged session cookie (set by script on our origin) is no session.
	step("forge", chromedp.Navigate(e.base+PathSignedOut), at(e.base+PathSignedOut), chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[string](`document.cookie = "jobgate_session=jgx1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA; path=/"; document.cookie`)(ctx, tg)
		return err
	}))
	step("/me with a forged cookie", chromedp.Navigate(e.base+"/me"), at(e.issuer+"/login?"))

	// Tenant B: gus of globex never sees acme.
	step("pick gus", chromedp.Click(chromedp.CSS(`button[value="gus"]`)), at(e.base+"/me"))
	if body := text(); !strings.Contains(body, "Signed in as gus") || !strings.Contains(body, "globex") || strings.Contains(body, "acme") {
		t.Fatalf("gus's /me:\n%s", body)
	}

	// The error page: a return address off the site.
	step("bad return", chromedp.Navigate(e.base+"/login?return=//evil.example"), at(e.base+"/login"))
	if body := text(); !strings.Contains(body, "must be a path on this site") {
		t.Fatalf("error page:\n%s", body)
	}
	shoot("error")
	t.Logf("screenshots in %s", shots)
}

// TestBrowserJobPages drives Chromium through the job pages over a fake job core, signed in at
// the dev IdP as steward: the inbox, a request page, its approval and outcome, the one 404
// message page, and the sign-in error page (the same message template, without the job pages'
// navigation). Screenshots at 1200 and 390 px go to $JOBGATE_SCREENSHOTS/jobpages (default: the
// test's temp dir), to check that every page shares the one layout.
func TestBrowserJobPages(t *testing.T) {
	testenv.Heavy(t, "starts Chromium")
	chrome.Require(t)
	shots := os.Getenv("JOBGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	shots = filepath.Join(shots, "jobpages")
	now := time.Now().UTC()
	jobs := &fakeJobs{now: now, jobs: map[string]Job{}, results: map[string]Result{}}
	e := startEnv(t, envOpts{jobs: jobs})
	je := &jobsEnv{t: t, jobs: jobs}
	je.awaiting(pageJobID, "ana")
	je.awaiting("acme/export/bo/q4", "bo")

	b := chrome.New(t)
	step, at, text := b.Step, chrome.At, b.Text
	shoot := func(name string) { t.Helper(); b.Shoot(shots, name) }

	step("open /approvals", chromedp.Navigate(e.base+PathApprovals), at(e.issuer+"/login?"))
	shoot("signin")
	step("pick steward", chromedp.Click(chromedp.CSS(`button[value="steward"]`)), at(e.base+PathApprovals))
	if body := text(); !strings.Contains(body, "Approvals waiting for you") || !strings.Contains(body, "renewal mailing for Q3") {
		t.Fatalf("inbox:\n%s", body)
	}
	shoot("approvals")
	step("open the request", chromedp.Click(chromedp.CSS(`a[href="`+ApprovalPath(pageJobID)+`"]`)), at(e.base+ApprovalPath(pageJobID)))
	if body := text(); !strings.Contains(body, "What approving means") || !strings.Contains(body, "email (sensitive)") {
		t.Fatalf("request page:\n%s", body)
	}
	shoot("request")
	step("approve", chromedp.SendKeys(chromedp.CSS("#comment"), "ok for Q3"),
		chromedp.Click(chromedp.CSS(`button[value="approve"]`)), chrome.Shows("You approved this request"))
	shoot("outcome")
	if len(jobs.decisions) != 1 || jobs.decisions[0].Comment != "ok for Q3" {
		t.Fatalf("decisions %+v", jobs.decisions)
	}
	step("a job that is not there", chromedp.Navigate(e.base+ApprovalPath("acme/export/ana/nope")), chrome.Shows("There is no such request"))
	shoot("message")
	step("a sign-in error", chromedp.Navigate(e.base+"/login?return=//evil.example"), chrome.Shows("must be a path on this site"))
	shoot("signin-error")
	t.Logf("screenshots in %s", shots)
}
