package oidctest

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// browser is hc (or a fresh client with a cookie jar) that follows redirects only while they
// stay on the provider: the client's redirect URI (often a loopback port nobody listens on) is
// returned, not visited.
func (p *Provider) browser(t testing.TB, hc *http.Client) *http.Client {
	t.Helper()
	var c http.Client
	if hc != nil {
		c = *hc
	}
	if c.Jar == nil {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Jar = jar
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > 20 {
			return fmt.Errorf("oidctest: more than 20 redirects")
		}
		if !strings.HasPrefix(req.URL.String(), p.Issuer+"/") {
			return http.ErrUseLastResponse
		}
		return nil
	}
	return &c
}

// page is one response the helpers looked at.
type page struct {
	url  *url.URL
	code int
	body string
	loc  string // Location of a redirect that left the provider
}

func (p *Provider) do(t testing.TB, c *http.Client, method, u string, form url.Values) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatalf("oidctest: %s %s: %v", method, u, err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("oidctest: %s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	pg := page{url: resp.Request.URL, code: resp.StatusCode, body: string(b)}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if err != nil {
			t.Fatalf("oidctest: bad Location %q", resp.Header.Get("Location"))
		}
		pg.loc = loc.String()
	}
	return pg
}

var (
	formRe   = regexp.MustCompile(`(?is)<form[^>]*\baction="([^"]*)"[^>]*>(.*?)</form>`)
	inputRe  = regexp.MustCompile(`(?is)<input\b[^>]*>`)
	nameRe   = regexp.MustCompile(`(?i)\bname="([^"]*)"`)
	valueRe  = regexp.MustCompile(`(?i)\bvalue="([^"]*)"`)
	loginRe  = regexp.MustCompile(`action="(/interaction/[^"/]+/login)"`)
	doneRe   = regexp.MustCompile(`id="device-done"`)
	errorsRe = regexp.MustCompile(`(?is)<p>error: ([^<]*)</p>`)
)

// formOf is the action and the input fields of the form with id (the provider's own device forms).
func formOf(t testing.TB, pg page, id string) (string, url.Values) {
	t.Helper()
	for _, m := range formRe.FindAllStringSubmatch(pg.body, -1) {
		whole := m[0]
		if id != "" && !strings.Contains(whole, `id="`+id+`"`) {
			continue
		}
		vals := url.Values{}
		for _, in := range inputRe.FindAllString(m[2], -1) {
			n := nameRe.FindStringSubmatch(in)
			if n == nil {
				continue
			}
			v := ""
			if vm := valueRe.FindStringSubmatch(in); vm != nil {
				v = html.UnescapeString(vm[1])
			}
			vals.Set(html.UnescapeString(n[1]), v)
		}
		action, err := pg.url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatalf("oidctest: bad form action %q", m[1])
		}
		return action.String(), vals
	}
	t.Fatalf("oidctest: no form %q on %s (status %d):\n%s", id, pg.url, pg.code, pg.body)
	return "", nil
}

// pickUser is the login page's POST: sub picks a user, "" denies.
func (p *Provider) pickUser(t testing.TB, c *http.Client, pg page, sub string) page {
	t.Helper()
	m := loginRe.FindStringSubmatch(pg.body)
	if m == nil {
		t.Fatalf("oidctest: expected the login page, got %s (status %d):\n%s", pg.url, pg.code, pg.body)
	}
	form := url.Values{"sub": {sub}}
	if sub == "" {
		form = url.Values{"action": {"deny"}}
	}
	return p.do(t, c, http.MethodPost, p.Issuer+m[1], form)
}
