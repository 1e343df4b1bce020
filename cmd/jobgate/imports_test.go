package main

import (
	"strings"
	"testing"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestClientCodeImportsWireNotServer: the client commands decode the server's answers through
// frontend/wire, never the server package itself; only main.go links the server (through
// cmd/app, for the dev and serve subcommands).
func TestClientCodeImportsWireNotServer(t *testing.T) {
	for f, ps := range testenv.Imports(t, ".", false) {
		for _, p := range ps {
			switch {
			case p == "github.com/jobgate/jobgate/frontend" || strings.HasPrefix(p, "github.com/jobgate/jobgate/workflows") && p != "github.com/jobgate/jobgate/workflows/jobstate":
				t.Errorf("%s imports %s; client code uses github.com/jobgate/jobgate/frontend/wire", f, p)
			case p == "github.com/jobgate/jobgate/cmd/app" && f != "main.go":
				t.Errorf("%s imports cmd/app; only main.go wires the server subcommands", f)
			}
		}
	}
}
