package activities

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

// scanPlan is the plan as the client-side scan cut it before the server-side plan: every
// partRows-th key closes a part, the last key closes the last one.
func scanPlan(keys []string, partRows int) []contract.KeyRange {
	var (
		out   []contract.KeyRange
		after *string
	)
	for i := partRows - 1; i < len(keys)+partRows-1; i += partRows {
		through := keys[min(i, len(keys)-1)]
		out = append(out, contract.KeyRange{After: after, Through: through})
		after = &through
	}
	return out
}

// TestPlanOnServer: the server-side plan (one walk of the boundary keys, then a count of the
// last partial part) cuts exactly the ranges of the client-side scan, on both engines, for
// integer and text keys; a tenant over max_rows is refused exactly at the limit, and when the
// walk's bound proves it, before even the tail is counted; no row is ever read.
func TestPlanOnServer(t *testing.T) {
	for _, mk := range []func(testing.TB) backend{sqliteBackend, postgresBackend} {
		be := mk(t)
		t.Run(be.name, func(t *testing.T) {
			h := newHarness(t, be.datasets)
			keys := tenantKeys(t, be, "acme")
			for _, pr := range []int{1, 2, 3, 7, 700, 999, 1000, len(keys) - 1, len(keys), len(keys) + 1, 100_000} {
				j := job{id: "acme/export/plan", tenant: "acme", dataset: "customers", columns: []string{"id"}, partRows: pr}
				res, err := h.plan(j.planInput(h))
				if err != nil {
					t.Fatalf("part_rows %d: %v", pr, err)
				}
				if pr == 1 {
					// 5,000 one-row parts: within partsMax, and the same cut.
					if len(res.Ranges) != len(keys) {
						t.Fatalf("part_rows 1: %d ranges", len(res.Ranges))
					}
				}
				if want := scanPlan(keys, pr); res.Rows != len(keys) || !reflect.DeepEqual(res.Ranges, want) {
					t.Fatalf("part_rows %d: %d rows, %d ranges, want %d rows %d ranges", pr, res.Rows, len(res.Ranges), len(keys), len(want))
				}
			}
			// Text keys: the server's order is the keyset order the parts page by.
			var codes []string
			rows, err := be.db.Query(`SELECT code FROM accounts WHERE org = 'acme' ORDER BY code`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var c string
				if err := rows.Scan(&c); err != nil {
					t.Fatal(err)
				}
				codes = append(codes, c)
			}
			rows.Close()
			for _, pr := range []int{1, 2, 5, 100} {
				j := job{id: "acme/export/plan", tenant: "acme", dataset: "accounts", columns: []string{"code"}, partRows: pr}
				res, err := h.plan(j.planInput(h))
				if err != nil || !reflect.DeepEqual(res.Ranges, scanPlan(codes, pr)) {
					t.Fatalf("accounts part_rows %d: %+v, %v; want %v", pr, res.Ranges, err, scanPlan(codes, pr))
				}
			}
			// Nobody's rows: no ranges, no error.
			j := job{id: "acme/export/plan", tenant: "nobody", dataset: "customers", columns: []string{"id"}}
			if res, err := h.plan(j.planInput(h)); err != nil || res.Rows != 0 || res.Ranges != nil {
				t.Fatalf("empty tenant: %+v, %v", res, err)
			}

			// Too large. max_rows 1,400 is two parts of 700: the walk stops at its third step, which
			// proves the tenant over the limit. A NULL-key probe and that walk were all that was
			// sent: no tail count, no row read.
			small := be.datasets["customers"]
			small.MaxRows = 1400
			hs := newHarness(t, contract.Datasets{"customers": small})
			var logged int
			if be.statements != nil {
				logged = len(be.statements())
			}
			j = job{id: "acme/export/big", tenant: "acme", dataset: "customers", columns: []string{"id"}, partRows: 700}
			if _, err := hs.plan(j.planInput(hs)); appErrType(err) != contract.ErrTypeDatasetTooLarge {
				t.Fatalf("over max_rows: %v", err)
			}
			if len(hs.qs) != 2 || !strings.Contains(hs.qs[0], "IS NULL") || !strings.Contains(hs.qs[1], "RECURSIVE") {
				t.Fatalf("statements sent: %q", hs.qs)
			}
			if be.statements != nil {
				for _, s := range be.statements()[logged:] {
					if strings.Contains(s, "SELECT count(*), (SELECT") {
						t.Fatalf("the server saw the tail query: %q", s)
					}
				}
			}
			// Just within: max_rows equal to the rows plans, one over refuses.
			for _, c := range []struct {
				max int
				ok  bool
			}{{len(keys), true}, {len(keys) - 1, false}, {700, false}, {699, false}, {1, false}} {
				small.MaxRows = c.max
				hs := newHarness(t, contract.Datasets{"customers": small})
				res, err := hs.plan(j.planInput(hs))
				if c.ok != (err == nil) || (!c.ok && appErrType(err) != contract.ErrTypeDatasetTooLarge) || (c.ok && res.Rows != len(keys)) {
					t.Fatalf("max_rows %d for %d rows: %+v, %v", c.max, len(keys), res.Rows, err)
				}
			}
		})
	}
}

// TestChunkByteCap: with wide rows a chunk is cut at the byte cap before PageRows rows; the
// artifact is unchanged. (Resume byte-identity: TestExport*/resume.)
func TestChunkByteCap(t *testing.T) {
	defer func(v int64) { chunkRawMax = v }(chunkRawMax)
	chunkRawMax = 4096
	be := sqliteBackend(t)
	h := newHarness(t, be.datasets)
	cols := []string{"id", "name", "email", "country", "plan", "signup_date"}
	for _, format := range contract.Formats() {
		j := job{id: "acme/export/cap-" + format, tenant: "acme", dataset: "customers", format: format,
			columns: cols, partRows: 2000, pageRows: 1000}
		_, parts, m := h.run(t, j)
		want, _ := expected(t, be, be.datasets["customers"], "acme", cols, format)
		if got := h.artifact(t, m); !bytes.Equal(got, want) {
			t.Fatalf("%s: artifact differs", format)
		}
		if parts[0].Chunks <= 2 {
			t.Fatalf("%s: %d chunks for 2000 rows: the cap did not cut", format, parts[0].Chunks)
		}
	}
}

// TestThrottleClosesQuery: a part of a rate-limited dataset never sleeps with its query open.
// It stops after a chunk, closes the query, waits, and resumes after the chunk's last key; the
// artifact is the one an unthrottled run writes.
func TestThrottleClosesQuery(t *testing.T) {
	// Parallel: about 1 s of it is the rate limit's pauses, idle time the package's other tests
	// can use; it sets no package variable (TestChunkByteCap, which does, is not parallel).
	t.Parallel()
	be := sqliteBackend(t)
	d := be.datasets["customers"]
	// 5,000 rows in about a second: each 500-row chunk is due 100 ms after the last, far longer
	// than reading it takes even on a loaded machine, so the part pauses after most chunks.
	d.MaxRowsPerSecond = 5_000
	be.datasets["customers"] = d
	h := newHarness(t, be.datasets)
	cols := []string{"id", "name", "email", "country", "plan", "signup_date"}
	j := job{id: "acme/export/throttled", tenant: "acme", dataset: "customers", format: contract.FormatCSV,
		columns: cols, partRows: 5000, pageRows: 500}
	_, parts, m := h.run(t, j)
	want, _ := expected(t, be, d, "acme", cols, contract.FormatCSV)
	if got := h.artifact(t, m); !bytes.Equal(got, want) {
		t.Fatal("throttled artifact differs from the expected one")
	}
	resumed := 0
	h.mu.Lock()
	for _, q := range h.qs {
		if strings.Contains(q, `"id" > $2`) {
			resumed++
		}
	}
	h.mu.Unlock()
	if len(parts) != 1 || parts[0].Chunks != 10 || resumed < 2 {
		t.Fatalf("%d parts, %d chunks, %d resumed queries: the part did not close its query to wait", len(parts), parts[0].Chunks, resumed)
	}
}

// TestDuplicateKeysRefused: a key column that is not unique for the tenant cannot be paged by
// keyset (a resume after a chunk's last key would skip that key's other rows). The export is
// refused as ExportInvalid, by the plan when the boundaries show it, else by the part that
// meets the repeated key, on both engines and both read paths. A NULL key is refused by the plan.
func TestDuplicateKeysRefused(t *testing.T) {
	for _, mk := range []func(testing.TB) backend{sqliteBackend, postgresBackend} {
		be := mk(t)
		t.Run(be.name, func(t *testing.T) {
			mustExec(t, be.db, `CREATE TABLE dup (n bigint, org text NOT NULL, label text)`)
			// 10 rows, key 5 twice, in the middle of a part for part_rows 4 (and key 9 twice
			// across what would be a boundary).
			for i, n := range []int{1, 2, 3, 4, 5, 5, 6, 7, 9, 9} {
				mustExec(t, be.db, `INSERT INTO dup VALUES ($1, 'acme', $2)`, n, fmt.Sprintf("row %d", i))
			}
			d := contract.Dataset{Name: "dup", Driver: be.datasets["customers"].Driver, DSN: be.datasets["customers"].DSN,
				Table: "dup", TenantColumn: "org", KeyColumn: "n", KeyType: contract.KeyTypeInteger,
				Columns: []contract.Column{{Name: "n"}, {Name: "label"}}}.WithDefaults()
			ds := contract.Datasets{"dup": d}
			for _, pr := range []int{4, 100} {
				for _, sqlOnly := range []bool{false, true} {
					h := newHarness(t, ds)
					h.a.sqlRowsOnly = sqlOnly
					j := job{id: fmt.Sprintf("acme/export/dup-%d-%v", pr, sqlOnly), tenant: "acme", dataset: "dup",
						format: contract.FormatCSV, columns: []string{"n", "label"}, partRows: pr, pageRows: 3}
					err := func() error {
						plan, err := h.plan(j.planInput(h))
						if err != nil {
							return err
						}
						for i, r := range plan.Ranges {
							if _, err := h.part(j.partInput(h, i+1, r), nil); err != nil {
								return err
							}
						}
						return nil
					}()
					if appErrType(err) != contract.ErrTypeExportInvalid || !strings.Contains(err.Error(), "not unique") {
						t.Fatalf("part_rows %d, sql only %v: %v", pr, sqlOnly, err)
					}
				}
			}
			// A NULL key is refused by the plan (SQLite sorts NULL first, PostgreSQL last:
			// either way the walk must not begin).
			mustExec(t, be.db, `INSERT INTO dup VALUES (NULL, 'acme', 'no key')`)
			for _, pr := range []int{1, 4, 100} {
				h := newHarness(t, ds)
				j := job{id: "acme/export/nullkey", tenant: "acme", dataset: "dup", columns: []string{"n"}, partRows: pr}
				if _, err := h.plan(j.planInput(h)); appErrType(err) != contract.ErrTypeExportInvalid || !strings.Contains(err.Error(), "NULL") {
					t.Fatalf("NULL key, part_rows %d: %v", pr, err)
				}
			}
		})
	}
}
