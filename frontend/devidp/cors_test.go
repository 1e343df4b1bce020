package devidp

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestNoBrowserOriginsOnTokenEndpoints: pkg/op answers every origin with CORS (credentials
// included), so a page on another site could start a device flow and read device_code, or
// read the token endpoint's answers. Now a request naming any browser Origin gets 403 there,
// without CORS headers, and a preflight gets none either. The device page names the client
// asking, so the person approving sees who it is. Before the fix device_authorization answered
// 200 with Access-Control-Allow-Origin: http://evil.example.
func TestNoBrowserOriginsOnTokenEndpoints(t *testing.T) {
	p := startIdP(t, "")
	d := p.discover(t)
	const evil = "http://evil.example"
	post := func(u string, form url.Values, origin string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	devForm := url.Values{"client_id": {CLIClientID}, "scope": {"jobs:admin"}}
	tokForm := url.Values{"grant_type": {grantDevice}, "device_code": {"x"}, "client_id": {CLIClientID}}
	for name, tc := range map[string]struct {
		u    string
		form url.Values
	}{"device_authorization": {p.issuer + "/device_authorization", devForm}, "token": {d.TokenEndpoint, tokForm}} {
		for _, origin := range []string{evil, "null", strings.TrimSuffix(p.issuer, "/oidc")} {
			resp, body := post(tc.u, tc.form, origin)
			if acao := resp.Header.Get("Access-Control-Allow-Origin"); acao != "" || resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "Origin") {
				t.Errorf("%s with Origin %s: %s, Access-Control-Allow-Origin %q, %s; want 403 naming Origin, no CORS", name, origin, resp.Status, acao, body)
			}
		}
		pre, _ := http.NewRequest(http.MethodOptions, tc.u, nil)
		pre.Header.Set("Origin", evil)
		pre.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(pre)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if acao := resp.Header.Get("Access-Control-Allow-Origin"); acao != "" {
			t.Errorf("%s preflight from %s: Access-Control-Allow-Origin %q, want none", name, evil, acao)
		}
	}
	// Without a browser Origin (the CLI, jobgate's pages server-side) both still answer.
	resp, body := post(p.issuer+"/device_authorization", devForm, "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "device_code") {
		t.Fatalf("device_authorization without Origin: %s %s", resp.Status, body)
	}
	uc := regexpUserCode.FindStringSubmatch(body)
	if uc == nil {
		t.Fatalf("no user_code in %s", body)
	}
	page := get(t, browser(), p.issuer+"/device?user_code="+url.QueryEscape(uc[1]))
	b, _ := io.ReadAll(page.Body)
	page.Body.Close()
	for _, want := range []string{cliClientName, CLIClientID, "jobs:admin"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("device page for %s lacks %q (who asks, for what):\n%s", CLIClientID, want, b)
		}
	}
}

var regexpUserCode = regexp.MustCompile(`"user_code":"([^"]+)"`)
