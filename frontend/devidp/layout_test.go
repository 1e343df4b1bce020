package devidp

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPagesShareLayout: both pages come out of the shared layout — the development-only banner,
// a viewport for phones, and (on the device page) a labelled code field. A page parsed without
// layout.html, or executed under the layout's name, renders empty and fails here.
func TestPagesShareLayout(t *testing.T) {
	p := startIdPWith(t, Options{})
	resp, err := http.Get(p.issuer + "/device")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	page := string(b)
	for _, want := range []string{
		`<meta name="viewport" content="width=device-width, initial-scale=1">`,
		`<title>jobgate dev device sign-in (development only)</title>`,
		`<strong>Development only.</strong>`,
		`<label for="user_code">`, `<input id="user_code" name="user_code"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("device page lacks %s:\n%s", want, page)
		}
	}
	var sb strings.Builder
	if err := loginTmpl.Execute(&sb, map[string]any{"ClientID": "c", "Action": "/x", "Users": []map[string]string{{"Subject": "ana", "Tenant": "acme", "ScopeList": "jobs:read"}}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<title>jobgate dev sign-in (development only)</title>`, `<strong>Development only.</strong>`, `value="ana">ana</button>`} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("login page lacks %s:\n%s", want, sb.String())
		}
	}
}
