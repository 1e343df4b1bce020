package contract

import (
	"strings"
	"testing"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

const activitiesPkg = "github.com/jobgate/jobgate/activities"

// TestContractIsALeaf pins the layer rule this package exists for: it imports only the
// standard library (no database/sql) and authz, and the frontend and workflows reach the
// activities only through it, so neither links a SQL driver (activities does).
func TestContractIsALeaf(t *testing.T) {
	for f, ps := range testenv.Imports(t, ".", false) {
		for _, p := range ps {
			if p == "database/sql" || strings.Contains(p, ".") && p != "github.com/jobgate/jobgate/authz" {
				t.Errorf("%s imports %s; contract imports only the standard library and authz", f, p)
			}
		}
	}
	for _, dir := range []string{"../../frontend", "../../workflows"} {
		for f, ps := range testenv.Imports(t, dir, true) {
			for _, p := range ps {
				if p == activitiesPkg {
					t.Errorf("%s imports %s; use %s/contract (activities links the SQL drivers)", f, p, activitiesPkg)
				}
			}
		}
	}
}
