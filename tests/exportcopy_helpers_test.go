package tests

// Helpers of BenchmarkExportVsCopy and BenchmarkExportWorkerRSS (exportcopy_bench_test.go): the
// generated customers tables, the single-stream limits, and reading an artifact back.

import (
	"bufio"
	"bytes"
	stdgzip "compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	kgzip "github.com/klauspost/compress/gzip"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/pgtest"
)

// copyCols are the exported columns: none is sensitive, so no approval stands in the timing.
var copyCols = []string{"id", "name", "country", "plan", "signup_date"}

var copySizes = map[string]int{"1M": 1_000_000, "10M": 10_000_000}

// copyOtherRows of another tenant sit after acme's, so the tenant filter has something to skip.
const copyOtherRows = 1000

// pgGenerateCustomers creates table with n acme rows (and copyOtherRows of globex), generated
// by the server itself, indexed as exports need and analyzed.
func pgGenerateCustomers(b testing.TB, pg *pgtest.Server, table string, n int) {
	b.Helper()
	pg.Exec(b, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, tenant text NOT NULL, name text NOT NULL,
		email text NOT NULL, country text, plan text NOT NULL, signup_date date NOT NULL)`, table))
	pg.Exec(b, fmt.Sprintf(`INSERT INTO %s SELECT g, CASE WHEN g <= $1 THEN 'acme' ELSE 'globex' END,
		'Customer ' || g, 'c' || g || '@example.com', (ARRAY['DE','FR','US','GB',NULL])[1 + g %% 5],
		(ARRAY['free','pro','team'])[1 + g %% 3], date '2015-01-01' + (g %% 3650)::int
		FROM generate_series(1, $1 + %d) g`, table, copyOtherRows), int64(n))
	pg.Exec(b, fmt.Sprintf(`CREATE INDEX ON %s (tenant, id)`, table))
	pg.Exec(b, fmt.Sprintf(`ANALYZE %s`, table))
}

// sqliteGenerateCustomers writes the same rows into a fresh SQLite file with a recursive CTE.
func sqliteGenerateCustomers(b testing.TB, path string, n int) {
	b.Helper()
	db, err := sql.Open("sqlite", path)
	must(b, err)
	defer db.Close()
	for _, q := range []string{`PRAGMA journal_mode=OFF`, `PRAGMA synchronous=OFF`,
		`CREATE TABLE customers (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL,
			email TEXT NOT NULL, country TEXT, plan TEXT NOT NULL, signup_date TEXT NOT NULL)`,
		fmt.Sprintf(`WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < %d)
		INSERT INTO customers SELECT x, CASE WHEN x <= %d THEN 'acme' ELSE 'globex' END,
			'Customer ' || x, 'c' || x || '@example.com',
			CASE x %% 5 WHEN 0 THEN 'DE' WHEN 1 THEN 'FR' WHEN 2 THEN 'US' WHEN 3 THEN 'GB' END,
			CASE x %% 3 WHEN 0 THEN 'free' WHEN 1 THEN 'pro' ELSE 'team' END,
			date('2015-01-01', '+' || (x %% 3650) || ' days') FROM g`, n+copyOtherRows, n),
		`CREATE INDEX customers_tenant_id ON customers (tenant, id)`, `ANALYZE`} {
		_, err := db.Exec(q)
		must(b, err)
	}
}

// copyDataset is the catalog entry over the generated table, allowing all n rows.
func copyDataset(driver, dsn, table string, n int) contract.Dataset {
	return demoDataset("", func(d *contract.Dataset) {
		d.Driver, d.DSN, d.Table = driver, dsn, table
		d.MaxRows = max(n, contract.MaxRowsDefault)
	})
}

// gzipWriter is a gzip compressor at level 6: Go's ("std") or klauspost's ("klauspost").
func gzipWriter(b testing.TB, impl string, w io.Writer) io.WriteCloser {
	b.Helper()
	if impl == "klauspost" {
		zw, err := kgzip.NewWriterLevel(w, 6)
		must(b, err)
		return zw
	}
	zw, err := stdgzip.NewWriterLevel(w, 6)
	must(b, err)
	return zw
}

// pgCopyLimit is the PostgreSQL single-stream limit: one COPY of acme's rows (csv with its
// header, or jsonl: one row_to_json per line) through gzip level 6 into path. It returns the
// row count.
func pgCopyLimit(b testing.TB, dsn, table, format, impl, path string) int64 {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	must(b, err)
	defer conn.Close(ctx)
	sel := fmt.Sprintf(`SELECT %s FROM %s WHERE tenant = 'acme' ORDER BY id`, strings.Join(copyCols, ", "), table)
	q := `COPY (` + sel + `) TO STDOUT (FORMAT csv, HEADER)`
	if format == contract.FormatJSONL {
		// Text format escapes backslashes; the generated rows hold none, so the lines are JSON.
		q = `COPY (SELECT row_to_json(r) FROM (` + sel + `) r) TO STDOUT`
	}
	f, err := os.Create(path)
	must(b, err)
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	zw := gzipWriter(b, impl, bw)
	tag, err := conn.PgConn().CopyTo(ctx, zw, q)
	must(b, err)
	must(b, zw.Close())
	must(b, bw.Flush())
	return tag.RowsAffected()
}

// sqliteLimit is the SQLite single-stream limit: one SELECT streamed through jobgate's own row
// encoder and gzip level 6 into path. It returns the row count.
func sqliteLimit(b testing.TB, dbPath, format, path string) int64 {
	b.Helper()
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	must(b, err)
	defer db.Close()
	rows, err := db.Query(`SELECT `+strings.Join(copyCols, ", ")+` FROM customers WHERE tenant = ? ORDER BY id`, "acme")
	must(b, err)
	defer rows.Close()
	f, err := os.Create(path)
	must(b, err)
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	zw := gzipWriter(b, "std", bw)
	n, err := activities.EncodeRowsForBench(rows, format, copyCols, zw)
	must(b, err)
	must(b, zw.Close())
	must(b, bw.Flush())
	return n
}

// gunzipSum decompresses every gzip member of r: its lines and the sha256 of its text.
func gunzipSum(b testing.TB, r io.Reader) (int64, string) {
	b.Helper()
	zr, err := stdgzip.NewReader(bufio.NewReaderSize(r, 1<<20))
	must(b, err)
	h := sha256.New()
	var lines int64
	buf := make([]byte, 1<<20)
	for {
		n, err := zr.Read(buf)
		h.Write(buf[:n])
		lines += int64(bytes.Count(buf[:n], []byte{'\n'}))
		if err == io.EOF {
			break
		}
		must(b, err)
	}
	return lines, hex.EncodeToString(h.Sum(nil))
}

func gunzipFileSum(b testing.TB, path string) (int64, string) {
	b.Helper()
	f, err := os.Open(path)
	must(b, err)
	defer f.Close()
	return gunzipSum(b, f)
}

// artifactSum downloads a succeeded export's artifact as ana (streamed, so 10M rows need no
// memory), checks it against the manifest's byte count and sha256, and returns its lines and
// the sha256 of its decompressed text.
func artifactSum(b testing.TB, bundle *testBundle, r jobcore.ExportResultView) (int64, string) {
	b.Helper()
	req, err := http.NewRequest(http.MethodGet, bundle.onReplica(r.DownloadURL, 1), nil)
	must(b, err)
	req.Header.Set("Authorization", "Bearer "+bundle.token(ana))
	resp, err := http.DefaultClient.Do(req)
	must(b, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		b.Fatalf("download: %d %s", resp.StatusCode, body)
	}
	raw := sha256.New()
	cnt := &countWriter{}
	lines, sum := gunzipSum(b, io.TeeReader(resp.Body, io.MultiWriter(raw, cnt)))
	// The gzip reader may stop short of trailing bytes: drain them into the digest.
	_, err = io.Copy(io.MultiWriter(raw, cnt), resp.Body)
	must(b, err)
	if got := hex.EncodeToString(raw.Sum(nil)); got != r.SHA256 || cnt.n != r.Bytes {
		b.Fatalf("downloaded %d bytes sha256 %s; manifest says %d bytes %s", cnt.n, got, r.Bytes, r.SHA256)
	}
	return lines, sum
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// workerProc is a `jobgate worker` process for the bundle, started from a benchmark (spawn
// needs a *testing.T), killed when b ends.
type workerProc struct {
	cmd  *exec.Cmd
	errs *lockedWriter
}

func spawnWorker(b testing.TB, bundle *testBundle) *workerProc {
	b.Helper()
	cmd := exec.Command(jobgateBinary(b), "worker")
	cmd.Env = append(os.Environ(), "JOBGATE_TEMPORAL_ADDRESS="+temporalAddr, "JOBGATE_TASK_QUEUE="+bundle.taskQueue, "JOBGATE_NAMESPACE="+namespace,
		"JOBGATE_DATASETS="+bundle.datasets, "JOBGATE_ARTIFACTS="+bundle.artifacts, "JOBGATE_RESUME_KEYS="+bundle.resumeKeySpec,
		"JOBGATE_SIGNING_KEYS="+bundle.signingKeySpec)
	cmd.Env = append(cmd.Env, bundle.payloadEnv()...)
	w := &workerProc{cmd: cmd, errs: &lockedWriter{w: &strings.Builder{}}}
	cmd.Stderr = w.errs
	must(b, cmd.Start())
	b.Cleanup(w.stop)
	return w
}

func (w *workerProc) stop() {
	if w.cmd.ProcessState == nil {
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
	}
}

// vmHWM is the process's peak resident set size in bytes (VmHWM of /proc/<pid>/status).
func vmHWM(b testing.TB, pid int) int64 {
	b.Helper()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(b, err)
	for _, l := range strings.Split(string(st), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmHWM:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			must(b, err)
			return kb << 10
		}
	}
	b.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// rate is rows per second over d.
func rate(rows int64, d time.Duration) float64 { return float64(rows) / d.Seconds() }
