package testenv

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Imports lists the import paths of each non-test Go file in dir, by file path; with
// recursive, of every directory below it too (testdata skipped). The layer tests of several
// packages (who may import what) read imports through it.
func Imports(t testing.TB, dir string, recursive bool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && (!recursive || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		out[path] = []string{}
		for _, is := range f.Imports {
			p, _ := strconv.Unquote(is.Path.Value)
			out[path] = append(out[path], p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("imports of %s: %v", dir, err)
	}
	if len(out) == 0 {
		t.Fatalf("imports of %s: no Go files", dir)
	}
	return out
}
