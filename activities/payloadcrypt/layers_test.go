package payloadcrypt

import (
	"strings"
	"testing"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestLeaf pins why this package sits apart from activities: serve links it, and nothing
// under frontend may link a SQL driver. It imports no database package and, of jobgate's,
// only authz.
func TestLeaf(t *testing.T) {
	for f, ps := range testenv.Imports(t, ".", false) {
		for _, p := range ps {
			if strings.HasPrefix(p, "database/") || strings.Contains(p, "pgx") || strings.Contains(p, "sqlite") ||
				strings.HasPrefix(p, "github.com/jobgate/jobgate/") && p != "github.com/jobgate/jobgate/authz" {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}
