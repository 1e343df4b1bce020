package tests

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	_ "modernc.org/sqlite"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/pgtest"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

func countFiles(t testing.TB, dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func containsJob(out *jobcore.ListJobsOut, id string) bool {
	for _, j := range out.Jobs {
		if j.JobID == id {
			return true
		}
	}
	return false
}

// mustPage calls a listing tool and decodes its page.
func mustPage(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any) *jobcore.ListJobsOut {
	t.Helper()
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	must(t, err)
	var out jobcore.ListJobsOut
	te, err := jobcore.ParseResult(res, &out)
	must(t, err)
	if te != nil {
		t.Fatalf("%s: %s", tool, te)
	}
	return &out
}

// pgCustomers starts a PostgreSQL server, copies the demo customers table into it (signup_date
// as a real date), and returns the server and its dataset.
func pgCustomers(t testing.TB) (*pgtest.Server, contract.Dataset) {
	t.Helper()
	src, err := sql.Open("sqlite", demoDB(t))
	must(t, err)
	defer src.Close()
	pg := pgtest.Start(t)
	pg.Exec(t, `CREATE TABLE customers (id bigint PRIMARY KEY, tenant text NOT NULL, name text NOT NULL,
		email text NOT NULL, country text, plan text NOT NULL, signup_date date NOT NULL)`)
	rows, err := src.Query(`SELECT id, tenant, name, email, country, plan, signup_date FROM customers ORDER BY id`)
	must(t, err)
	defer rows.Close()
	tx, err := pg.DB(t).Begin()
	must(t, err)
	ins, err := tx.Prepare(`INSERT INTO customers VALUES ($1, $2, $3, $4, $5, $6, $7::date)`)
	must(t, err)
	for rows.Next() {
		var (
			id                           int64
			tenant, name, email, plan, d string
			country                      sql.NullString
		)
		must(t, rows.Scan(&id, &tenant, &name, &email, &country, &plan, &d))
		_, err := ins.Exec(id, tenant, name, email, country, plan, d)
		must(t, err)
	}
	must(t, rows.Err())
	must(t, tx.Commit())
	d := demoDataset("", func(d *contract.Dataset) { d.Driver, d.DSN = contract.DriverPostgres, pg.DSN })
	return pg, d
}

// TestExportPostgres: the same export against a real PostgreSQL server; its own statement log
// proves that nothing touched the table before approval.
func TestExportPostgres(t *testing.T) {
	testenv.Heavy(t, "starts PostgreSQL")
	t.Parallel()
	pg, d := pgCustomers(t)
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, d), export: jobcore.ExportTuning{PartRows: 1500, PageRows: 400}})
	cs := b.session(ana, 0, "")
	cols := []string{"id", "name", "email", "country", "signup_date"}
	v := mustView(t, exStart(t, cs, uniqueKey(t), "csv", cols))
	w := exWait(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	touched := func() int {
		n := 0
		for _, s := range pg.Statements() {
			if strings.Contains(s, `FROM "customers"`) {
				n++
			}
		}
		return n
	}
	if n := touched(); n != 0 {
		t.Fatalf("PostgreSQL logged %d statements on customers before approval", n)
	}
	mustView(t, exResume(t, b.session(steward, 0, ""), w, "approve"))
	r := exResult(t, exWait(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second))
	if touched() == 0 {
		t.Fatal("the statement log shows no export query: it proves nothing")
	}
	got := canonicalRows(t, "csv", exDownloadAndCheck(t, b, ana, r), cols)
	want := sourceRows(t, pg.DB(t), "$1", "acme", cols, "")
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("row %d: exported %q, source %q", i, got[i], want[i])
			break
		}
	}
	if r.Rows != 5000 || len(got) != 5000 || digestOf(got) != digestOf(want) {
		t.Fatalf("exported %d rows (digest %s); source has %d (digest %s)", len(got), digestOf(got), len(want), digestOf(want))
	}
}

// TestChaosExportWorkerSIGKILL: the worker running an export dies mid-way (SIGKILL); another
// worker process finishes it, resuming parts from their heartbeats. The artifact is byte-for-
// byte the one a clean run produces, and the history shows the retried attempts.
func TestChaosExportWorkerSIGKILL(t *testing.T) {
	testenv.Heavy(t, "spawns jobgate worker processes and SIGKILLs one")
	t.Parallel()
	b := setup(t, setupOpts{noWorker: true,
		datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), func(d *contract.Dataset) { d.MaxRowsPerSecond = 400 })),
		export:       jobcore.ExportTuning{PartRows: 500, PageRows: 100, Concurrency: 2, PartHeartbeatTimeout: 2 * time.Second}})
	cs := b.session(ana, 0, "")
	w1 := b.spawn(t, "worker")
	v := mustView(t, exStart(t, cs, uniqueKey(t), "csv", nil))
	eventually(t, 60*time.Second, "rows exported before the kill", func() bool {
		return mustView(t, call(t, cs, "get_export", map[string]any{"handle": v.Handle})).Progress.Done > 0
	})
	w1.kill(t)
	b.spawn(t, "worker")
	killed := exResult(t, exWait(t, b.session(ana, 1, ""), v.Handle, workflows.StatusSucceeded, 2*time.Minute))

	retried := retriedAttempts(acHistory(t, b, v.JobID))
	if retried == 0 {
		t.Fatal("no activity attempt was retried: the kill landed outside the export")
	}

	clean := mustView(t, exStart(t, cs, uniqueKey(t)+"-clean", "csv", nil))
	want := exResult(t, exWait(t, cs, clean.Handle, workflows.StatusSucceeded, 2*time.Minute))
	if killed.SHA256 != want.SHA256 || killed.Rows != 5000 {
		t.Fatalf("after the kill: %d rows sha256 %s; clean run: %d rows sha256 %s", killed.Rows, killed.SHA256, want.Rows, want.SHA256)
	}
	t.Logf("%d retried attempts; artifact sha256 %s equals a clean run's", retried, killed.SHA256)
}
