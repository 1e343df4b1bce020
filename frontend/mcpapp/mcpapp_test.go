package mcpapp

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestCardUpToDate rebuilds the card from card/ (its lockfile's packages) and finds the
// committed card.html byte for byte the same: what is embedded is what the sources build.
func TestCardUpToDate(t *testing.T) {
	testenv.Heavy(t, "runs esbuild on Node.js over card/node_modules (npm ci in .ci/run)")
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node not found on PATH: the approval card builds with Node.js 20+")
	}
	if _, err := os.Stat(filepath.Join("card", "node_modules", "esbuild", "package.json")); err != nil {
		testenv.Missing(t, "card/node_modules is not installed: run npm ci in frontend/mcpapp/card")
	}
	out := filepath.Join(t.TempDir(), "card.html")
	cmd := exec.Command(node, "build.mjs", out)
	cmd.Dir = "card"
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node build.mjs: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != CardHTML() {
		t.Fatal("card.html is not what card/ builds: run go generate ./frontend/mcpapp and commit card.html")
	}
}

// TestCardCSP: the card allows its own inline script and style by hash and nothing else: no
// network, no eval, no frames, no form posts, no other origin.
func TestCardCSP(t *testing.T) {
	m := regexp.MustCompile(`<meta http-equiv="Content-Security-Policy" content="([^"]+)">`).FindStringSubmatch(CardHTML())
	if m == nil {
		t.Fatal("the card has no CSP")
	}
	csp := map[string]string{}
	for _, d := range strings.Split(m[1], ";") {
		f := strings.Fields(d)
		csp[f[0]] = strings.Join(f[1:], " ")
	}
	for dir, want := range map[string]string{"default-src": "'none'", "connect-src": "'none'", "frame-src": "'none'",
		"object-src": "'none'", "base-uri": "'none'", "form-action": "'none'", "img-src": "data:"} {
		if csp[dir] != want {
			t.Errorf("%s %q, want %q", dir, csp[dir], want)
		}
	}
	for _, dir := range []string{"script-src", "style-src"} {
		if !regexp.MustCompile(`^'sha256-[A-Za-z0-9+/]{43}='$`).MatchString(csp[dir]) {
			t.Errorf("%s %q: want exactly one hash", dir, csp[dir])
		}
	}
	if strings.Contains(CardHTML(), "<script src") || strings.Contains(CardHTML(), "<link") || strings.Count(CardHTML(), "<script") != 1 {
		t.Error("the card loads something: one inline script and nothing else")
	}
}

// TestListTools: a host without apps gets the list without decide_approval and nothing
// changed; a host with apps gets the carded tools naming the card, the server's own tools
// untouched.
func TestListTools(t *testing.T) {
	own := []*mcp.Tool{{Name: "get_export"}, {Name: "resume_export", Meta: mcp.Meta{"x": 1}}, {Name: jobcore.DecideToolName}}
	lr := &mcp.ListToolsResult{Tools: own}
	plain := listTools(lr, false, map[string]bool{"get_export": true})
	if len(plain.Tools) != 2 || plain.Tools[0] != own[0] || plain.Tools[1] != own[1] {
		t.Fatalf("without apps: %+v", plain.Tools)
	}
	apps := listTools(lr, true, map[string]bool{"get_export": true})
	if len(apps.Tools) != 3 || apps.Tools[0] == own[0] || own[0].Meta != nil || apps.Tools[1] != own[1] {
		t.Fatalf("with apps: %+v (own %+v)", apps.Tools, own[0])
	}
	if ui, _ := apps.Tools[0].Meta["ui"].(map[string]any); ui["resourceUri"] != jobcore.ApprovalCardURI {
		t.Fatalf("get_export's _meta %v", apps.Tools[0].Meta)
	}
}

// FuzzDeclaresApps: any client capabilities decode without a panic, and only an extension
// entry listing the card's MIME type declares MCP Apps.
func FuzzDeclaresApps(f *testing.F) {
	for _, s := range []string{`{"extensions":{"io.modelcontextprotocol/ui":{"mimeTypes":["text/html;profile=mcp-app"]}}}`,
		`{"extensions":{"io.modelcontextprotocol/ui":{}}}`, `{"extensions":{"io.modelcontextprotocol/ui":{"mimeTypes":"text/html;profile=mcp-app"}}}`,
		`{"extensions":null}`, `[]`, `"x"`, `{"elicitation":{"form":{}}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, caps string) {
		var v any
		if json.Unmarshal([]byte(caps), &v) != nil {
			return
		}
		got := jobcore.DeclaresApps(map[string]any{mcp.MetaKeyClientCapabilities: v})
		want := strings.Contains(caps, jobcore.AppsExtension) && strings.Contains(caps, jobcore.AppMIMEType)
		if got && !want {
			t.Fatalf("%s declares apps", caps)
		}
	})
}
