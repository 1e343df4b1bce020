// Package chrome drives a real headless Chromium for browser tests (chromedp): starting it with
// a fresh profile, steps bounded by a timeout, the waits those tests need (a page at a URL, a
// page showing a text), cookies read and set through the DevTools protocol, and screenshots at
// a desktop and a phone width. It is test support (like net/http/httptest): it must never be
// imported by non-test code, and it imports nothing of jobgate but tests/support/testenv.
package chrome

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// ChromiumPath is Debian's chromium (apt-get install chromium); never a downloaded browser.
const ChromiumPath = "/usr/bin/chromium"

// StepTimeout bounds each Step (and Eval, Cookie): a page that never comes fails the test.
const StepTimeout = 30 * time.Second

// Require stops the test (testenv.Missing: a skip, or a failure under CI) when Chromium is not
// installed. Call it before the expensive setup a browser test needs.
func Require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(ChromiumPath); err != nil {
		testenv.Missing(t, ChromiumPath+" is not installed (apt-get install chromium)")
	}
}

// Browser is one headless Chromium with a fresh profile, closed when the test ends.
type Browser struct {
	t   testing.TB
	ctx context.Context
}

// Option is one more setting of the Chromium New starts (TrustCert).
type Option = chromedp.ExecAllocatorOption

// TrustCert has Chromium accept a TLS server certificate with cert's public key although no
// root it knows signed it (a devpki certificate on a loopback https server): Chromium's
// ignore-certificate-errors-spki-list, which it honours with a user data dir of its own (New
// gives it one). Only that key: every other certificate is checked as usual.
func TrustCert(cert *x509.Certificate) Option {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return chromedp.Flag("ignore-certificate-errors-spki-list", base64.StdEncoding.EncodeToString(sum[:]))
}

// New starts Chromium (Require first) with a fresh profile, a 1200×900 window and opts.
func New(t testing.TB, opts ...Option) *Browser {
	t.Helper()
	Require(t)
	all := append([]Option{chromedp.ExecPath(ChromiumPath), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1200, 900),
		chromedp.UserDataDir(t.TempDir())}, opts...)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), all...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser; no timeout on this first call
		t.Fatal(err)
	}
	return &Browser{t: t, ctx: ctx}
}

// Step runs the actions within StepTimeout or fails the test, naming the step.
func (b *Browser) Step(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// poll calls done every 50 ms until it says so or ctx ends; waiting names what it waits for.
func poll(ctx context.Context, done func() (bool, string)) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, waiting := done()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", waiting, ctx.Err())
		case <-tick.C:
		}
	}
}

// At waits until the page's URL starts with prefix and the document has loaded. A call that
// meets the page mid-navigation ("Inspected target navigated or closed") is asked again: a
// form's submit races the first look (frontend/pages TestBrowser's cross-site step failed so
// under load).
func At(prefix string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		return poll(ctx, func() (bool, string) {
			loc, err := chromedp.Location()(ctx, tg)
			if err != nil {
				return false, "waiting for " + prefix + ", the page's location not readable: " + err.Error()
			}
			ready, err := chromedp.Evaluate[string]("document.readyState")(ctx, tg)
			return err == nil && strings.HasPrefix(loc, prefix) && ready == "complete", "waiting for " + prefix + ", at " + loc
		})
	})
}

// Shows waits until the page's text holds want: a form posted to the page's own URL leaves
// the URL as it was, so At alone cannot tell the answer from the page it came from.
func Shows(want string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		return poll(ctx, func() (bool, string) {
			body, err := chromedp.Evaluate[string]("document.readyState == 'complete' ? document.body.innerText : ''")(ctx, tg)
			return err == nil && strings.Contains(body, want), fmt.Sprintf("waiting for %q on the page", want)
		})
	})
}

// Lacks waits until the loaded page's text no longer holds text: a page that first shows
// something and then replaces it (a value shown raw until it is decoded) has settled.
func Lacks(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		return poll(ctx, func() (bool, string) {
			body, err := chromedp.Evaluate[string]("document.readyState == 'complete' ? document.body.innerText : null")(ctx, tg)
			return err == nil && body != "" && !strings.Contains(body, text), fmt.Sprintf("waiting for %q to leave the page", text)
		})
	})
}

// Eval evaluates js on the current page and returns its string result, or fails the test.
func (b *Browser) Eval(js string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("%s: %v", js, err)
	}
	return s
}

// Text is the current page's text as a person sees it (innerText).
func (b *Browser) Text() string { b.t.Helper(); return b.Eval("document.body.innerText") }

// Cookie is the browser's cookie name for origin (nil: none), read through the DevTools
// protocol: an HttpOnly session cookie is invisible to page script.
func (b *Browser) Cookie(origin, name string) *network.Cookie {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{origin + "/"}})
	if err != nil {
		b.t.Fatal(err)
	}
	for _, c := range res.Cookies {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// SetCookie sets (or replaces) cookie name for origin as a server would have: HttpOnly,
// SameSite=Lax, Path=/.
func SetCookie(origin, name, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		yes := true
		_, err := chromedp.Call(ctx, network.SetCookie, network.SetCookieParams{Name: name, Value: value, URL: origin + "/",
			Path: "/", HTTPOnly: &yes, SameSite: network.CookieSameSiteLax})
		return err
	})
}

// Shoot saves full-page screenshots of the current page at 1200 and 390 px wide as
// dir/name-1200.png and dir/name-390.png (dir is created), then restores the window.
func (b *Browser) Shoot(dir, name string) {
	b.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	for _, w := range []int64{1200, 390} {
		var png []byte
		b.Step("screenshot "+name, chromedp.EmulateViewport(w, 844), chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			var err error
			png, err = chromedp.FullScreenshot(100)(ctx, tg)
			return err
		}))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.png", name, w)), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
	b.Step("viewport back", chromedp.EmulateViewport(1200, 900))
}

// Frame is a Browser for an iframe of the current page that Chrome runs as a target of its
// own (a cross-site or sandboxed frame: the page's context cannot reach into it; chromedp
// docs/API.md §19): the first iframe target whose URL starts with prefix, waited for within
// StepTimeout. Its steps, Eval and Text run in the frame; screenshots stay the page's.
func (b *Browser) Frame(prefix string) *Browser {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	var id target.ID
	err := poll(ctx, func() (bool, string) {
		infos, err := chromedp.Targets(b.ctx)
		if err != nil {
			return false, "waiting for an iframe at " + prefix + ": " + err.Error()
		}
		for _, in := range infos {
			if in.Type == "iframe" && strings.HasPrefix(in.URL, prefix) {
				id = in.TargetID
				return true, ""
			}
		}
		return false, "waiting for an iframe at " + prefix
	})
	if err != nil {
		b.t.Fatal(err)
	}
	fctx, fcancel := chromedp.NewContext(b.ctx, chromedp.WithTargetID(id))
	b.t.Cleanup(fcancel)
	// The first run attaches, and the attached target lives as long as that run's context: it
	// must be fctx itself, not a step's timeout (as New's first call).
	if err := chromedp.Do(fctx); err != nil {
		b.t.Fatalf("attaching to the iframe at %s: %v", prefix, err)
	}
	return &Browser{t: b.t, ctx: fctx}
}
