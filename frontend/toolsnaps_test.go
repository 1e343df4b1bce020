package frontend

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/jobgate/jobgate/frontend/jobcore"
)

// TestToolSnapshots keeps every tool's public schema in __toolsnaps__/<tool>.snap, so any schema
// change is a visible diff: every default kind's, and the conformance fixtures' (served only by
// `jobgate dev --conformance-fixtures`). Regenerate with:
// UPDATE_TOOLSNAPS=true go test ./frontend -run TestToolSnapshots
func TestToolSnapshots(t *testing.T) {
	f, err := kindsFrontend(t, jobcore.DefaultKinds(jobcore.FixtureKind())...)
	if err != nil {
		t.Fatal(err)
	}
	update := os.Getenv("UPDATE_TOOLSNAPS") == "true"
	seen := map[string]bool{}
	for _, td := range f.Tools() {
		name := td.Tool.Name
		seen[name+".snap"] = true
		got, err := json.MarshalIndent(td.Tool, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		path := filepath.Join("__toolsnaps__", name+".snap")
		if update {
			if err := os.MkdirAll("__toolsnaps__", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: no snapshot (run with UPDATE_TOOLSNAPS=true): %v", name, err)
		}
		if string(got) != string(want) {
			t.Errorf("%s schema changed; review and regenerate with UPDATE_TOOLSNAPS=true\n--- got\n%s", name, got)
		}
	}
	entries, _ := os.ReadDir("__toolsnaps__")
	for _, e := range entries {
		if !seen[e.Name()] {
			t.Errorf("stale snapshot %s for a tool that no longer exists", e.Name())
		}
	}
}

func newTestFrontend(t *testing.T) *Frontend {
	t.Helper()
	f, err := kindsFrontend(t) // the default kinds
	if err != nil {
		t.Fatal(err)
	}
	return f
}
