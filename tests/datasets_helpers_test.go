package tests

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
)

// demoDB seeds the demo customers database (5,000 acme rows, 3,000 globex rows, a sensitive
// email column) in a fresh directory and returns its path.
func demoDB(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "demo.db")
	must(t, activities.SeedDemoDB(path))
	return path
}

// catalogJSON renders datasets as a catalog file ({"datasets":[...]}).
func catalogJSON(t testing.TB, ds ...contract.Dataset) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"datasets": ds})
	must(t, err)
	return string(b)
}

// demoDataset is the dev stack's "customers" dataset over db, changed by edit if given.
func demoDataset(db string, edit func(*contract.Dataset)) contract.Dataset {
	d := contract.DemoDatasets(db)["customers"]
	d.Columns = append([]contract.Column(nil), d.Columns...)
	if edit != nil {
		edit(&d)
	}
	return d
}
