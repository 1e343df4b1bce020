package activities

import (
	"compress/gzip"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/tests/support/pgtest"
)

// BenchmarkExportLevers exports one tenant's rows (columns id,name,country,plan,signup_date;
// 1M by default, JOBGATE_BENCH_ROWS to change) in-process: plan, parts (2 and 4 in flight),
// finalize. Every iteration first runs the single-stream limit on the same data, so the two
// figures share the machine's state: on PostgreSQL one COPY (FORMAT csv, HEADER) of the same
// rows, on SQLite one SELECT through the same encoder; both through compress/gzip level 6
// into io.Discard. It reports rows/s, limit-rows/s and their ratio.
//
//	go test ./activities -run '^$' -bench ExportLevers -benchtime 1x
func BenchmarkExportLevers(b *testing.B) {
	rowsWanted := 1_000_000
	if s := os.Getenv("JOBGATE_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("JOBGATE_BENCH_ROWS=%q", s)
		}
		rowsWanted = n
	}
	// JOBGATE_BENCH_PART_ROWS and JOBGATE_BENCH_PAGE_ROWS override the defaults, to sweep them.
	partRows, _ := strconv.Atoi(os.Getenv("JOBGATE_BENCH_PART_ROWS"))
	pageRows, _ := strconv.Atoi(os.Getenv("JOBGATE_BENCH_PAGE_ROWS"))
	total := rowsWanted / 5 * 8 // 5 of every 8 ids are acme's
	cols := []string{"id", "name", "country", "plan", "signup_date"}
	for _, engine := range []string{"postgres", "sqlite"} {
		b.Run(engine, func(b *testing.B) {
			var (
				ds    contract.Datasets
				limit func(b *testing.B, format string) int
			)
			if engine == "sqlite" {
				path := filepath.Join(b.TempDir(), "big.db")
				db, err := sql.Open("sqlite", path)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				mustExec(b, db, demoSchema)
				mustExec(b, db, demoIndex)
				mustExec(b, db, `WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < $1)
					INSERT INTO customers SELECT x, CASE WHEN x % 8 IN (2, 5, 7) THEN 'globex' ELSE 'acme' END,
					'Customer ' || x, 'customer' || x || '@example.com', CASE WHEN x % 97 = 0 THEN NULL ELSE 'US' END,
					'pro', date('2022-01-01', '+' || (x % 1000) || ' days') FROM g`, total)
				ds = contract.DemoDatasets(path)
				limit = func(b *testing.B, format string) int { return sqliteLimit(b, db, format, cols) }
			} else {
				s := pgtest.Start(b)
				s.Exec(b, `CREATE TABLE customers (id bigint PRIMARY KEY, tenant text NOT NULL, name text NOT NULL,
					email text NOT NULL, country text, plan text NOT NULL, signup_date date NOT NULL)`)
				s.Exec(b, `CREATE INDEX customers_tenant_id ON customers (tenant, id)`)
				s.Exec(b, `INSERT INTO customers SELECT x, CASE WHEN x % 8 IN (2, 5, 7) THEN 'globex' ELSE 'acme' END,
					'Customer ' || x, 'customer' || x || '@example.com', CASE WHEN x % 97 = 0 THEN NULL ELSE 'US' END,
					'pro', date '2022-01-01' + (x % 1000) FROM generate_series(1, $1::int) x`, total)
				s.Exec(b, `VACUUM ANALYZE customers`)
				d := contract.DemoDatasets("")["customers"]
				d.Driver, d.DSN = contract.DriverPostgres, s.DSN
				ds = contract.Datasets{"customers": d}
				limit = func(b *testing.B, _ string) int { return pgCopyLimit(b, s.DSN) }
			}
			for _, format := range []string{contract.FormatCSV, contract.FormatJSONL} {
				for _, conc := range []int{2, 4} {
					b.Run(fmt.Sprintf("%s/parts-in-flight=%d", format, conc), func(b *testing.B) {
						h := newHarness(b, ds)
						// JOBGATE_BENCH_SQL_ONLY=1 reads PostgreSQL through database/sql, to weigh the raw path.
						h.a.sqlRowsOnly = os.Getenv("JOBGATE_BENCH_SQL_ONLY") == "1"
						var jobTime, limitTime, finTime, planTime time.Duration
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							t0 := time.Now()
							if n := limit(b, format); n != rowsWanted {
								b.Fatalf("limit read %d rows", n)
							}
							t1 := time.Now()
							j := job{id: fmt.Sprintf("acme/export/levers-%d", i), tenant: "acme", dataset: "customers",
								format: format, columns: cols, partRows: partRows, pageRows: pageRows}
							m, plan, fin := runTimed(b, h, j, conc)
							finTime += fin
							planTime += plan
							jobTime += time.Since(t1)
							limitTime += t1.Sub(t0)
							if m.Rows != rowsWanted {
								b.Fatalf("%d rows", m.Rows)
							}
						}
						rps := float64(rowsWanted*b.N) / jobTime.Seconds()
						lps := float64(rowsWanted*b.N) / limitTime.Seconds()
						b.ReportMetric(rps, "rows/s")
						b.ReportMetric(lps, "limit-rows/s")
						b.ReportMetric(rps/lps, "ratio")
						b.ReportMetric(finTime.Seconds()/jobTime.Seconds(), "finalize-share")
						b.ReportMetric(planTime.Seconds()/jobTime.Seconds(), "plan-share")
					})
				}
			}
		})
	}
}

// pgCopyLimit is the single-stream limit: one COPY of the tenant's rows as csv with
// a header, through compress/gzip level 6. It returns the rows copied.
func pgCopyLimit(b *testing.B, dsn string) int {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	zw, _ := gzip.NewWriterLevel(io.Discard, 6)
	tag, err := conn.PgConn().CopyTo(ctx, zw, `COPY (SELECT id, name, country, plan, signup_date FROM customers
		WHERE tenant = 'acme' ORDER BY id) TO STDOUT (FORMAT csv, HEADER)`)
	if err != nil {
		b.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	return int(tag.RowsAffected())
}

// sqliteLimit is SQLite's own limit: one SELECT of the tenant's rows through the export's row
// encoder and compress/gzip level 6.
func sqliteLimit(b *testing.B, db *sql.DB, format string, cols []string) int {
	rows, err := db.Query(`SELECT id, name, country, plan, signup_date FROM customers WHERE tenant = 'acme' ORDER BY id`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		b.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(io.Discard, 6)
	enc := newRowEncoder(format, cols)
	enc.reset(types)
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	n := 0
	flush := func() {
		if _, err := enc.drain(zw); err != nil {
			b.Fatal(err)
		}
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			b.Fatal(err)
		}
		if err := enc.row(vals); err != nil {
			b.Fatal(err)
		}
		if n++; n%1000 == 0 {
			flush()
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	flush()
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	return n
}

// runTimed is harness.runConcurrent, also returning how long the plan and finalize took.
func runTimed(b *testing.B, h *harness, j job, conc int) (contract.Manifest, time.Duration, time.Duration) {
	t0 := time.Now()
	plan, err := h.plan(j.planInput(h))
	if err != nil {
		b.Fatal(err)
	}
	planTime := time.Since(t0)
	parts := make([]contract.PartResult, len(plan.Ranges))
	errs := make([]error, len(plan.Ranges))
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i, r := range plan.Ranges {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			parts[i], errs[i] = h.part(j.partInput(h, i+1, r), nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	t1 := time.Now()
	m, err := h.finalize(j.finalizeInput(parts))
	if err != nil {
		b.Fatal(err)
	}
	return m, planTime, time.Since(t1)
}
