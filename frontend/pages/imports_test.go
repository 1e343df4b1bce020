package pages

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPagesImportNoCore pins the direction of the pages' port: package frontend implements Jobs
// and imports this package, never the reverse, and the pages get plain data, so they link
// neither the workflows layer nor activities' SQL drivers (doc.go).
func TestPagesImportNoCore(t *testing.T) {
	const mod = "github.com/jobgate/jobgate/"
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, is := range af.Imports {
			p, _ := strconv.Unquote(is.Path.Value)
			if p == mod+"frontend" || strings.HasPrefix(p, mod+"workflows") || strings.HasPrefix(p, mod+"activities") || strings.HasPrefix(p, mod+"cmd") {
				t.Errorf("%s imports %s: package pages must not", f, p)
			}
		}
	}
}
