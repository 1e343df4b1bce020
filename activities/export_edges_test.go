package activities

// Edge cases an adversarial review of the export engine found (each failed before its fix):
// a column type changed under a prepared statement, a repeated key split at a chunk cut by a
// resume or a throttle pause, and the plan over key types without max() (uuid) or with
// collations.

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/tests/support/pgtest"
)

// TestPGRawColumnTypeChanged: a column type change after the raw path ran on a pooled
// connection fails at most once, with the server's error, like the database/sql path.
func TestPGRawColumnTypeChanged(t *testing.T) {
	s := pgtest.Start(t)
	s.Exec(t, `CREATE TABLE sc (id bigint PRIMARY KEY, tenant text NOT NULL, v integer)`)
	s.Exec(t, `INSERT INTO sc VALUES (1,'acme',1),(2,'acme',2),(3,'acme',3)`)
	d := contract.Dataset{Name: "sc", Driver: contract.DriverPostgres, DSN: s.DSN, Table: "sc", TenantColumn: "tenant",
		KeyColumn: "id", KeyType: contract.KeyTypeInteger, Columns: []contract.Column{{Name: "id"}, {Name: "v"}}}.WithDefaults()
	ds := contract.Datasets{"sc": d}
	for _, sqlOnly := range []bool{false, true} {
		h := newHarness(t, ds)
		h.a.sqlRowsOnly = sqlOnly
		run := func(i int) error {
			j := job{id: fmt.Sprintf("acme/export/sc-%v-%d", sqlOnly, i), tenant: "acme", dataset: "sc",
				format: contract.FormatCSV, columns: []string{"id", "v"}, partRows: 100, pageRows: 100}
			plan, err := h.plan(j.planInput(h))
			if err != nil {
				return err
			}
			for k, r := range plan.Ranges {
				if _, err := h.part(j.partInput(h, k+1, r), nil); err != nil {
					return err
				}
			}
			return nil
		}
		if err := run(0); err != nil {
			t.Fatal(err)
		}
		typ := "bigint"
		if sqlOnly {
			typ = "integer"
		}
		s.Exec(t, `ALTER TABLE sc ALTER COLUMN v TYPE `+typ)
		var errs []string
		for i := 1; i <= 4; i++ {
			err := run(i)
			errs = append(errs, fmt.Sprint(err))
		}
		t.Logf("sqlOnly=%v after ALTER: %s", sqlOnly, strings.Join(errs, " | "))
		failed := 0
		for _, e := range errs {
			if e != "<nil>" {
				failed++
			}
			if strings.Contains(e, "unexpected result formats") {
				t.Errorf("sqlOnly=%v: the server's error is masked: %s", sqlOnly, e)
				break
			}
		}
		if failed > 1 {
			t.Errorf("sqlOnly=%v: %d of %d attempts after the ALTER failed (the sql path fails once)", sqlOnly, failed, len(errs))
		}
	}
}

// TestDuplicateKeySplitAtResume: a heartbeat resume whose LastKey is the first of two equal
// keys is refused, not one row short.
func TestDuplicateKeySplitAtResume(t *testing.T) {
	for _, mk := range []func(testing.TB) backend{sqliteBackend, postgresBackend} {
		be := mk(t)
		t.Run(be.name, func(t *testing.T) {
			mustExec(t, be.db, `CREATE TABLE dup2 (n bigint NOT NULL, org text NOT NULL, label text)`)
			for i, n := range []int{1, 2, 3, 3, 4} {
				mustExec(t, be.db, `INSERT INTO dup2 VALUES ($1, 'acme', $2)`, n, fmt.Sprintf("row %d", i))
			}
			d := contract.Dataset{Name: "dup2", Driver: be.datasets["customers"].Driver, DSN: be.datasets["customers"].DSN,
				Table: "dup2", TenantColumn: "org", KeyColumn: "n", KeyType: contract.KeyTypeInteger,
				Columns: []contract.Column{{Name: "n"}, {Name: "label"}}}.WithDefaults()
			h := newHarness(t, contract.Datasets{"dup2": d})
			j := job{id: "acme/export/dup2", tenant: "acme", dataset: "dup2", format: contract.FormatCSV,
				columns: []string{"n", "label"}, partRows: 100, pageRows: 3}
			plan, err := h.plan(j.planInput(h))
			if err != nil {
				t.Fatalf("plan: %v", err)
			}
			if _, err := h.part(j.partInput(h, 1, plan.Ranges[0]), nil); err == nil {
				t.Fatalf("clean attempt: not refused")
			}
			last := "3"
			res, err := h.part(j.partInput(h, 1, plan.Ranges[0]), &PartProgress{NextChunk: 1, LastKey: &last, Rows: 3, Bytes: 10})
			if err == nil || !strings.Contains(err.Error(), "not unique") {
				t.Errorf("resumed attempt after the first of two equal keys: %+v, %v (5 rows in the table)", res, err)
			}
		})
	}
}

// TestDuplicateKeySplitAtPause: a throttle pause between two equal keys is refused, not one
// row short (PostgreSQL raw path).
func TestDuplicateKeySplitAtPause(t *testing.T) {
	be := postgresBackend(t)
	mustExec(t, be.db, `CREATE TABLE dup3 (n bigint NOT NULL, org text NOT NULL, label text)`)
	for i, n := range []int{1, 2, 3, 3, 4} {
		mustExec(t, be.db, `INSERT INTO dup3 VALUES ($1, 'acme', $2)`, n, fmt.Sprintf("row %d", i))
	}
	d := contract.Dataset{Name: "dup3", Driver: contract.DriverPostgres, DSN: be.datasets["customers"].DSN,
		Table: "dup3", TenantColumn: "org", KeyColumn: "n", KeyType: contract.KeyTypeInteger, MaxRowsPerSecond: 3,
		Columns: []contract.Column{{Name: "n"}, {Name: "label"}}}.WithDefaults()
	h := newHarness(t, contract.Datasets{"dup3": d})
	j := job{id: "acme/export/dup3", tenant: "acme", dataset: "dup3", format: contract.FormatCSV,
		columns: []string{"n", "label"}, partRows: 100, pageRows: 3}
	plan, err := h.plan(j.planInput(h))
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	res, err := h.part(j.partInput(h, 1, plan.Ranges[0]), nil)
	if err == nil || !strings.Contains(err.Error(), "not unique") {
		t.Errorf("throttled part paused between two equal keys: %+v, %v (5 rows in the table)", res, err)
	}
}

// TestPlanKeyTypes: the plan's ranges equal the row_number() ranges over integer, text,
// char, name, uuid keys and collations, and the parts export every row.
func TestPlanKeyTypes(t *testing.T) {
	s := pgtest.Start(t)
	db := s.DB(t)
	types := []struct{ typ, kt string }{
		{"bigint", contract.KeyTypeInteger}, {"integer", contract.KeyTypeInteger}, {"smallint", contract.KeyTypeInteger},
		{"text", contract.KeyTypeText}, {"varchar(12)", contract.KeyTypeText}, {"char(6)", contract.KeyTypeText}, {`text COLLATE "C"`, contract.KeyTypeText},
		{`text COLLATE "en-x-icu"`, contract.KeyTypeText}, {"name", contract.KeyTypeText}, {"uuid", contract.KeyTypeText},
	}
	for ti, ty := range types {
		tbl := fmt.Sprintf("pk%d", ti)
		if _, err := db.Exec(fmt.Sprintf(`CREATE TABLE %s (k %s NOT NULL, org text NOT NULL)`, tbl, ty.typ)); err != nil {
			t.Logf("%s: %v", ty.typ, err)
			continue
		}
		for i := 0; i < 23; i++ {
			var v any = i*7 - 60
			if ty.kt == contract.KeyTypeText {
				v = []string{"a", "B", "b", "á", "A", "z", "Z", " x", "x", "_", "-a", "aa"}[i%12] + fmt.Sprint(i/12)
				if ty.typ == "uuid" {
					v = fmt.Sprintf("00000000-0000-0000-0000-%012d", (i*7919)%1000)
				}
			}
			mustExec(t, db, fmt.Sprintf(`INSERT INTO %s VALUES ($1, 'acme')`, tbl), v)
		}
		mustExec(t, db, fmt.Sprintf(`INSERT INTO %s VALUES ($1, 'solo')`, tbl), map[bool]any{true: map[bool]string{true: "10000000-0000-0000-0000-000000000000", false: "q"}[ty.typ == "uuid"], false: 5}[ty.kt == contract.KeyTypeText])
		d := contract.Dataset{Name: tbl, Driver: contract.DriverPostgres, DSN: s.DSN, Table: tbl, TenantColumn: "org", KeyColumn: "k",
			KeyType: ty.kt, Columns: []contract.Column{{Name: "k"}}}.WithDefaults()
		h := newHarness(t, contract.Datasets{tbl: d})
		for _, tenant := range []string{"acme", "solo"} {
			for _, pr := range []int{1, 2, 3, 5, 22, 23, 24, 1000} {
				j := job{id: "acme/export/x", tenant: tenant, dataset: tbl, format: contract.FormatCSV, columns: []string{"k"}, partRows: pr}
				plan, err := h.plan(j.planInput(h))
				if err != nil {
					t.Errorf("%s pr %d: %v", ty.typ, pr, err)
					continue
				}
				// the old algorithm
				var total int64
				db.QueryRow(fmt.Sprintf(`SELECT count(*) FROM %s WHERE org=$1`, tbl), tenant).Scan(&total)
				rows, err := db.Query(fmt.Sprintf(`SELECT b.k FROM (SELECT k, row_number() OVER (ORDER BY k) rn FROM %s WHERE org=$1) b WHERE rn %% $2 = 0 OR rn = $3 ORDER BY b.k`, tbl), tenant, pr, total)
				if err != nil {
					t.Fatal(err)
				}
				var want []contract.KeyRange
				var after *string
				for rows.Next() {
					var kv any
					rows.Scan(&kv)
					kk, err := keyString(d, kv)
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, contract.KeyRange{After: after, Through: kk})
					after = &kk
				}
				rows.Close()
				if !reflect.DeepEqual(plan.Ranges, want) {
					t.Errorf("%s %s pr %d: got %d ranges, want %d", ty.typ, tenant, pr, len(plan.Ranges), len(want))
				}
				// and the parts export every row
				n := 0
				for i, r := range plan.Ranges {
					p, err := h.part(j.partInput(h, i+1, r), nil)
					if err != nil {
						t.Errorf("%s part: %v", ty.typ, err)
					}
					n += p.Rows
				}
				if int64(n) != total {
					t.Errorf("%s %s pr %d: %d rows exported of %d", ty.typ, tenant, pr, n, total)
				}
			}
		}
	}
}
