package pages

import (
	"strings"
	"testing"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestPagesImportNoCore pins the direction of the pages' port: package frontend implements Jobs
// and imports this package, never the reverse, and the pages get plain data, so they link
// neither the workflows layer nor activities' SQL drivers (doc.go).
func TestPagesImportNoCore(t *testing.T) {
	const mod = "github.com/jobgate/jobgate/"
	for f, ps := range testenv.Imports(t, ".", false) {
		for _, p := range ps {
			if p == mod+"frontend" || strings.HasPrefix(p, mod+"workflows") || strings.HasPrefix(p, mod+"activities") || strings.HasPrefix(p, mod+"cmd") {
				t.Errorf("%s imports %s: package pages must not", f, p)
			}
		}
	}
}
