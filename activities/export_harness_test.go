package activities

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"gocloud.dev/blob"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/tests/support/pgtest"
)

// backend is one SQL engine holding the same deterministic data: the demo customers (integer
// key) and a small accounts table (text key).
type backend struct {
	name       string
	datasets   contract.Datasets
	db         *sql.DB         // independent reader for expected output
	statements func() []string // statements the server logged; nil when it cannot tell
}

// accountRows are the text-key rows: codes whose byte order differs from a case-folding or
// accent-aware order, so a wrong collation would show.
func accountRows() [][3]any {
	codes := []string{"a-001", "B-002", "Z-003", "b-004", "é-005", "A-006", "z-007", "_-008", "0-009", "~-010",
		"a-011", "a-0110", "a-01", "ä-012", "M-013", "m-014", "n-015", "N-016", "Ö-017", "o-018", "1-019", "10-020"}
	var out [][3]any
	for i, c := range codes {
		tenant := "acme"
		if i%3 == 2 {
			tenant = "globex"
		}
		var balance any = int64(i * 100)
		if i%5 == 4 {
			balance = nil
		}
		out = append(out, [3]any{c, tenant, balance})
	}
	return out
}

func accountsDataset(driver, dsn string) contract.Dataset {
	return contract.Dataset{Name: "accounts", Driver: driver, DSN: dsn, Table: "accounts", TenantColumn: "org",
		KeyColumn: "code", KeyType: contract.KeyTypeText, Columns: []contract.Column{{Name: "code"}, {Name: "label"}, {Name: "balance"}}}.WithDefaults()
}

func sqliteBackend(t testing.TB) backend {
	path := filepath.Join(t.TempDir(), "demo.db")
	if err := SeedDemoDB(path); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mustExec(t, db, `CREATE TABLE accounts (code TEXT PRIMARY KEY, org TEXT NOT NULL, label TEXT, balance INTEGER)`)
	for _, r := range accountRows() {
		mustExec(t, db, `INSERT INTO accounts VALUES ($1, $2, $3, $4)`, r[0], r[1], "label "+r[0].(string), r[2])
	}
	ds := contract.DemoDatasets(path)
	ds["accounts"] = accountsDataset(contract.DriverSQLite, path)
	return backend{name: "sqlite", datasets: ds, db: db}
}

func postgresBackend(t testing.TB) backend {
	s := pgtest.Start(t)
	s.Exec(t, `CREATE TABLE customers (id bigint PRIMARY KEY, tenant text NOT NULL, name text NOT NULL,
		email text NOT NULL, country text, plan text NOT NULL, signup_date date NOT NULL)`)
	s.Exec(t, `CREATE INDEX customers_tenant_id ON customers (tenant, id)`)
	db := s.DB(t)
	rows := demoRows()
	for len(rows) > 0 {
		n := min(len(rows), 1000)
		var (
			q    strings.Builder
			args []any
		)
		q.WriteString(`INSERT INTO customers (id, tenant, name, email, country, plan, signup_date) VALUES `)
		for i, r := range rows[:n] {
			if i > 0 {
				q.WriteString(", ")
			}
			b := len(args)
			fmt.Fprintf(&q, "($%d, $%d, $%d, $%d, $%d, $%d, $%d::date)", b+1, b+2, b+3, b+4, b+5, b+6, b+7)
			args = append(args, r.ID, r.Tenant, r.Name, r.Email, r.Country, r.Plan, r.SignupDate)
		}
		mustExec(t, db, q.String(), args...)
		rows = rows[n:]
	}
	s.Exec(t, `CREATE TABLE accounts (code text PRIMARY KEY, org text NOT NULL, label text, balance integer)`)
	for _, r := range accountRows() {
		s.Exec(t, `INSERT INTO accounts VALUES ($1, $2, $3, $4)`, r[0], r[1], "label "+r[0].(string), r[2])
	}
	cust := contract.DemoDatasets("")["customers"]
	cust.Driver, cust.DSN = contract.DriverPostgres, s.DSN
	return backend{name: "postgres", db: db, statements: s.Statements,
		datasets: contract.Datasets{"customers": cust, "accounts": accountsDataset(contract.DriverPostgres, s.DSN)}}
}

func mustExec(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// harness runs the activities the way the worker does, one TestActivityEnvironment per
// attempt, against a file artifact store and a dataset pool of its own.
type harness struct {
	a  *Activities
	mu sync.Mutex
	qs []string // every statement the activities sent, via QueryHook
}

var quietLogger = log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

func newHarness(t testing.TB, ds contract.Datasets) *harness {
	store, err := OpenArtifactStore(context.Background(), "file://"+filepath.Join(t.TempDir(), "new", "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{}
	h.a = &Activities{Datasets: ds, Artifacts: store, DB: &DBPool{}, QueryHook: func(dataset, q string) {
		h.mu.Lock()
		h.qs = append(h.qs, dataset+": "+q)
		h.mu.Unlock()
	}}
	t.Cleanup(func() {
		h.a.DB.Close()
		store.Close()
	})
	return h
}

func (h *harness) queries() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.qs)
}

func (h *harness) env(heartbeat *PartProgress) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quietLogger)
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(h.a)
	if heartbeat != nil {
		env.SetHeartbeatDetails(*heartbeat)
	}
	return env
}

func (h *harness) plan(in contract.PlanExportInput) (contract.PlanExportResult, error) {
	var res contract.PlanExportResult
	v, err := h.env(nil).ExecuteActivity(h.a.PlanExport, in)
	if err == nil {
		err = v.Get(&res)
	}
	return res, err
}

func (h *harness) part(in contract.ExportPartInput, heartbeat *PartProgress) (contract.PartResult, error) {
	var res contract.PartResult
	v, err := h.env(heartbeat).ExecuteActivity(h.a.ExportPart, in)
	if err == nil {
		err = v.Get(&res)
	}
	return res, err
}

func (h *harness) finalize(in contract.FinalizeExportInput) (contract.Manifest, error) {
	var m contract.Manifest
	v, err := h.env(nil).ExecuteActivity(h.a.FinalizeExport, in)
	if err == nil {
		err = v.Get(&m)
	}
	return m, err
}

// job is one export request as the workflow would run it.
type job struct {
	id, tenant, dataset, format string
	columns                     []string
	partRows, pageRows          int
	run                         string // the first run ID; "" means firstRunTest, "-" none (legacy)
}

// firstRunTest is the first run ID of test jobs that name none.
const firstRunTest = "0192f0a0-run1"

func (j job) firstRun() string {
	switch j.run {
	case "":
		return firstRunTest
	case "-":
		return ""
	}
	return j.run
}

func (j job) digest(h *harness) string { return h.a.Datasets[j.dataset].ConfigDigest() }

func (j job) planInput(h *harness) contract.PlanExportInput {
	return contract.PlanExportInput{JobID: j.id, Tenant: j.tenant, Dataset: j.dataset, Columns: j.columns,
		ConfigDigest: j.digest(h), PartRows: j.partRows}
}

func (j job) partInput(h *harness, part int, r contract.KeyRange) contract.ExportPartInput {
	return contract.ExportPartInput{JobID: j.id, FirstRunID: j.firstRun(), Tenant: j.tenant, Dataset: j.dataset, Columns: j.columns, Format: j.format,
		ConfigDigest: j.digest(h), Part: part, Range: r, PageRows: j.pageRows}
}

func (j job) finalizeInput(parts []contract.PartResult) contract.FinalizeExportInput {
	return contract.FinalizeExportInput{JobID: j.id, FirstRunID: j.firstRun(), Format: j.format, Columns: j.columns, Parts: parts,
		ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// run exports j end to end: plan, every part in order, finalize.
func (h *harness) run(t testing.TB, j job) (contract.PlanExportResult, []contract.PartResult, contract.Manifest) {
	t.Helper()
	plan, err := h.plan(j.planInput(h))
	if err != nil || plan.ScopeChanged {
		t.Fatalf("plan: %+v, %v", plan, err)
	}
	var parts []contract.PartResult
	for i, r := range plan.Ranges {
		p, err := h.part(j.partInput(h, i+1, r), nil)
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		parts = append(parts, p)
	}
	m, err := h.finalize(j.finalizeInput(parts))
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	return plan, parts, m
}

// artifact reads m's object, checks its size and digests against the manifest, and returns
// the decompressed content, read as one gzip stream.
func (h *harness) artifact(t testing.TB, m contract.Manifest) []byte {
	t.Helper()
	r, err := h.a.Artifacts.OpenArtifact(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	raw, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	// The size a seek to the end reports is what http.ServeContent serves ranges against.
	size, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) != m.Bytes || size != m.Bytes || hexSum(raw) != m.SHA256 {
		t.Fatalf("artifact: %d bytes %s; manifest says %d bytes %s", len(raw), hexSum(raw), m.Bytes, m.SHA256)
	}
	// The parts are the artifact's tail, in order; what precedes them is the lead member.
	off := m.Bytes
	for _, p := range m.Parts {
		off -= p.Bytes
	}
	for _, p := range m.Parts {
		if got := hexSum(raw[off : off+p.Bytes]); got != p.SHA256 {
			t.Fatalf("part %d digest %s, manifest %s", p.Part, got, p.SHA256)
		}
		off += p.Bytes
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return out
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// expected reads the tenant's rows straight from the database and encodes them with
// encoding/json and encoding/csv: an independent version of what the export must hold.
func expected(t testing.TB, be backend, d contract.Dataset, tenant string, cols []string, format string) ([]byte, int) {
	t.Helper()
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = `"` + c + `"`
	}
	rows, err := be.db.Query(fmt.Sprintf(`SELECT %s FROM "%s" WHERE "%s" = $1 ORDER BY "%s"`,
		strings.Join(sel, ", "), d.Table, d.TenantColumn, d.KeyColumn), tenant)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	jsonText := func(v any) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	var out bytes.Buffer
	cw := csv.NewWriter(&out)
	if format == contract.FormatCSV {
		cw.Write(cols)
	}
	n := 0
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		n++
		rec := make([]string, len(cols))
		js := make([]string, len(cols))
		for i, v := range vals {
			switch x := v.(type) {
			case nil:
				js[i] = "null"
			case int64:
				rec[i] = strconv.FormatInt(x, 10)
				js[i] = rec[i]
			case string:
				rec[i], js[i] = x, jsonText(x)
			case time.Time:
				if types[i].DatabaseTypeName() != "DATE" {
					t.Fatalf("column %s: unexpected %s", cols[i], types[i].DatabaseTypeName())
				}
				rec[i] = x.Format("2006-01-02")
				js[i] = jsonText(rec[i])
			default:
				t.Fatalf("column %s: unexpected %T", cols[i], v)
			}
		}
		if format == contract.FormatCSV {
			cw.Write(rec)
			continue
		}
		out.WriteByte('{')
		for i, c := range cols {
			if i > 0 {
				out.WriteByte(',')
			}
			out.WriteString(jsonText(c) + ":" + js[i])
		}
		out.WriteString("}\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	cw.Flush()
	return out.Bytes(), n
}

func appErrType(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Type()
	}
	return ""
}

// tenantKeys is the tenant's integer keys in order, read independently.
func tenantKeys(t testing.TB, be backend, tenant string) []string {
	rows, err := be.db.Query(`SELECT id FROM customers WHERE tenant = $1 ORDER BY id`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, strconv.FormatInt(id, 10))
	}
	return out
}

// heartbeatAt is the heartbeat a part would have recorded after writing chunks 0..next-1.
func heartbeatAt(t testing.TB, h *harness, jobID string, keys []string, partRows, pageRows, next int) PartProgress {
	first := partRows // part 2
	rows := min(next*pageRows, partRows)
	last := keys[first+rows-1]
	hb := PartProgress{NextChunk: next, LastKey: &last, Rows: rows}
	digest := sha256.New()
	for c := 0; c < next; c++ {
		b := readObject(t, h, chunkKey(jobID, firstRunTest, 2, c))
		hb.Bytes += int64(len(b))
		digest.Write(b)
	}
	state, err := digest.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	hb.Digest = state
	return hb
}

func readObject(t testing.TB, h *harness, key string) []byte {
	t.Helper()
	b, err := h.a.Artifacts.Bucket().ReadAll(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeObject(t testing.TB, h *harness, key string, b []byte) {
	t.Helper()
	if err := h.a.Artifacts.Bucket().WriteAll(context.Background(), key, b, nil); err != nil {
		t.Fatal(err)
	}
}

func listKeys(t testing.TB, h *harness, prefix string) []string {
	t.Helper()
	var out []string
	it := h.a.Artifacts.Bucket().List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(context.Background())
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if !o.IsDir {
			out = append(out, o.Key)
		}
	}
}

// runConcurrent is run with up to conc parts in flight, as the workflow runs them.
func (h *harness) runConcurrent(t testing.TB, j job, conc int) contract.Manifest {
	plan, err := h.plan(j.planInput(h))
	if err != nil {
		t.Fatal(err)
	}
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
		t.Fatal(err)
	}
	m, err := h.finalize(j.finalizeInput(parts))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
