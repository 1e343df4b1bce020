package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/tests/support/chrome"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// chartsA11y is a script checking, on the current page, that no script runs and that every
// chart is an image with a non-empty title and description that its aria-labelledby names; it
// answers "ok" or what is wrong.
const chartsA11y = `(() => {
  if (document.scripts.length) return "the page has a script";
  const charts = document.querySelectorAll("svg.chart");
  for (const s of charts) {
    if (s.getAttribute("role") !== "img") return "a chart without role=img";
    const ids = (s.getAttribute("aria-labelledby") || "").split(" ");
    if (ids.length !== 2) return "a chart not labelled by a title and a description";
    for (const id of ids) {
      const e = document.getElementById(id);
      if (!e || !e.textContent.trim() || e.closest("svg") !== s) return "a chart whose label " + id + " is missing or empty";
    }
  }
  return "ok " + charts.length;
})()`

// TestBrowserEvalPictures (issue 35 §2) drives Chromium through the job pages of the built
// `jobgate dev`: ana's eval, while it runs, shows its outcomes bar (with the episodes not yet
// finished) and its run so far from the episode log; finished, the score histogram whose bins
// add up to the eval's scored episodes (get_eval's result), outcomes matching its passed count;
// her export's page lists its parts, whose rows add up to the export's. Every chart is an
// image with a title and description, its numbers in a table; no script. Screenshots at 1200 and
// 390 px go to $JOBGATE_SCREENSHOTS/charts.
func TestBrowserEvalPictures(t *testing.T) {
	testenv.Heavy(t, "builds jobgate, runs jobgate dev and Chromium")
	chrome.Require(t)
	shots := os.Getenv("JOBGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	mcpURL, issuer, p := startDevProcessIn(t, t.TempDir())
	base := strings.TrimSuffix(mcpURL, "/mcp")
	cs := devBannerSession(t, p, mcpURL, "charts-browser-test")

	args := startArgs(uniqueKey(t), 100, map[string]any{"episode_ms": 300, "fail_rate": 0.1})
	args["concurrency"] = 2 // about fifteen seconds: the page sees it running
	ev := mustView(t, call(t, cs, "start_eval", args))
	ex := mustView(t, call(t, cs, "start_export", map[string]any{"idempotency_key": uniqueKey(t) + "-x", "dataset": "customers",
		"format": "csv", "purpose": "parts on the job page"}))

	b := newBrowser(t, filepath.Join(shots, "charts"))
	evURL := base + frontend.JobPagePath(ev.JobID)
	b.Step("open the eval's page", chromedp.Navigate(evURL), chrome.At(issuer+"/login?"))
	b.Step("pick ana", chromedp.Click(chromedp.CSS(`button[name=user][value="ana"]`)), chrome.At(evURL))
	a11y := func(what string, charts int) {
		t.Helper()
		if got := b.Eval(chartsA11y); got != "ok "+strconv.Itoa(charts) {
			t.Errorf("%s: %s, want ok with %d charts", what, got, charts)
		}
	}

	// While it runs: the outcomes bar with episodes not finished, and the run so far.
	eventually(t, time.Minute, "the eval running with 10 episodes done", func() bool {
		v := mustView(t, call(t, cs, "get_eval", map[string]any{"handle": ev.Handle}))
		return v.Status == workflows.StatusRunning && v.Progress.Done+v.Progress.Failed >= 10
	})
	b.Step("reload", chromedp.Navigate(evURL), chrome.At(evURL), chrome.Shows("The run so far"))
	body := b.Text()
	if !strings.Contains(body, "running") || !regexp.MustCompile(`\d+ not finished`).MatchString(body) || !strings.Contains(body, "Solid blue: mean score so far") {
		t.Errorf("the running eval's page lacks its status, outcomes or run so far:\n%s", body)
	}
	a11y("running eval", 3)
	b.shoot("eval-running")

	done := waitStatus(t, cs, ev.Handle, workflows.StatusSucceeded, 2*time.Minute)
	var res struct{ Scored, Passed int }
	raw, _ := json.Marshal(done.Result)
	must(t, json.Unmarshal(raw, &res))
	b.Step("reload when done", chromedp.Navigate(evURL), chrome.At(evURL), chrome.Shows("Score distribution"))
	body = b.Text()
	if !strings.Contains(body, strconv.Itoa(res.Passed)+" passed") || !strings.Contains(body, "0 not finished") {
		t.Errorf("finished eval: want %d passed and none unfinished:\n%s", res.Passed, body)
	}
	// The histogram's table (its text equivalent) holds every scored episode exactly once.
	sum := b.Eval(`String([...document.querySelectorAll("td[data-label=Episodes]")].reduce((n, td) => n + Number(td.textContent), 0))`)
	if sum != strconv.Itoa(res.Scored) {
		t.Errorf("histogram bins add up to %s, want the eval's %d scored episodes", sum, res.Scored)
	}
	if n := b.Eval(`String(document.querySelectorAll("svg.chart rect title").length)`); n == "0" {
		t.Error("the bars carry no titles")
	}
	a11y("finished eval", 3)
	b.shoot("eval-done")

	// The export's page: its parts, whose rows add up to the export's.
	xd := exWait(t, cs, ex.Handle, workflows.StatusSucceeded, time.Minute)
	var xr struct{ Rows int }
	raw, _ = json.Marshal(xd.Result)
	must(t, json.Unmarshal(raw, &xr))
	xURL := base + frontend.JobPagePath(ex.JobID)
	b.Step("the export's page", chromedp.Navigate(xURL), chrome.At(xURL), chrome.Shows("The file's parts, in order"))
	rows := b.Eval(`String([...document.querySelectorAll("td[data-label=Rows]")].reduce((n, td) => n + Number(td.textContent.replace(/\D/g, "")), 0))`)
	if xr.Rows == 0 || rows != strconv.Itoa(xr.Rows) {
		t.Errorf("the parts' rows add up to %s, want the export's %d", rows, xr.Rows)
	}
	a11y("export", 1)
	b.shoot("export")
	t.Logf("screenshots in %s", b.shots)
}
