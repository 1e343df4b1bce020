package contract

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseDatasets(t *testing.T) {
	c, err := ParseDatasets([]byte(catalogJSON))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); !reflect.DeepEqual(got, []string{"accounts", "customers"}) {
		t.Fatalf("names %v", got)
	}
	cu, ac := c["customers"], c["accounts"]
	if cu.KeyType != KeyTypeInteger || cu.MaxRows != MaxRowsDefault || cu.Retention.D() != 7*24*time.Hour ||
		cu.ApprovalTimeout.D() != 2*time.Hour || cu.AllowSelfApproval {
		t.Fatalf("customers defaults: %+v", cu)
	}
	if ac.Driver != DriverSQLite || ac.KeyType != KeyTypeText || ac.MaxRows != 50 || ac.Retention.D() != 48*time.Hour ||
		ac.ApprovalTimeout.D() != 24*time.Hour || !ac.AllowSelfApproval {
		t.Fatalf("accounts: %+v", ac)
	}
	if got := cu.DefaultColumns(); !reflect.DeepEqual(got, []string{"id", "plan"}) {
		t.Fatalf("default columns %v", got)
	}
	if !cu.AnySensitive([]string{"plan", "email"}) || cu.AnySensitive([]string{"id", "plan", "nope"}) {
		t.Fatal("AnySensitive")
	}
	if col, ok := cu.Column("email"); !ok || !col.Sensitive {
		t.Fatal("Column")
	}
	if _, ok := cu.Column("Email"); ok {
		t.Fatal("Column is exact")
	}

	empty, err := LoadDatasets("")
	if err != nil || empty == nil || len(empty) != 0 {
		t.Fatalf("LoadDatasets(\"\") = %v, %v", empty, err)
	}
	path := filepath.Join(t.TempDir(), "datasets.json")
	if err := os.WriteFile(path, []byte(catalogJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	if fromFile, err := LoadDatasets(path); err != nil || !reflect.DeepEqual(fromFile, c) {
		t.Fatalf("LoadDatasets(file) = %v, %v", fromFile, err)
	}
}

func TestParseDatasetsRejects(t *testing.T) {
	valid := `{"name": "ds", "dsn": "x.db", "table": "t", "tenant_column": "tenant", "key_column": "id", "columns": [{"name": "id"}]}`
	with := func(old, new string) string {
		if !strings.Contains(valid, old) {
			t.Fatalf("test bug: %q not in %q", old, valid)
		}
		return `{"datasets": [` + strings.Replace(valid, old, new, 1) + `]}`
	}
	for _, c := range []struct{ in, want string }{
		{with(`"table": "t"`, `"table": "t\"; DROP TABLE x; --"`), `dataset "ds": table `},
		{with(`"table": "t"`, `"table": "1t"`), `table "1t"`},
		{with(`"tenant_column": "tenant"`, `"tenant_column": "ten ant"`), `tenant_column "ten ant"`},
		{with(`"key_column": "id"`, `"key_column": ""`), `key_column ""`},
		{with(`[{"name": "id"}]`, `[{"name": "id"}, {"name": "e-mail"}]`), `columns[1].name "e-mail"`},
		{with(`[{"name": "id"}]`, `[{"name": "id"}, {"name": "ID"}]`), `columns[1].name "ID": listed twice`},
		{with(`[{"name": "id"}]`, `[]`), `columns: at least one`},
		{with(`[{"name": "id"}]`, `[{"name": "id", "sensitive": true}]`), `columns[0].sensitive`},
		{with(`"table": "t"`, `"tabel": "t"`), `dataset "ds": json: unknown field "tabel"`},
		{with(`[{"name": "id"}]`, `[{"name": "id", "secret": true}]`), `unknown field "secret"`},
		{with(`"name": "ds"`, `"name": "DS"`), `name "DS"`},
		{with(`"dsn": "x.db"`, `"dsn": "x.db", "driver": "mysql"`), `dataset "ds": driver "mysql"`},
		{with(`"dsn": "x.db"`, `"dsn": "x.db", "key_type": "uuid"`), `key_type "uuid"`},
		{with(`"dsn": "x.db"`, `"dsn": ""`), `dsn: required`},
		{with(`"dsn": "x.db"`, `"dsn": "x.db", "max_rows": -1`), `max_rows -1`},
		{with(`"dsn": "x.db"`, `"dsn": "x.db", "retention": "soon"`), `dataset "ds": retention: `},
		{with(`"dsn": "x.db"`, `"dsn": "x.db", "approval_surfaces": ["page", "tool"]`), `dataset "ds": approval_surfaces[1] "tool": want "page" or "app"`},
		{with(`"dsn": "x.db"`, `"dsn": "x.db", "approval_surfaces": ["app", "app"]`), `approval_surfaces[1] "app": listed twice`},
		{with(`"dsn": "x.db"`, `"dsn": "x.db", "approval_surfaces": "page"`), `dataset "ds": json: cannot unmarshal string`},
		{`{"datasets": [` + valid + `, ` + valid + `]}`, `dataset "ds": name: configured twice`},
		{`{"datasets": []} {}`, `trailing data`},
		{`{"sets": []}`, `unknown field "sets"`},
	} {
		_, err := ParseDatasets([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s\n  got %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

func TestConfigDigest(t *testing.T) {
	base := DemoDatasets("/data/demo.db")["customers"]
	d0 := base.ConfigDigest()
	if !strings.HasPrefix(d0, "sha256:") || len(d0) != len("sha256:")+64 {
		t.Fatalf("digest %q", d0)
	}
	same := func(name string, f func(*Dataset)) {
		d := base
		d.Columns = append([]Column(nil), base.Columns...)
		f(&d)
		if got := d.ConfigDigest(); got != d0 {
			t.Errorf("%s changed the digest", name)
		}
	}
	differs := func(name string, f func(*Dataset)) {
		d := base
		d.Columns = append([]Column(nil), base.Columns...)
		f(&d)
		if got := d.ConfigDigest(); got == d0 {
			t.Errorf("%s did not change the digest", name)
		}
	}
	same("a new DSN", func(d *Dataset) { d.DSN = "/elsewhere/demo.db?password=rotated" })
	same("retention", func(d *Dataset) { d.Retention = Duration(time.Hour) })
	same("approval timeout", func(d *Dataset) { d.ApprovalTimeout = Duration(time.Minute) })
	same("spelling out defaults", func(d *Dataset) { d.Driver, d.KeyType, d.MaxRows = "", "", 0 })
	differs("a column becoming sensitive", func(d *Dataset) { d.Columns[3].Sensitive = true })
	differs("a column becoming non-sensitive", func(d *Dataset) { d.Columns[2].Sensitive = false })
	differs("an added column", func(d *Dataset) { d.Columns = append(d.Columns, Column{Name: "phone"}) })
	differs("a removed column", func(d *Dataset) { d.Columns = d.Columns[:5] })
	differs("reordered columns", func(d *Dataset) { d.Columns[0], d.Columns[1] = d.Columns[1], d.Columns[0] })
	differs("another table", func(d *Dataset) { d.Table = "customers_v2" })
	differs("another tenant column", func(d *Dataset) { d.TenantColumn = "org" })
	differs("another key column", func(d *Dataset) { d.KeyColumn = "name" })
	differs("another key type", func(d *Dataset) { d.KeyType = KeyTypeText })
	differs("another driver", func(d *Dataset) { d.Driver = DriverPostgres })
	differs("max_rows", func(d *Dataset) { d.MaxRows = 10 })
	differs("self approval", func(d *Dataset) { d.AllowSelfApproval = true })
	differs("human approval surfaces", func(d *Dataset) { d.ApprovalSurfaces = []string{ApprovalSurfacePage, ApprovalSurfaceApp} })
	same("no approval surfaces", func(d *Dataset) { d.ApprovalSurfaces = []string{} })

	// The same dataset read from a file digests alike.
	parsed, err := ParseDatasets([]byte(`{"datasets": [{"name": "customers", "dsn": "other.db", "table": "customers",
	  "tenant_column": "tenant", "key_column": "id", "columns": [{"name": "id"}, {"name": "name"},
	  {"name": "email", "sensitive": true}, {"name": "country"}, {"name": "plan"}, {"name": "signup_date"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if parsed["customers"].ConfigDigest() != d0 {
		t.Fatal("catalog file and DemoDatasets digest differently")
	}
}

const catalogJSON = `{"datasets": [
  {"name": "customers", "driver": "postgres", "dsn": "postgres://u:p@db/app", "table": "customers",
   "tenant_column": "tenant", "key_column": "id",
   "columns": [{"name": "id"}, {"name": "email", "sensitive": true}, {"name": "plan"}],
   "approval_timeout": "2h"},
  {"name": "accounts", "dsn": "/data/a.db", "table": "accounts", "tenant_column": "org",
   "key_column": "code", "key_type": "text", "columns": [{"name": "code"}, {"name": "label"}],
   "max_rows": 50, "allow_self_approval": true, "retention": "48h"}
]}`
