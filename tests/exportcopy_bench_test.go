package tests

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/pgtest"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// copyData is one generated table and the stack exporting it.
type copyData struct {
	rows   int
	table  string // PostgreSQL: the table; SQLite: the database file
	bundle *testBundle
	cs     *mcp.ClientSession
}

// copyEnv is one engine's server and tables, made lazily (only for the sub-benchmarks that
// run) and once per size, owned by the engine's benchmark so they outlive its leaves' reruns.
type copyEnv struct {
	owner  *testing.B
	engine string
	pg     *pgtest.Server
	data   map[string]*copyData
	// noWorker: the bundle has no in-process worker (BenchmarkExportWorkerRSS spawns one).
	noWorker bool
}

func (e *copyEnv) get(size string) *copyData {
	if d := e.data[size]; d != nil {
		return d
	}
	n := copySizes[size]
	d := &copyData{rows: n}
	var ds contract.Dataset
	start := time.Now()
	if e.engine == "PostgreSQL" {
		if e.pg == nil {
			e.pg = pgtest.Start(e.owner)
		}
		d.table = "customers_" + strings.ToLower(size) // unquoted names fold to lower case in PostgreSQL; the catalog quotes them
		pgGenerateCustomers(e.owner, e.pg, d.table, n)
		ds = copyDataset(contract.DriverPostgres, e.pg.DSN, d.table, n)
	} else {
		d.table = filepath.Join(e.owner.TempDir(), "customers_"+size+".db")
		sqliteGenerateCustomers(e.owner, d.table, n)
		ds = copyDataset(contract.DriverSQLite, d.table, "customers", n)
	}
	e.owner.Logf("%s %s: generated %d rows in %s", e.engine, size, n, time.Since(start).Round(time.Millisecond))
	d.bundle = setup(e.owner, setupOpts{noWorker: e.noWorker, datasetsJSON: catalogJSON(e.owner, ds)})
	d.cs = d.bundle.session(ana, 0, "")
	e.data[size] = d
	return d
}

// export runs one export of d to succeeded through MCP and returns its result and job ID.
func (d *copyData) export(b *testing.B, format string, i int) (jobcore.ExportResultView, string) {
	v := mustView(b, exStart(b, d.cs, fmt.Sprintf("%s-%d", uniqueKey(b), i), format, copyCols))
	return exResult(b, exWait(b, d.cs, v.Handle, workflows.StatusSucceeded, 60*time.Minute)), v.JobID
}

// BenchmarkExportVsCopy: jobgate's export end to end (MCP start_export → succeeded, through the
// frontends, Temporal and an in-process worker, finalize included) side by side with the
// single-stream limit on the same rows, columns, order, format and gzip level (6): for
// PostgreSQL one COPY … TO STDOUT through Go's compress/gzip, and as a stricter limit through
// klauspost/compress; for SQLite one SELECT through jobgate's own row encoder and Go's gzip.
// Iterations alternate which side goes first. Data generation is not timed. See README.md.
func BenchmarkExportVsCopy(b *testing.B) {
	testenv.Heavy(b, "generates millions of rows and starts PostgreSQL")
	for _, engine := range []string{"PostgreSQL", "SQLite"} {
		b.Run(engine, func(b *testing.B) {
			env := &copyEnv{owner: b, engine: engine, data: map[string]*copyData{}}
			for _, format := range []string{contract.FormatCSV, contract.FormatJSONL} {
				b.Run(format, func(b *testing.B) {
					for _, size := range []string{"1M", "10M"} {
						b.Run(size, func(b *testing.B) { env.vsCopy(b, format, size) })
					}
				})
			}
		})
	}
}

func (e *copyEnv) vsCopy(b *testing.B, format, size string) {
	b.StopTimer()
	d := e.get(size)
	dir := b.TempDir()
	limits := []string{"std"}
	if e.engine == "PostgreSQL" {
		limits = append(limits, "klauspost")
	}
	spent := map[string]time.Duration{}
	cpu := map[string]time.Duration{} // CPU used (this process and PostgreSQL's) by each side
	pgPID := 0
	if e.pg != nil {
		pgPID = e.pg.PID()
	}
	var exported int64
	var phases exportPhases
	for i := range b.N {
		var r jobcore.ExportResultView
		var jobID string
		var limRows = map[string]int64{}
		runJobgate := func() {
			t0, c0 := time.Now(), cpuUsed(pgPID)
			r, jobID = d.export(b, format, i)
			spent["jobgate"] += time.Since(t0)
			cpu["jobgate"] += cpuUsed(pgPID) - c0
		}
		runLimits := func() {
			for _, impl := range limits {
				path := filepath.Join(dir, impl+".gz")
				t0, c0 := time.Now(), cpuUsed(pgPID)
				if e.engine == "PostgreSQL" {
					limRows[impl] = pgCopyLimit(b, e.pg.DSN, d.table, format, impl, path)
				} else {
					limRows[impl] = sqliteLimit(b, d.table, format, path)
				}
				spent[impl] += time.Since(t0)
				cpu[impl] += cpuUsed(pgPID) - c0
			}
		}
		b.StartTimer()
		if i%2 == 0 {
			runJobgate()
			runLimits()
		} else {
			runLimits()
			runJobgate()
		}
		b.StopTimer()

		phases.add(historyPhases(b, d.bundle.temporal, jobID))
		// Verified outside the timer: the artifact holds every row, and its text is the limit's.
		if r.Rows != d.rows {
			b.Fatalf("export: %d rows, want %d", r.Rows, d.rows)
		}
		lines, sum := artifactSum(b, d.bundle, r)
		wantLines := int64(d.rows)
		if format == contract.FormatCSV {
			wantLines++ // the header
		}
		if lines != wantLines {
			b.Fatalf("artifact: %d lines, want %d", lines, wantLines)
		}
		for _, impl := range limits {
			if limRows[impl] != int64(d.rows) {
				b.Fatalf("limit %s: %d rows, want %d", impl, limRows[impl], d.rows)
			}
			limLines, limSum := gunzipFileSum(b, filepath.Join(dir, impl+".gz"))
			if limSum != sum {
				// csv must match byte for byte; jsonl from row_to_json may space or escape
				// differently, which is not a fault of either side.
				if format == contract.FormatCSV || e.engine == "SQLite" {
					b.Fatalf("limit %s: %d lines sha256 %s; artifact %d lines sha256 %s", impl, limLines, limSum, lines, sum)
				}
				b.Logf("limit %s output differs from the artifact's text (jsonl, server-built rows)", impl)
			}
		}
		exported += int64(r.Rows)
	}
	b.ReportMetric(rate(exported, spent["jobgate"]), "rows/s")
	b.ReportMetric(rate(exported, spent["std"]), "limit-rows/s")
	b.ReportMetric(spent["std"].Seconds()/spent["jobgate"].Seconds(), "ratio")
	if e.engine == "PostgreSQL" {
		b.ReportMetric(rate(exported, spent["klauspost"]), "klauspost-limit-rows/s")
		b.ReportMetric(spent["klauspost"].Seconds()/spent["jobgate"].Seconds(), "ratio-klauspost")
	}
	phases.report(b, spent["jobgate"])
	reportCPU(b, exported, cpu)
	for _, impl := range limits {
		name := map[string]string{"std": "one COPY/SELECT + Go gzip 6", "klauspost": "one COPY + klauspost gzip 6"}[impl]
		ratio := spent[impl].Seconds() / spent["jobgate"].Seconds()
		verdict := "met"
		if ratio < wantExportRatio {
			verdict = "MISSED"
		}
		b.Logf("vs %s: jobgate %.0f rows/s, limit %.0f rows/s, ratio %.3f, want >= %.2f: %s (CPU per 1M rows: jobgate %.2f s, limit %.2f s)",
			name, rate(exported, spent["jobgate"]), rate(exported, spent[impl]), ratio, wantExportRatio, verdict,
			cpu["jobgate"].Seconds()/(float64(exported)/1e6), cpu[impl].Seconds()/(float64(exported)/1e6))
	}
}

// wantExportRatio is issue 34's goal for both yardsticks: jobgate end to end at 0.9 of the
// single-stream limit's rows/s or better.
const wantExportRatio = 0.9

// reportCPU puts each side's CPU per million rows (this process, where the worker, frontends
// and Temporal server run, and the PostgreSQL server) and jobgate's CPU against each limit's.
func reportCPU(b *testing.B, rows int64, cpu map[string]time.Duration) {
	perM := func(d time.Duration) float64 { return d.Seconds() / (float64(rows) / 1e6) }
	b.ReportMetric(perM(cpu["jobgate"]), "cpu-s/Mrows")
	for impl, unit := range map[string]string{"std": "limit-cpu-s/Mrows", "klauspost": "klauspost-limit-cpu-s/Mrows"} {
		if c, ok := cpu[impl]; ok {
			b.ReportMetric(perM(c), unit)
		}
	}
}

// BenchmarkExportWorkerRSS: the peak resident set (VmHWM) of a `jobgate worker` process, a
// fresh one per export, exporting 1M and 10M PostgreSQL rows as csv. The goal is a peak bounded
// by the page size, not by the row count.
func BenchmarkExportWorkerRSS(b *testing.B) {
	const rssWantMiB = 200.0 // issue 34: worker peak RSS stays ≤ 200 MiB at 10M rows
	testenv.Heavy(b, "generates millions of rows, starts PostgreSQL and jobgate worker processes")
	env := &copyEnv{owner: b, engine: "PostgreSQL", data: map[string]*copyData{}, noWorker: true}
	for _, size := range []string{"1M", "10M"} {
		b.Run(size, func(b *testing.B) {
			b.StopTimer()
			d := env.get(size)
			var peak int64
			var spent time.Duration
			for i := range b.N {
				w := spawnWorker(b, d.bundle)
				t0 := time.Now()
				b.StartTimer()
				r, _ := d.export(b, contract.FormatCSV, i)
				b.StopTimer()
				spent += time.Since(t0)
				hwm := vmHWM(b, w.cmd.Process.Pid)
				w.stop()
				if r.Rows != d.rows {
					b.Fatalf("export: %d rows, want %d", r.Rows, d.rows)
				}
				b.Logf("%s: worker peak RSS %.1f MiB (%d rows, %s)", size, float64(hwm)/(1<<20), r.Rows, time.Since(t0).Round(time.Millisecond))
				peak = max(peak, hwm)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
			b.ReportMetric(rssWantMiB, "want-peak-RSS-MiB")
			b.ReportMetric(rate(int64(b.N*d.rows), spent), "rows/s")
			verdict := "met"
			if float64(peak)/(1<<20) > rssWantMiB {
				verdict = "MISSED"
			}
			b.Logf("yardstick %s: worker peak RSS %.1f MiB, want <= %.0f MiB (issue 34, at 10M rows): %s", size, float64(peak)/(1<<20), rssWantMiB, verdict)
		})
	}
}
