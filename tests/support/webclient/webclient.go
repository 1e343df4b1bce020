// Package webclient is the HTTP client tests use to walk sign-in pages as a browser without
// script would: a cookie jar, a timeout, and redirects followed only where the test says.
// It is test support (like net/http/httptest) and imports nothing of jobgate, so any package's
// tests may use it; it must never be imported by non-test code.
package webclient

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Timeout bounds each request of a New client: a hung server fails the test, not the run.
const Timeout = 30 * time.Second

// maxRedirects bounds the redirects a client follows in one request (net/http's default).
const maxRedirects = 10

// New returns a client with a fresh cookie jar and a Timeout. It follows a redirect only while
// follow says so of the next URL, and at most maxRedirects in a row; nil follows none, so the
// test checks each hop itself. Where it stops, the redirect response itself is returned (with
// its Location), never an error.
func New(follow func(next *url.URL) bool) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		panic(err) // cookiejar.New fails only on a bad PublicSuffixList; it gets none
	}
	return &http.Client{Jar: jar, Timeout: Timeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if follow == nil || len(via) > maxRedirects || !follow(req.URL) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

// All follows every redirect (up to the limit): for New when only the end of the walk matters.
func All(*url.URL) bool { return true }

// MustPage fails t unless a page answered status want and its body holds every one of subs
// (status and body as the test read them).
func MustPage(t testing.TB, status int, body string, want int, subs ...string) {
	t.Helper()
	if status != want {
		t.Fatalf("status %d, want %d; body:\n%s", status, want, body)
	}
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Fatalf("page lacks %q:\n%s", s, body)
		}
	}
}
