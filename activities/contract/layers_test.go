package contract

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const activitiesPkg = "github.com/jobgate/jobgate/activities"

// imports lists the imports of each non-test Go file under dir (recursively, skipping testdata),
// by file.
func imports(t *testing.T, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, is := range f.Imports {
			p, _ := strconv.Unquote(is.Path.Value)
			out[path] = append(out[path], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestContractIsALeaf pins the layer rule this package exists for: it imports only the
// standard library (no database/sql) and authz, and the frontend and workflows reach the
// activities only through it, so neither links a SQL driver (activities does).
func TestContractIsALeaf(t *testing.T) {
	for f, ps := range imports(t, ".") {
		for _, p := range ps {
			if p == "database/sql" || strings.Contains(p, ".") && p != "github.com/jobgate/jobgate/authz" {
				t.Errorf("%s imports %s; contract imports only the standard library and authz", f, p)
			}
		}
	}
	for _, dir := range []string{"../../frontend", "../../workflows"} {
		for f, ps := range imports(t, dir) {
			for _, p := range ps {
				if p == activitiesPkg {
					t.Errorf("%s imports %s; use %s/contract (activities links the SQL drivers)", f, p, activitiesPkg)
				}
			}
		}
	}
}
