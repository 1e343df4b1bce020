package activities

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/tests/support/pgtest"
)

// TestPlanExportApproval: the plan carries the worker catalog's approval settings for the
// requested columns, changed scope or not, so the workflow asks with them.
func TestPlanExportApproval(t *testing.T) {
	be := sqliteBackend(t)
	cust := be.datasets["customers"]
	cust.AllowSelfApproval, cust.ApprovalTimeout = true, contract.Duration(3*time.Hour)
	h := newHarness(t, contract.Datasets{"customers": cust})
	j := job{id: "acme/export/plan", tenant: "acme", dataset: "customers", columns: []string{"id", "email"}}
	want := &contract.PlanApproval{Required: true, AllowSelf: true, Sensitive: []string{"email"}, Timeout: contract.Duration(3 * time.Hour)}
	for _, digest := range []string{j.digest(h), "sha256:stale"} {
		in := j.planInput(h)
		in.ConfigDigest = digest
		plan, err := h.plan(in)
		if err != nil || !reflect.DeepEqual(plan.Approval, want) || plan.ScopeChanged != (digest != j.digest(h)) {
			t.Fatalf("digest %s: %+v %+v, %v", digest, plan, plan.Approval, err)
		}
	}
	j.columns = []string{"id"}
	if plan, err := h.plan(j.planInput(h)); err != nil || plan.Approval == nil || plan.Approval.Required || !plan.Approval.AllowSelf {
		t.Fatalf("no sensitive column: %+v, %v", plan.Approval, err)
	}
}

func TestEncodeValues(t *testing.T) {
	ts := time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.FixedZone("X", 3600))
	for _, c := range []struct {
		v          any
		date       bool
		json, text string
	}{
		{nil, false, `null`, ``},
		{int64(-42), false, `-42`, `-42`},
		{3.5, false, `3.5`, `3.5`},
		{1e21, false, `1e+21`, `1e+21`},
		{1e20, false, `100000000000000000000`, `100000000000000000000`},
		{0.000001, false, `0.000001`, `0.000001`},
		{1e-7, false, `1e-7`, `1e-7`},
		{float32(0.1), false, `0.1`, `0.1`},
		{true, false, `true`, `true`},
		{"a\"b\\c\n\t<&>\u2028é", false, `"a\"b\\c\n\t<&>\u2028é"`, "a\"b\\c\n\t<&>\u2028é"},
		{"bad\xffutf8", false, `"bad` + "\uFFFD" + `utf8"`, "bad\uFFFDutf8"},
		{[]byte("text"), false, `"text"`, `text`},
		{[]byte{0xff, 0x00, 0x10}, false, `"/wAQ"`, `/wAQ`},
		{ts, false, `"2024-02-29T22:59:58.123456789Z"`, `2024-02-29T22:59:58.123456789Z`},
		{time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), true, `"2024-02-29"`, `2024-02-29`},
	} {
		for _, format := range []string{contract.FormatJSONL, contract.FormatCSV} {
			e := newRowEncoder(format, []string{"v"})
			e.reset(nil)
			e.date[0] = c.date
			if err := e.row([]any{c.v}); err != nil {
				t.Fatal(err)
			}
			if format == contract.FormatCSV {
				r, err := csv.NewReader(bytes.NewReader(e.buf)).Read()
				if err != nil || r[0] != c.text {
					t.Errorf("csv %#v: %q, %v; want %q", c.v, r, err, c.text)
				}
				continue
			}
			if got, want := string(e.buf), `{"v":`+c.json+"}\n"; got != want {
				t.Errorf("jsonl %#v: %s want %s", c.v, got, want)
			}
			var back map[string]any
			if err := json.Unmarshal(e.buf, &back); err != nil {
				t.Errorf("jsonl %#v is not JSON: %v", c.v, err)
			}
		}
	}
	// Deterministic compression: equal input, equal bytes.
	a, _ := gzipMember([]byte("same input"))
	b, _ := gzipMember([]byte("same input"))
	if !bytes.Equal(a, b) {
		t.Fatal("gzip output is not deterministic")
	}
	if got := artifactFileName(`acme/export/my key "q"/ü`, "csv"); got != "acme-export-my_key__q.csv.gz" {
		t.Fatalf("file name %q", got)
	}
}

func TestArtifactStoreMem(t *testing.T) {
	ctx := context.Background()
	s, err := OpenArtifactStore(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.ReadManifest(ctx, "acme/export/none", firstRunTest); !errors.Is(err, contract.ErrArtifactGone) {
		t.Fatalf("missing manifest: %v", err)
	}
	if _, err := s.OpenArtifact(ctx, contract.Manifest{Object: "exports/x/export.csv.gz"}); !errors.Is(err, contract.ErrArtifactGone) {
		t.Fatalf("missing artifact: %v", err)
	}
	if _, err := s.OpenArtifact(ctx, contract.Manifest{Object: "secrets/key"}); !errors.Is(err, contract.ErrArtifactGone) {
		t.Fatalf("object outside exports/: %v", err)
	}
	if got := ExportPrefix("acme/export/my-key", ""); got != "exports/acme%2Fexport%2Fmy-key/" {
		t.Fatalf("legacy prefix %q", got)
	}
	if got := ExportPrefix("acme/export/my-key", "run/1"); got != "exports/runs/run%2F1/acme%2Fexport%2Fmy-key/" {
		t.Fatalf("prefix %q", got)
	}
}

// BenchmarkExport100k exports 100,000 rows (all six demo columns, default part and page
// sizes) end to end in-process: plan, parts one after another (or 4 at a time), finalize.
//
//	go test ./activities -run '^$' -bench Export100k -benchtime 3x
func BenchmarkExport100k(b *testing.B) {
	const total = 160_000 // 5 of every 8 ids are acme's: 100,000 rows
	for _, engine := range []string{"sqlite", "postgres"} {
		b.Run(engine, func(b *testing.B) {
			var ds contract.Datasets
			if engine == "sqlite" {
				path := filepath.Join(b.TempDir(), "big.db")
				db, err := sql.Open("sqlite", path)
				if err != nil {
					b.Fatal(err)
				}
				mustExec(b, db, demoSchema)
				mustExec(b, db, demoIndex)
				mustExec(b, db, `WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < $1)
					INSERT INTO customers SELECT x, CASE WHEN x % 8 IN (2, 5, 7) THEN 'globex' ELSE 'acme' END,
					'Customer ' || x, 'customer' || x || '@example.com', CASE WHEN x % 97 = 0 THEN NULL ELSE 'US' END,
					'pro', date('2022-01-01', '+' || (x % 1000) || ' days') FROM g`, total)
				db.Close()
				ds = contract.DemoDatasets(path)
			} else {
				s := pgtest.Start(b)
				s.Exec(b, `CREATE TABLE customers (id bigint PRIMARY KEY, tenant text NOT NULL, name text NOT NULL,
					email text NOT NULL, country text, plan text NOT NULL, signup_date date NOT NULL)`)
				s.Exec(b, `CREATE INDEX customers_tenant_id ON customers (tenant, id)`)
				s.Exec(b, `INSERT INTO customers SELECT x, CASE WHEN x % 8 IN (2, 5, 7) THEN 'globex' ELSE 'acme' END,
					'Customer ' || x, 'customer' || x || '@example.com', CASE WHEN x % 97 = 0 THEN NULL ELSE 'US' END,
					'pro', date '2022-01-01' + (x % 1000) FROM generate_series(1, $1::int) x`, total)
				s.Exec(b, `ANALYZE customers`)
				d := contract.DemoDatasets("")["customers"]
				d.Driver, d.DSN = contract.DriverPostgres, s.DSN
				ds = contract.Datasets{"customers": d}
			}
			cols := []string{"id", "name", "email", "country", "plan", "signup_date"}
			for _, v := range []struct {
				format string
				conc   int
			}{{contract.FormatJSONL, 1}, {contract.FormatCSV, 1}, {contract.FormatJSONL, 4}} {
				b.Run(fmt.Sprintf("%s/parts-in-flight=%d", v.format, v.conc), func(b *testing.B) {
					h := newHarness(b, ds)
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						j := job{id: fmt.Sprintf("acme/export/bench-%d", i), tenant: "acme", dataset: "customers",
							format: v.format, columns: cols}
						m := h.runConcurrent(b, j, v.conc)
						if m.Rows != 100_000 {
							b.Fatalf("%d rows", m.Rows)
						}
					}
					b.ReportMetric(float64(100_000*b.N)/b.Elapsed().Seconds(), "rows/s")
				})
			}
		})
	}
}
