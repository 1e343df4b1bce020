package tests

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/tests/support/pgtest"
	"github.com/jobgate/jobgate/workflows"
)

// BenchmarkGetEval measures one get_eval through the whole stack (HTTP, bearer verification,
// MCP stateless session, handle check, Describe, policy, view) against its baseline: the bare
// DescribeWorkflowExecution the frontend itself must make. A succeeded job also reads its
// result from the close event (a second Temporal call). Report the ratios:
//
//	go test ./tests -run '^$' -bench GetEval -benchtime 2s
func BenchmarkGetEval(b *testing.B) {
	bundle := setup(b)
	cs := bundle.session(ana, 0, "")
	v := mustView(b, call(b, cs, "start_eval", startArgs("bench-"+randHex(4), 1, map[string]any{"episode_ms": 0})))
	waitStatus(b, cs, v.Handle, workflows.StatusSucceeded, 30*time.Second)
	b.Run("Baseline/Describe", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := bundle.temporal.DescribeWorkflowExecution(ctx, v.JobID, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	waiting := mustView(b, call(b, cs, "start_eval", startArgs("bench-"+randHex(4), 101, nil)))
	waitStatus(b, cs, waiting.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	b.Run("Frontend/get_eval_awaiting_input", func(b *testing.B) {
		args := map[string]any{"handle": waiting.Handle}
		for b.Loop() {
			if o := call(b, cs, "get_eval", args); o.Err != nil {
				b.Fatal(o.Err.Message)
			}
		}
	})
	b.Run("Frontend/get_eval_succeeded", func(b *testing.B) {
		args := map[string]any{"handle": v.Handle}
		for b.Loop() {
			if o := call(b, cs, "get_eval", args); o.Err != nil {
				b.Fatal(o.Err.Message)
			}
		}
	})
}

// BenchmarkExport100k measures an export of 100,000 rows end to end through the real stack
// (MCP start, Temporal workflow, plan, parts on the worker, finalize, download) on SQLite and
// on PostgreSQL, with default part and page sizes, and reports rows/s:
//
//	go test ./tests -run '^$' -bench Export100k -benchtime 1x -count 3
func BenchmarkExport100k(b *testing.B) {
	const rows = 100_000
	sqlitePath := filepath.Join(b.TempDir(), "big.db")
	db, err := sql.Open("sqlite", sqlitePath)
	must(b, err)
	for _, q := range []string{
		`CREATE TABLE customers (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL, email TEXT NOT NULL,
			country TEXT, plan TEXT NOT NULL, signup_date TEXT NOT NULL)`,
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < %d)
			INSERT INTO customers SELECT i, 'acme', 'customer ' || i, 'c' || i || '@acme.example', 'DE', 'pro', '2024-01-01' FROM n`, rows),
	} {
		_, err := db.Exec(q)
		must(b, err)
	}
	must(b, db.Close())
	pg := pgtest.Start(b)
	pg.Exec(b, `CREATE TABLE customers (id bigint PRIMARY KEY, tenant text NOT NULL, name text NOT NULL, email text NOT NULL,
		country text, plan text NOT NULL, signup_date date NOT NULL)`)
	pg.Exec(b, fmt.Sprintf(`INSERT INTO customers SELECT i, 'acme', 'customer ' || i, 'c' || i || '@acme.example', 'DE', 'pro', '2024-01-01'
		FROM generate_series(1, %d) i`, rows))
	for _, tc := range []struct {
		name string
		d    contract.Dataset
	}{
		{"SQLite", demoDataset(sqlitePath, nil)},
		{"PostgreSQL", demoDataset("", func(d *contract.Dataset) { d.Driver, d.DSN = contract.DriverPostgres, pg.DSN })},
	} {
		b.Run(tc.name, func(b *testing.B) {
			bundle := setup(b, setupOpts{datasetsJSON: catalogJSON(b, tc.d)})
			cs := bundle.session(ana, 0, "")
			for b.Loop() {
				v := mustView(b, exStart(b, cs, "bench-"+randHex(4), "csv", nil))
				r := exResult(b, exWait(b, cs, v.Handle, workflows.StatusSucceeded, 5*time.Minute))
				if r.Rows != rows {
					b.Fatalf("rows %d", r.Rows)
				}
			}
			b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
