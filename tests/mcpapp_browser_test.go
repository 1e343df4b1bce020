package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/activities/contract"
	app "github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/chrome"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// appHostDir holds the test MCP Apps host page (npm ci'd by .ci/run).
const appHostDir = "mcpapphost"

// TestBrowserMCPAppCard renders jobgate's approval card in Chromium the way an MCP Apps host
// does: a host page whose real @modelcontextprotocol/client (2026-07-28, declaring
// io.modelcontextprotocol/ui) talks to the built `jobgate dev` through a proxy that adds the
// person's token (the page and the card never hold it), and whose ext-apps AppBridge connects
// the card, loaded from the ui:// resource into a sandboxed iframe. ana starts two sensitive
// exports of customers, one of a dataset that wants human surfaces (approval_surfaces page,
// app). The steward's bearer resume_export of that one is refused (forbidden, with the page's
// link). ana's own card shows her request without a form (four eyes). The steward's card lists
// both; the steward types a comment and clicks Approve on each; both exports succeed with
// decision records of surface app (get_export, the manifests, the job's history). The tools
// the host lists to its model never include decide_approval; a client without MCP Apps is
// never told of it. Screenshots at 1200 and 390 px go to a temp dir or $JOBGATE_SCREENSHOTS/mcpapp.
func TestBrowserMCPAppCard(t *testing.T) {
	testenv.Heavy(t, "builds jobgate, runs jobgate dev, Node.js (esbuild) and Chromium")
	chrome.Require(t)
	node := tsNeed(t, "node")
	if _, err := os.Stat(filepath.Join(appHostDir, "node_modules", "@modelcontextprotocol", "ext-apps", "package.json")); err != nil {
		npmCI(t, tsNeed(t, "npm"), appHostDir, 5*time.Minute)
	}
	bundle := filepath.Join(t.TempDir(), "host.js")
	build := exec.Command(node, "build.mjs", bundle)
	build.Dir = appHostDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the host page: %v\n%s", err, out)
	}
	shots := os.Getenv("JOBGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	shots = filepath.Join(shots, "mcpapp")

	db := demoDB(t)
	catalog := filepath.Join(t.TempDir(), "datasets.json")
	must(t, os.WriteFile(catalog, []byte(catalogJSON(t, demoDataset(db, nil), demoDataset(db, func(d *contract.Dataset) {
		d.Name, d.ApprovalSurfaces = "customers_human", []string{contract.ApprovalSurfacePage, contract.ApprovalSurfaceApp}
	}))), 0o644))
	dataDir := t.TempDir()
	p := startProc(t, exec.Command(jobgateBinary(t), "dev", "--data-dir", dataDir, "--datasets", catalog, "--listen", "127.0.0.1:0",
		"--temporal-port", "0", "--ui-port", "-1"), true)
	eventually(t, 90*time.Second, "dev banner", func() bool { return strings.Contains(p.logs(), "Ctrl-C stops") })
	m := regexp.MustCompile(`MCP endpoint +(http://localhost:[0-9]+/mcp)\n`).FindStringSubmatch(p.logs())
	if m == nil {
		t.Fatalf("banner:\n%s", p.logs())
	}
	mcpURL := m[1]
	base := strings.TrimSuffix(mcpURL, "/mcp")
	secret, err := app.LoadTokenSecret("", dataDir)
	must(t, err)
	// The people's tokens say when they signed in: approving a sensitive scope on the card
	// needs a recent sign-in, as on the pages.
	token := func(sub, scope string) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": app.DevIssuer, "aud": mcpURL, "sub": sub,
			"tenant": "acme", "scope": scope, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
			"auth_time": time.Now().Unix(), "name": sub}).SignedString(secret)
		must(t, err)
		return tok
	}
	tokens := map[string]string{"ana": token("ana", "jobs:read jobs:write"), "steward": token("steward", "jobs:approve")}
	connect := func(who string) *mcp.ClientSession {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpapp-test-" + who, Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: mcpURL, DisableStandaloneSSE: true,
				HTTPClient: &http.Client{Transport: bearerRT{token: tokens[who], base: http.DefaultTransport}}}, nil)
		must(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	csAna, csSteward := connect("ana"), connect("steward")

	start := func(dataset string) *jobcore.JobView {
		v := mustView(t, call(t, csAna, "start_export", map[string]any{"idempotency_key": uniqueKey(t) + "-" + dataset, "dataset": dataset,
			"format": "csv", "columns": []string{"id", "name", "email"}, "purpose": "renewal mailing for Q3"}))
		return exWait(t, csAna, v.Handle, workflows.StatusAwaitingInput, 60*time.Second)
	}
	plain, human := start("customers"), start("customers_human")

	// A bearer token cannot answer a request that wants a human surface: forbidden, with the link.
	te := mustErr(t, call(t, csSteward, "resume_export", map[string]any{"handle": human.Handle, "input_id": human.NeedsInput.InputID,
		"scope_digest": human.NeedsInput.ScopeDigest, "decision": "approve"}), jobcore.CodeForbidden)
	if link := base + frontend.ApprovalPagePath(human.JobID); !strings.Contains(te.Message, link) {
		t.Fatalf("refusal %q lacks the page's link %s", te.Message, link)
	}
	// A client without MCP Apps is never told of the app-only tool.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	lt, err := csSteward.ListTools(ctx, nil)
	cancel()
	must(t, err)
	for _, tl := range lt.Tools {
		if tl.Name == jobcore.DecideToolName || tl.Meta["ui"] != nil {
			t.Fatalf("a client without MCP Apps sees %s with _meta %v", tl.Name, tl.Meta)
		}
	}

	hostURL, proxyErrs := appHost(t, mcpURL, bundle, tokens)
	b := newBrowser(t, shots)
	show := func(who, tool string, args map[string]any) *chrome.Browser {
		t.Helper()
		a, _ := json.Marshal(args)
		open := func() {
			b.Step("open "+who+"'s "+tool, chromedp.Navigate(hostURL+"/"+who+"/?tool="+tool+"&args="+url.QueryEscape(string(a))),
				chrome.At(hostURL+"/"+who+"/"))
		}
		open()
		reopened := false
		eventually(t, 30*time.Second, who+"'s card shown", func() bool {
			st := b.Eval(`window.host ? window.host.state : ""`)
			if st == "failed" {
				// The host page's own fetch to the test proxy failed once under load ("Failed
				// to fetch": a network error, not an answer of jobgate's; the proxy logs any
				// upstream error). A person's host would ask again: so does this one, once.
				err := b.Eval(`window.host.error`)
				if reopened || !strings.Contains(err, "Failed to fetch") {
					t.Fatalf("the host failed: %s\nproxy: %s", err, proxyErrs())
				}
				t.Logf("the host's fetch failed (%s; proxy: %s): opening it again", err, proxyErrs())
				reopened = true
				open()
				return false
			}
			return st == "shown"
		})
		card := b.Frame("about:srcdoc")
		eventually(t, 30*time.Second, "the card's content", func() bool { return !strings.Contains(card.Text(), "Loading") })
		return card
	}
	hostList := func(key string) []string {
		var out []string
		must(t, json.Unmarshal([]byte(b.Eval(`JSON.stringify(window.host.`+key+`)`)), &out))
		return out
	}

	// ana's own request: shown, but no form (four eyes); no nonce reached her host.
	card := show("ana", "get_export", map[string]any{"handle": plain.Handle})
	text := card.Text()
	for _, want := range []string{"What approving means", "renewal mailing for Q3", "email", "SENSITIVE", plain.NeedsInput.ScopeDigest, "four eyes"} {
		if !strings.Contains(text, want) {
			t.Fatalf("ana's card lacks %q:\n%s", want, text)
		}
	}
	if n := card.Eval(`String(document.querySelectorAll("form, button, textarea").length)`); n != "0" {
		t.Fatalf("ana's card has %s form controls", n)
	}
	if keys := hostList("resultMetaKeys"); slices.Contains(keys, jobcore.MetaApprovalCard) {
		t.Fatalf("ana's result carries the card's nonces: %v", keys)
	}
	shootCard(t, b, card, shots, "owner-card")

	// The steward's card lists both requests, each with the meaning, every scope field, the
	// sensitive column marked, the digest and a form.
	card = show("steward", "list_approvals", map[string]any{})
	if all, model := hostList("allTools"), hostList("modelTools"); !slices.Contains(all, jobcore.DecideToolName) ||
		slices.Contains(model, jobcore.DecideToolName) || !slices.Contains(model, "resume_export") {
		t.Fatalf("tools: all %v, model %v", all, model)
	}
	if csp := b.Eval(`window.host.cardCSP`); !strings.Contains(csp, "connect-src 'none'") || !strings.Contains(csp, "default-src 'none'") ||
		strings.Contains(csp, "unsafe") {
		t.Fatalf("card CSP %q", csp)
	}
	text = card.Text()
	for _, job := range []*jobcore.JobView{plain, human} {
		for _, want := range []string{job.JobID, job.NeedsInput.ScopeDigest, strings.ReplaceAll(job.NeedsInput.Prompt, "**", "")} {
			if !strings.Contains(text, want) {
				t.Fatalf("the steward's card lacks %q:\n%s", want, text)
			}
		}
	}
	if n := card.Eval(`String(document.querySelectorAll("[data-sensitive=true]").length)`); n != "2" {
		t.Fatalf("%s sensitive columns marked, want 2 (email, twice)", n)
	}
	shootCard(t, b, card, shots, "steward-card")

	decide := func(job *jobcore.JobView, comment string) {
		t.Helper()
		sec := `section[data-job="` + job.JobID + `"]`
		// Focus, then the whole comment as one text input (Input.insertText, as an input method
		// commits it): key by key into the card's out-of-process frame lost all but the first
		// key once under load (the box held "o").
		card.Step("type a comment on "+job.JobID, chromedp.Focus(chromedp.CSS(sec+" textarea")),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: comment})
				return err
			}))
		if got := card.Eval(`document.querySelector('` + sec + ` textarea').value`); got != comment {
			t.Fatalf("the comment box holds %q", got)
		}
		card.Step("click Approve on "+job.JobID, chromedp.Click(chromedp.CSS(sec+` button[value=approve]`)))
		defer func() {
			if t.Failed() {
				b.shoot("failed-decide")
				t.Logf("card: %s\nhost log: %s", card.Text(), b.Eval(`JSON.stringify(window.host.log)`))
			}
		}()
		eventually(t, 30*time.Second, "the card says approved", func() bool {
			return card.Eval(`(document.querySelector('`+sec+` [data-decided]') || {}).textContent || ""`) != "" ||
				strings.Contains(card.Eval(`(document.querySelector('`+sec+` .msg') || {}).textContent || ""`), "Not decided")
		})
		if got := card.Eval(`(document.querySelector('` + sec + ` [data-decided]') || {}).textContent || document.querySelector('` + sec + ` .msg').textContent`); !strings.HasPrefix(got, "Approved.") {
			t.Fatalf("%s: the card says %q", job.JobID, got)
		}
	}
	// A viewport taller than the page: every button shows without scrolling the page (input
	// sent to the card's frame can scroll only the frame, which the host sized to fit).
	b.Step("tall viewport", chromedp.EmulateViewport(1200, 3000))
	decide(plain, "ok for the renewal mailing")
	decide(human, "ok, approved in the chat")
	b.Step("viewport back", chromedp.EmulateViewport(1200, 900))
	shootCard(t, b, card, shots, "steward-approved")

	for _, job := range []*jobcore.JobView{plain, human} {
		done := exWait(t, csAna, job.Handle, workflows.StatusSucceeded, 120*time.Second)
		res, _ := done.Result.(map[string]any)
		d, _ := res["decision"].(map[string]any)
		if d["surface"] != jobcore.SurfaceApp || d["by"] != "steward" || d["decision"] != "approve" || d["signed_in_with"] != "bearer-jwt" ||
			d["sealed"] != true || !strings.HasPrefix(d["comment"].(string), "ok") {
			t.Fatalf("%s: decision %v", job.JobID, d)
		}
		story := call(t, csAna, "describe_job", map[string]any{"handle": job.Handle})
		if !strings.Contains(string(story.Raw), "approved by steward on app (signed in with bearer-jwt)") {
			t.Fatalf("%s: the history's story does not say the steward answered on the app: %s", job.JobID, story.Raw)
		}
	}
	manifests := 0
	must(t, filepath.Walk(dataDir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || filepath.Base(path) != "manifest.json" {
			return err
		}
		var mf struct {
			Decision *struct{ Surface, By string } `json:"decision"`
		}
		b, err := os.ReadFile(path)
		if err != nil || json.Unmarshal(b, &mf) != nil || mf.Decision == nil {
			t.Fatalf("%s: %v %s", path, err, b)
		}
		if mf.Decision.Surface != jobcore.SurfaceApp || mf.Decision.By != "steward" {
			t.Fatalf("%s: decision %+v", path, mf.Decision)
		}
		manifests++
		return nil
	}))
	if manifests != 2 {
		t.Fatalf("%d manifests under the data dir, want 2", manifests)
	}
}

// shootCard saves screenshots of the host page with the card at 1200 and 390 px wide as
// dir/name-<width>.png. A frame of another process is painted only where it is in view, and
// the card re-measures itself (ext-apps' autoResize) only while in view: so the viewport is
// made as tall as the page until the host has sized the frame to the card's height.
func shootCard(t *testing.T, b *browser, card *chrome.Browser, dir, name string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	for _, w := range []int64{1200, 390} {
		eventually(t, 20*time.Second, fmt.Sprintf("the card sized to its content at %d px", w), func() bool {
			page, err := strconv.ParseInt(b.Eval(`String(Math.ceil(document.body.getBoundingClientRect().bottom) + 12)`), 10, 64)
			must(t, err)
			b.Step("fit the page", chromedp.EmulateViewport(w, max(page, 400)))
			want := card.Eval(`String(Math.ceil((() => { const e = document.documentElement, h = e.style.height; e.style.height = "max-content";
				const r = e.getBoundingClientRect().height; e.style.height = h; return r; })()) + 2)`)
			// The card has laid out at the frame's new width, and the host has sized the frame to it.
			return card.Eval(`String(innerWidth)`) == b.Eval(`String(document.querySelector("iframe").clientWidth)`) &&
				b.Eval(`String(parseInt(document.querySelector("iframe").style.height))`) == want
		})
		// Two animation frames of the card: what is now in view has been painted.
		card.Step("paint", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[string](`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r("painted"))))`,
				chromedp.EvalAwaitPromise)(ctx, tg)
			return err
		}))
		var png []byte
		b.Step("screenshot "+name, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			var err error
			png, err = chromedp.FullScreenshot(100)(ctx, tg)
			return err
		}))
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.png", name, w)), png, 0o644))
	}
	b.Step("viewport back", chromedp.EmulateViewport(1200, 900))
}

// appHost serves the test host page per person (/ana/, /steward/): the page, its bundle, and
// /<who>/mcp, a reverse proxy to jobgate's /mcp that adds that person's bearer token. The
// browser never holds a token.
func appHost(t *testing.T, mcpURL, bundle string, tokens map[string]string) (string, func() string) {
	t.Helper()
	target, err := url.Parse(mcpURL)
	must(t, err)
	js, err := os.ReadFile(bundle)
	must(t, err)
	page := `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">` +
		`<title>Test MCP Apps host</title><style>body{font-family:system-ui,sans-serif;margin:12px;background:#f4f4f5}` +
		`h1{font-size:15px;color:#555;margin:0 0 8px}</style></head><body><h1>Test chat host — jobgate's approval card</h1>` +
		`<div id="cards"></div><script type="module" src="host.js"></script></body></html>`
	var (
		errsMu sync.Mutex
		errs   []string // the proxy's upstream errors, for a failure's message
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{who}/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	})
	mux.HandleFunc("GET /{who}/host.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = w.Write(js)
	})
	mux.HandleFunc("/{who}/mcp", func(w http.ResponseWriter, r *http.Request) {
		tok, ok := tokens[r.PathValue("who")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = target.Path
			pr.Out.Header.Del("Origin")
			pr.Out.Header.Del("Cookie")
			pr.Out.Header.Set("Authorization", "Bearer "+tok)
		}, FlushInterval: -1, ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			errsMu.Lock()
			errs = append(errs, err.Error())
			errsMu.Unlock()
			w.WriteHeader(http.StatusBadGateway)
		}}).ServeHTTP(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, func() string {
		errsMu.Lock()
		defer errsMu.Unlock()
		if len(errs) == 0 {
			return "no upstream errors"
		}
		return strings.Join(errs, "; ")
	}
}
