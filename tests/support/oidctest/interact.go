package oidctest

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Login acts as the human at authorizeURL (a full authorization request URL of this provider):
// it follows the provider's pages with hc's cookie jar (nil: a fresh one), picks subject on the
// login page, lets consent be granted, and returns the URL the provider redirects the browser
// to: the client's redirect URI with code and state (or error). If hc's jar already holds a
// session, the login page may be skipped.
func (p *Provider) Login(t testing.TB, hc *http.Client, authorizeURL, subject string) string {
	t.Helper()
	c := p.browser(t, hc)
	pg := p.do(t, c, http.MethodGet, authorizeURL, nil)
	if pg.loc == "" {
		pg = p.pickUser(t, c, pg, subject)
	}
	if pg.loc == "" {
		t.Fatalf("oidctest: login as %q did not return to the client: %s (status %d):\n%s", subject, pg.url, pg.code, pg.body)
	}
	return pg.loc
}

// Deny acts as a human who presses Deny on the login page; it returns the client's redirect
// URL, which carries error=access_denied.
func (p *Provider) Deny(t testing.TB, hc *http.Client, authorizeURL string) string {
	t.Helper()
	c := p.browser(t, hc)
	pg := p.do(t, c, http.MethodGet, authorizeURL, nil)
	pg = p.pickUser(t, c, pg, "")
	if pg.loc == "" {
		t.Fatalf("oidctest: deny did not return to the client: %s (status %d):\n%s", pg.url, pg.code, pg.body)
	}
	return pg.loc
}

// deviceConfirmPage opens the verification page for uriOrCode (verification_uri_complete, or
// a bare user code) and submits the code: the confirm page.
func (p *Provider) deviceConfirmPage(t testing.TB, c *http.Client, uriOrCode string) page {
	t.Helper()
	u := uriOrCode
	if !strings.Contains(u, "://") {
		u = p.Issuer + "/device?user_code=" + url.QueryEscape(uriOrCode)
	}
	// GET with user_code answers an auto-submitting form (xsrf + user_code); submit it.
	pg := p.do(t, c, http.MethodGet, u, nil)
	action, vals := formOf(t, pg, "")
	pg = p.do(t, c, http.MethodPost, action, vals)
	if m := errorsRe.FindStringSubmatch(pg.body); m != nil {
		t.Fatalf("oidctest: the device page refused the code %q: %s", uriOrCode, m[1])
	}
	return pg
}

// ApproveDevice acts as the human who opens the verification URI (verification_uri_complete,
// or a bare user code), confirms the code and signs in as subject: the device's poll then gets
// its tokens.
func (p *Provider) ApproveDevice(t testing.TB, uriOrCode, subject string) {
	t.Helper()
	c := p.browser(t, nil)
	pg := p.deviceConfirmPage(t, c, uriOrCode)
	action, vals := formOf(t, pg, "op.deviceConfirmForm")
	pg = p.do(t, c, http.MethodPost, action, vals)
	pg = p.pickUser(t, c, pg, subject)
	if !doneRe.MatchString(pg.body) {
		t.Fatalf("oidctest: device approval as %q did not finish: %s (status %d):\n%s", subject, pg.url, pg.code, pg.body)
	}
}

// DenyDevice acts as the human who aborts on the device confirm page: the device's poll then
// gets access_denied.
func (p *Provider) DenyDevice(t testing.TB, uriOrCode string) {
	t.Helper()
	c := p.browser(t, nil)
	pg := p.deviceConfirmPage(t, c, uriOrCode)
	action, vals := formOf(t, pg, "op.deviceConfirmForm")
	vals.Del("confirm")
	vals.Set("abort", "yes")
	pg = p.do(t, c, http.MethodPost, action, vals)
	if !strings.Contains(pg.body, "AbortedError") {
		t.Fatalf("oidctest: aborting the device code did not answer the aborted page: %s (status %d):\n%s", pg.url, pg.code, pg.body)
	}
}
