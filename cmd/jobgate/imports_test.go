package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestClientCodeImportsWireNotServer: the client commands decode the server's answers through
// frontend/wire, never the server package itself; only main.go links the server (through
// cmd/app, for the dev and serve subcommands).
func TestClientCodeImportsWireNotServer(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
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
			switch {
			case p == "github.com/jobgate/jobgate/frontend" || strings.HasPrefix(p, "github.com/jobgate/jobgate/workflows") && p != "github.com/jobgate/jobgate/workflows/jobstate":
				t.Errorf("%s imports %s; client code uses github.com/jobgate/jobgate/frontend/wire", f, p)
			case p == "github.com/jobgate/jobgate/cmd/app" && f != "main.go":
				t.Errorf("%s imports cmd/app; only main.go wires the server subcommands", f)
			}
		}
	}
}
