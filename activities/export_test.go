package activities

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"gocloud.dev/blob"

	"github.com/jobgate/jobgate/activities/pgtest"
)

// backend is one SQL engine holding the same deterministic data: the demo customers (integer
// key) and a small accounts table (text key).
type backend struct {
	name       string
	datasets   Datasets
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

func accountsDataset(driver, dsn string) Dataset {
	return Dataset{Name: "accounts", Driver: driver, DSN: dsn, Table: "accounts", TenantColumn: "org",
		KeyColumn: "code", KeyType: KeyTypeText, Columns: []Column{{Name: "code"}, {Name: "label"}, {Name: "balance"}}}.withDefaults()
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
	ds := DemoDatasets(path)
	ds["accounts"] = accountsDataset(DriverSQLite, path)
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
	cust := DemoDatasets("")["customers"]
	cust.Driver, cust.DSN = DriverPostgres, s.DSN
	return backend{name: "postgres", db: db, statements: s.Statements,
		datasets: Datasets{"customers": cust, "accounts": accountsDataset(DriverPostgres, s.DSN)}}
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

func newHarness(t testing.TB, ds Datasets) *harness {
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

func (h *harness) plan(in PlanExportInput) (PlanExportResult, error) {
	var res PlanExportResult
	v, err := h.env(nil).ExecuteActivity(h.a.PlanExport, in)
	if err == nil {
		err = v.Get(&res)
	}
	return res, err
}

func (h *harness) part(in ExportPartInput, heartbeat *PartProgress) (PartResult, error) {
	var res PartResult
	v, err := h.env(heartbeat).ExecuteActivity(h.a.ExportPart, in)
	if err == nil {
		err = v.Get(&res)
	}
	return res, err
}

func (h *harness) finalize(in FinalizeExportInput) (Manifest, error) {
	var m Manifest
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

func (j job) planInput(h *harness) PlanExportInput {
	return PlanExportInput{JobID: j.id, Tenant: j.tenant, Dataset: j.dataset, Columns: j.columns,
		ConfigDigest: j.digest(h), PartRows: j.partRows}
}

func (j job) partInput(h *harness, part int, r KeyRange) ExportPartInput {
	return ExportPartInput{JobID: j.id, FirstRunID: j.firstRun(), Tenant: j.tenant, Dataset: j.dataset, Columns: j.columns, Format: j.format,
		ConfigDigest: j.digest(h), Part: part, Range: r, PageRows: j.pageRows}
}

func (j job) finalizeInput(parts []PartResult) FinalizeExportInput {
	return FinalizeExportInput{JobID: j.id, FirstRunID: j.firstRun(), Format: j.format, Columns: j.columns, Parts: parts,
		ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// run exports j end to end: plan, every part in order, finalize.
func (h *harness) run(t testing.TB, j job) (PlanExportResult, []PartResult, Manifest) {
	t.Helper()
	plan, err := h.plan(j.planInput(h))
	if err != nil || plan.ScopeChanged {
		t.Fatalf("plan: %+v, %v", plan, err)
	}
	var parts []PartResult
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
func (h *harness) artifact(t testing.TB, m Manifest) []byte {
	t.Helper()
	r, err := h.a.Artifacts.OpenArtifact(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var _ io.ReadSeeker = r // http.ServeContent needs a seeker
	raw, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) != m.Bytes || r.Size() != m.Bytes || hexSum(raw) != m.SHA256 {
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
func expected(t testing.TB, be backend, d Dataset, tenant string, cols []string, format string) ([]byte, int) {
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
	if format == FormatCSV {
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
		if format == FormatCSV {
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

func TestExportSQLite(t *testing.T) {
	be := sqliteBackend(t)
	testExport(t, be)
}

func TestExportPostgres(t *testing.T) {
	be := postgresBackend(t)
	testExport(t, be)
}

// TestExportEnginesAgree: the same data exported from SQLite and PostgreSQL gives the same
// bytes, compressed and not (integers, text, NULLs, and a date stored as text in SQLite and
// as date in PostgreSQL).
func TestExportEnginesAgree(t *testing.T) {
	lite, pg := sqliteBackend(t), postgresBackend(t)
	for _, format := range []string{FormatJSONL, FormatCSV} {
		for _, ds := range []string{"customers", "accounts"} {
			cols := []string{"id", "name", "email", "country", "plan", "signup_date"}
			if ds == "accounts" {
				cols = []string{"code", "label", "balance"}
			}
			j := job{id: "acme/export/agree-" + ds + "-" + format, tenant: "acme", dataset: ds, format: format,
				columns: cols, partRows: 700, pageRows: 128}
			hl, hp := newHarness(t, lite.datasets), newHarness(t, pg.datasets)
			_, _, ml := hl.run(t, j)
			_, _, mp := hp.run(t, j)
			if ml.SHA256 != mp.SHA256 || !reflect.DeepEqual(ml.Parts, mp.Parts) {
				t.Errorf("%s %s: sqlite and postgres artifacts differ:\n%+v\n%+v", ds, format, ml, mp)
			}
			if !bytes.Equal(hl.artifact(t, ml), hp.artifact(t, mp)) {
				t.Errorf("%s %s: decompressed content differs", ds, format)
			}
		}
	}
}

func testExport(t *testing.T, be backend) {
	cust := be.datasets["customers"]

	t.Run("content", func(t *testing.T) {
		for _, c := range []struct {
			tenant, format string
			cols           []string
			rows           int
		}{
			{"acme", FormatJSONL, cust.DefaultColumns(), 5000},
			{"acme", FormatCSV, []string{"email", "id", "country", "signup_date"}, 5000},
			{"globex", FormatJSONL, []string{"signup_date", "name", "email"}, 3000},
			{"globex", FormatCSV, cust.DefaultColumns(), 3000},
			{"initech", FormatJSONL, cust.DefaultColumns(), 0},
			{"initech", FormatCSV, cust.DefaultColumns(), 0},
		} {
			h := newHarness(t, be.datasets)
			j := job{id: c.tenant + "/export/content-" + c.format, tenant: c.tenant, dataset: "customers",
				format: c.format, columns: c.cols, partRows: 700, pageRows: 128}
			plan, parts, m := h.run(t, j)
			want, n := expected(t, be, cust, c.tenant, c.cols, c.format)
			got := h.artifact(t, m)
			if n != c.rows || plan.Rows != n || m.Rows != n {
				t.Fatalf("%s %s: rows plan %d manifest %d, source %d, want %d", c.tenant, c.format, plan.Rows, m.Rows, n, c.rows)
			}
			if hexSum(got) != hexSum(want) {
				t.Fatalf("%s %s: content differs from the source\n got %.300q\nwant %.300q", c.tenant, c.format, got, want)
			}
			wantParts := (n + 699) / 700
			if len(plan.Ranges) != wantParts || len(parts) != wantParts || len(m.Parts) != wantParts {
				t.Fatalf("parts: %d ranges, %d results, %d in manifest; want %d", len(plan.Ranges), len(parts), len(m.Parts), wantParts)
			}
			if n > 0 && parts[0].Chunks != 6 { // 700 rows in pages of 128
				t.Fatalf("part 1 has %d chunks, want 6", parts[0].Chunks)
			}
			if c.format == FormatCSV && strings.Count(string(got), strings.Join(c.cols, ",")+"\n") != 1 {
				t.Fatal("csv header not exactly once")
			}
			other := "@globex.example"
			if c.tenant == "globex" {
				other = "@acme.example"
			}
			if strings.Contains(string(got), other) {
				t.Fatal("another tenant's row in the export")
			}
			if m.Format != c.format || !reflect.DeepEqual(m.Columns, c.cols) || m.Object != ExportPrefix(j.id, j.firstRun())+"export."+c.format+".gz" ||
				m.FileName != c.tenant+"-export-content-"+c.format+"."+c.format+".gz" || !m.ExpiresAt.Equal(j.finalizeInput(nil).ExpiresAt) ||
				m.CreatedAt.IsZero() {
				t.Fatalf("manifest %+v", m)
			}
		}
	})

	t.Run("resume", func(t *testing.T) {
		h := newHarness(t, be.datasets)
		clean := job{id: "acme/export/clean", tenant: "acme", dataset: "customers", format: FormatJSONL,
			columns: []string{"id", "name", "email", "country"}, partRows: 700, pageRows: 128}
		plan, err := h.plan(clean.planInput(h))
		if err != nil {
			t.Fatal(err)
		}
		var cleanParts []PartResult
		cleanChunks := map[string][]byte{}
		for i, r := range plan.Ranges {
			p, err := h.part(clean.partInput(h, i+1, r), nil)
			if err != nil {
				t.Fatal(err)
			}
			cleanParts = append(cleanParts, p)
			for c := 0; c < p.Chunks; c++ {
				cleanChunks[fmt.Sprintf("%d.%d", i+1, c)] = readObject(t, h, chunkKey(clean.id, clean.firstRun(), i+1, c))
			}
		}
		mClean, err := h.finalize(clean.finalizeInput(cleanParts))
		if err != nil {
			t.Fatal(err)
		}

		// The same export again, with part 2 interrupted twice.
		resumed := clean
		resumed.id = "acme/export/resumed"
		keys := tenantKeys(t, be, "acme")
		var parts []PartResult
		for i, r := range plan.Ranges {
			in := resumed.partInput(h, i+1, r)
			if i+1 != 2 {
				p, err := h.part(in, nil)
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, p)
				continue
			}
			// Attempt 1 wrote chunks 0..2 and heartbeat after each, then died.
			for c := 0; c < 3; c++ {
				writeObject(t, h, chunkKey(resumed.id, resumed.firstRun(), 2, c), cleanChunks[fmt.Sprintf("2.%d", c)])
			}
			// Attempt 2 saw only the heartbeat of chunk 1 (that of chunk 2 was lost): it
			// rewrites chunk 2, which must come out identical, and goes on.
			hb := heartbeatAt(t, h, resumed.id, keys, 700, 128, 2)
			before := h.queries()
			p, err := h.part(in, &hb)
			if err != nil {
				t.Fatal(err)
			}
			if q := h.queries() - before; q != 4 { // pages 2..5 of 0..5: resumed, not restarted
				t.Fatalf("resumed part sent %d queries, want 4", q)
			}
			if p != cleanParts[1] {
				t.Fatalf("resumed part %+v, clean %+v", p, cleanParts[1])
			}
			for c := 0; c < p.Chunks; c++ {
				if !bytes.Equal(readObject(t, h, chunkKey(resumed.id, resumed.firstRun(), 2, c)), cleanChunks[fmt.Sprintf("2.%d", c)]) {
					t.Fatalf("chunk %d differs from the clean run's", c)
				}
			}
			// A retry after the part had finished (its result lost) writes nothing new.
			hb = heartbeatAt(t, h, resumed.id, keys, 700, 128, p.Chunks)
			again, err := h.part(in, &hb)
			if err != nil || again != p {
				t.Fatalf("retry after completion: %+v, %v", again, err)
			}
			parts = append(parts, p)
		}
		m, err := h.finalize(resumed.finalizeInput(parts))
		if err != nil {
			t.Fatal(err)
		}
		if m.SHA256 != mClean.SHA256 || m.Bytes != mClean.Bytes || !reflect.DeepEqual(m.Parts, mClean.Parts) {
			t.Fatalf("resumed artifact differs from the clean one:\n%+v\n%+v", m, mClean)
		}
		if !bytes.Equal(h.artifact(t, m), h.artifact(t, mClean)) {
			t.Fatal("resumed content differs")
		}

		// Finalize again (a retry after success): same manifest, though the chunks are gone.
		if left := listKeys(t, h, ExportPrefix(resumed.id, resumed.firstRun())+"part-"); len(left) != 0 {
			t.Fatalf("chunks left after finalize: %v", left)
		}
		m2, err := h.finalize(resumed.finalizeInput(parts))
		if err != nil {
			t.Fatal(err)
		}
		j1, _ := json.Marshal(m)
		j2, _ := json.Marshal(m2)
		if !bytes.Equal(j1, j2) || !reflect.DeepEqual(m, m2) {
			t.Fatalf("second finalize:\n%s\n%s", j1, j2)
		}
	})

	t.Run("stale digest reads nothing", func(t *testing.T) {
		// The approval was given for a catalog where email was not sensitive and phone existed.
		approved := cust
		approved.Columns = append([]Column{}, cust.Columns...)
		approved.Columns[2].Sensitive = false
		approved.Columns = append(approved.Columns, Column{Name: "phone"})
		staleDigest := approved.ConfigDigest()

		h := newHarness(t, be.datasets)
		var logged int
		if be.statements != nil {
			logged = len(be.statements())
		}
		cols := []string{"id", "email", "phone"}
		res, err := h.plan(PlanExportInput{JobID: "acme/export/stale", Tenant: "acme", Dataset: "customers",
			Columns: cols, ConfigDigest: staleDigest, PartRows: 700})
		if err != nil {
			t.Fatal(err)
		}
		if !res.ScopeChanged || res.ConfigDigest != cust.ConfigDigest() || !res.Sensitive ||
			!reflect.DeepEqual(res.Missing, []string{"phone"}) || res.Rows != 0 || len(res.Ranges) != 0 {
			t.Fatalf("plan %+v", res)
		}
		_, err = h.part(ExportPartInput{JobID: "acme/export/stale", Tenant: "acme", Dataset: "customers",
			Columns: []string{"id", "email"}, Format: FormatJSONL, ConfigDigest: staleDigest, Part: 1,
			Range: KeyRange{Through: "8000"}}, nil)
		if appErrType(err) != ErrTypeScopeChanged {
			t.Fatalf("part with a stale digest: %v", err)
		}
		if n := h.queries(); n != 0 {
			t.Fatalf("%d statements sent: %v", n, h.qs)
		}
		if be.statements != nil {
			for _, s := range be.statements()[logged:] {
				if strings.Contains(s, "customers") {
					t.Fatalf("the server saw %q", s)
				}
			}
		}
		if keys := listKeys(t, h, ""); len(keys) != 0 {
			t.Fatalf("objects written: %v", keys)
		}
		// Control: with the current digest the same plan does reach the database, and the
		// server log shows it, the tenant bound as a parameter.
		if _, err := h.plan(PlanExportInput{JobID: "acme/export/stale", Tenant: "acme", Dataset: "customers",
			Columns: []string{"id"}, ConfigDigest: cust.ConfigDigest(), PartRows: 700}); err != nil {
			t.Fatal(err)
		}
		if n := h.queries(); n != 1 {
			t.Fatalf("control plan: %d statements", n)
		}
		if be.statements != nil {
			want := `SELECT "id" FROM "customers" WHERE "tenant" = $1 ORDER BY "id"`
			if !slices.Contains(be.statements()[logged:], want) {
				t.Fatalf("server log lacks %q: %q", want, be.statements()[logged:])
			}
		}
	})

	t.Run("limits and errors", func(t *testing.T) {
		small := be.datasets["customers"]
		small.MaxRows = 4999
		ds := Datasets{"customers": small}
		h := newHarness(t, ds)
		j := job{id: "acme/export/big", tenant: "acme", dataset: "customers", columns: []string{"id"}, partRows: 700}
		_, err := h.plan(j.planInput(h))
		if appErrType(err) != ErrTypeDatasetTooLarge || !strings.Contains(err.Error(), "4999") {
			t.Fatalf("5000 rows over max_rows 4999: %v", err)
		}
		// The tenant is a bound value: SQL in it matches no tenant.
		j.tenant = "acme' OR 'a' = 'a"
		if res, err := h.plan(j.planInput(h)); err != nil || res.Rows != 0 {
			t.Fatalf("injected tenant: %+v, %v", res, err)
		}
		// globex's 3000 rows are within the limit.
		j.tenant = "globex"
		if res, err := h.plan(j.planInput(h)); err != nil || res.Rows != 3000 {
			t.Fatalf("globex: %+v, %v", res, err)
		}

		before := h.queries()
		_, err = h.plan(PlanExportInput{JobID: "acme/export/x", Tenant: "acme", Dataset: "nope", Columns: []string{"id"}})
		if appErrType(err) != ErrTypeDatasetMissing {
			t.Fatalf("unknown dataset: %v", err)
		}
		_, err = h.part(ExportPartInput{JobID: "acme/export/x", Tenant: "acme", Dataset: "nope", Columns: []string{"id"},
			Format: FormatJSONL, Part: 1, Range: KeyRange{Through: "1"}}, nil)
		if appErrType(err) != ErrTypeDatasetMissing {
			t.Fatalf("unknown dataset: %v", err)
		}
		good := job{id: "acme/export/x", tenant: "acme", dataset: "customers", format: FormatJSONL, columns: []string{"id"}}
		mod := func(f func(*ExportPartInput)) ExportPartInput {
			in := good.partInput(h, 1, KeyRange{Through: "9"})
			f(&in)
			return in
		}
		for name, in := range map[string]ExportPartInput{
			"unknown column":  mod(func(in *ExportPartInput) { in.Columns = []string{"id", "ssn"} }),
			"repeated column": mod(func(in *ExportPartInput) { in.Columns = []string{"id", "id"} }),
			"format":          mod(func(in *ExportPartInput) { in.Format = "xml" }),
			"bad key":         mod(func(in *ExportPartInput) { in.Range.Through = "9; DROP TABLE customers" }),
			"no tenant":       mod(func(in *ExportPartInput) { in.Tenant = "" }),
			"part 0":          mod(func(in *ExportPartInput) { in.Part = 0 }),
			"huge page":       mod(func(in *ExportPartInput) { in.PageRows = 1 << 30 }),
			"quoted column":   mod(func(in *ExportPartInput) { in.Columns = []string{`id" FROM x; --`} }),
		} {
			if _, err := h.part(in, nil); appErrType(err) != ErrTypeExportInvalid {
				t.Errorf("%s: %v", name, err)
			}
		}
		// A dataset built in code with a bad identifier is refused before any SQL.
		bad := be.datasets["customers"]
		bad.Table = `customers" WHERE 1=1; --`
		hb := newHarness(t, Datasets{"customers": bad})
		if _, err := hb.plan(PlanExportInput{JobID: "acme/export/x", Tenant: "acme", Dataset: "customers",
			Columns: []string{"id"}, ConfigDigest: bad.ConfigDigest()}); appErrType(err) != ErrTypeExportInvalid || hb.queries() != 0 {
			t.Fatalf("misconfigured dataset: %v, %d statements", err, hb.queries())
		}
		if n := h.queries() - before; n != 0 {
			t.Fatalf("rejected requests sent %d statements", n)
		}
	})

	t.Run("text key", func(t *testing.T) {
		acc := be.datasets["accounts"]
		for _, format := range []string{FormatJSONL, FormatCSV} {
			h := newHarness(t, be.datasets)
			j := job{id: "acme/export/accounts-" + format, tenant: "acme", dataset: "accounts", format: format,
				columns: []string{"code", "balance", "label"}, partRows: 5, pageRows: 2}
			plan, _, m := h.run(t, j)
			want, n := expected(t, be, acc, "acme", j.columns, format)
			if n != 15 || plan.Rows != n || len(plan.Ranges) != 3 || m.Rows != n {
				t.Fatalf("rows %d plan %+v manifest rows %d", n, plan, m.Rows)
			}
			if got := h.artifact(t, m); !bytes.Equal(got, want) {
				t.Fatalf("content\n got %q\nwant %q", got, want)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		h := newHarness(t, be.datasets)
		j := job{id: "acme/export/delete-me", tenant: "acme", dataset: "customers", format: FormatCSV,
			columns: []string{"id"}, partRows: 2000, pageRows: 1000}
		plan, err := h.plan(j.planInput(h))
		if err != nil {
			t.Fatal(err)
		}
		parts := []PartResult{}
		for i, r := range plan.Ranges {
			p, err := h.part(j.partInput(h, i+1, r), nil)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, p)
		}
		// Another job's objects must survive.
		other := job{id: "acme/export/delete-me-not", tenant: "acme", dataset: "customers", format: FormatCSV,
			columns: []string{"id"}, partRows: 2000, pageRows: 1000}
		_, _, mOther := h.run(t, other)
		del := func() error {
			_, err := h.env(nil).ExecuteActivity(h.a.DeleteExport, DeleteExportInput{JobID: j.id, FirstRunID: j.firstRun()})
			return err
		}
		// Mid-job (chunks only) and after finalize.
		if err := del(); err != nil {
			t.Fatal(err)
		}
		if keys := listKeys(t, h, ExportPrefix(j.id, j.firstRun())); len(keys) != 0 {
			t.Fatalf("left: %v", keys)
		}
		for i, r := range plan.Ranges {
			if _, err := h.part(j.partInput(h, i+1, r), nil); err != nil {
				t.Fatal(err)
			}
		}
		m, err := h.finalize(j.finalizeInput(parts))
		if err != nil {
			t.Fatal(err)
		}
		if err := del(); err != nil {
			t.Fatal(err)
		}
		if keys := listKeys(t, h, ExportPrefix(j.id, j.firstRun())); len(keys) != 0 {
			t.Fatalf("left: %v", keys)
		}
		ctx := context.Background()
		if _, err := h.a.Artifacts.ReadManifest(ctx, j.id, j.firstRun()); !errors.Is(err, ErrArtifactGone) {
			t.Fatalf("manifest after delete: %v", err)
		}
		if _, err := h.a.Artifacts.OpenArtifact(ctx, m); !errors.Is(err, ErrArtifactGone) {
			t.Fatalf("artifact after delete: %v", err)
		}
		if err := del(); err != nil {
			t.Fatalf("second delete: %v", err)
		}
		if got, err := h.a.Artifacts.ReadManifest(ctx, other.id, other.firstRun()); err != nil || got.SHA256 != mOther.SHA256 {
			t.Fatalf("the other job's manifest: %v", err)
		}
		h.artifact(t, mOther)
	})
}

// TestExportRunScoped: a job ID reused after Temporal purged the first job (namespace
// retention shorter than the artifact's) is a new job instance. Its export never gets the old
// manifest, even with the old one's sensitive columns still stored, and deleting the old
// instance (its retention) leaves the new one's objects alone. Legacy jobs (no first run ID)
// keep their old prefix, which holds no run-scoped object.
func TestExportRunScoped(t *testing.T) {
	be := sqliteBackend(t)
	h := newHarness(t, be.datasets)
	ctx := context.Background()
	const id = "acme/export/reused"
	old := job{id: id, run: "run-old", tenant: "acme", dataset: "customers", format: FormatCSV,
		columns: []string{"id", "name", "email"}, partRows: 2000, pageRows: 1000}
	_, _, mOld := h.run(t, old)
	legacy := old
	legacy.run = "-"
	_, _, mLegacy := h.run(t, legacy)
	if mOld.RunID != "run-old" || mOld.InputDigest == "" || mLegacy.RunID != "" || mOld.Object == mLegacy.Object {
		t.Fatalf("manifests: %+v\n%+v", mOld, mLegacy)
	}

	// The same job ID again, fewer columns, a new instance: a fresh artifact of its own.
	fresh := old
	fresh.run, fresh.columns = "run-new", []string{"id", "name"}
	_, parts, mNew := h.run(t, fresh)
	if !reflect.DeepEqual(mNew.Columns, fresh.columns) || mNew.RunID != "run-new" || mNew.SHA256 == mOld.SHA256 ||
		!strings.HasPrefix(mNew.Object, ExportPrefix(id, "run-new")) {
		t.Fatalf("new instance got %+v", mNew)
	}
	if got := h.artifact(t, mNew); strings.Contains(string(got), "@acme.example") || !strings.HasPrefix(string(got), "id,name\n") {
		t.Fatalf("new artifact holds other columns: %.200q", got)
	}
	// A retry of the same finalize reuses its own manifest (the chunks are gone by then).
	if again, err := h.finalize(fresh.finalizeInput(parts)); err != nil || again.SHA256 != mNew.SHA256 {
		t.Fatalf("retried finalize: %+v, %v", again, err)
	}

	// A legacy job reusing the ID never gets the stored legacy manifest of other columns.
	legacy2 := legacy
	legacy2.columns = []string{"id"}
	if _, _, m := h.run(t, legacy2); !reflect.DeepEqual(m.Columns, []string{"id"}) || m.SHA256 == mLegacy.SHA256 {
		t.Fatalf("legacy reuse got %+v", m)
	}

	// The old instance's retention (and a legacy one's) deletes nothing of the new one.
	for _, in := range []DeleteExportInput{{JobID: id, FirstRunID: "run-old"}, {JobID: id}} {
		if _, err := h.env(nil).ExecuteActivity(h.a.DeleteExport, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.a.Artifacts.ReadManifest(ctx, id, "run-old"); !errors.Is(err, ErrArtifactGone) {
		t.Fatalf("old manifest after its delete: %v", err)
	}
	if got, err := h.a.Artifacts.ReadManifest(ctx, id, "run-new"); err != nil || got.SHA256 != mNew.SHA256 {
		t.Fatalf("new manifest after the old delete: %+v, %v", got, err)
	}
	h.artifact(t, mNew)
}

// TestPlanExportApproval: the plan carries the worker catalog's approval settings for the
// requested columns, changed scope or not, so the workflow asks with them.
func TestPlanExportApproval(t *testing.T) {
	be := sqliteBackend(t)
	cust := be.datasets["customers"]
	cust.AllowSelfApproval, cust.ApprovalTimeout = true, Duration(3*time.Hour)
	h := newHarness(t, Datasets{"customers": cust})
	j := job{id: "acme/export/plan", tenant: "acme", dataset: "customers", columns: []string{"id", "email"}}
	want := &PlanApproval{Required: true, AllowSelf: true, Sensitive: []string{"email"}, Timeout: Duration(3 * time.Hour)}
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
	for c := 0; c < next; c++ {
		hb.Bytes += int64(len(readObject(t, h, chunkKey(jobID, firstRunTest, 2, c))))
	}
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
		for _, format := range []string{FormatJSONL, FormatCSV} {
			e := newRowEncoder(format, []string{"v"})
			e.reset(nil)
			e.date[0] = c.date
			if err := e.row([]any{c.v}); err != nil {
				t.Fatal(err)
			}
			if format == FormatCSV {
				e.csv.Flush()
				r, err := csv.NewReader(&e.raw).Read()
				if err != nil || r[0] != c.text {
					t.Errorf("csv %#v: %q, %v; want %q", c.v, r, err, c.text)
				}
				continue
			}
			if got, want := e.raw.String(), `{"v":`+c.json+"}\n"; got != want {
				t.Errorf("jsonl %#v: %s want %s", c.v, got, want)
			}
			var back map[string]any
			if err := json.Unmarshal(e.raw.Bytes(), &back); err != nil {
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
	if _, err := s.ReadManifest(ctx, "acme/export/none", firstRunTest); !errors.Is(err, ErrArtifactGone) {
		t.Fatalf("missing manifest: %v", err)
	}
	if _, err := s.OpenArtifact(ctx, Manifest{Object: "exports/x/export.csv.gz"}); !errors.Is(err, ErrArtifactGone) {
		t.Fatalf("missing artifact: %v", err)
	}
	if _, err := s.OpenArtifact(ctx, Manifest{Object: "secrets/key"}); !errors.Is(err, ErrArtifactGone) {
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
			var ds Datasets
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
				ds = DemoDatasets(path)
			} else {
				s := pgtest.Start(b)
				s.Exec(b, `CREATE TABLE customers (id bigint PRIMARY KEY, tenant text NOT NULL, name text NOT NULL,
					email text NOT NULL, country text, plan text NOT NULL, signup_date date NOT NULL)`)
				s.Exec(b, `CREATE INDEX customers_tenant_id ON customers (tenant, id)`)
				s.Exec(b, `INSERT INTO customers SELECT x, CASE WHEN x % 8 IN (2, 5, 7) THEN 'globex' ELSE 'acme' END,
					'Customer ' || x, 'customer' || x || '@example.com', CASE WHEN x % 97 = 0 THEN NULL ELSE 'US' END,
					'pro', date '2022-01-01' + (x % 1000) FROM generate_series(1, $1::int) x`, total)
				s.Exec(b, `ANALYZE customers`)
				d := DemoDatasets("")["customers"]
				d.Driver, d.DSN = DriverPostgres, s.DSN
				ds = Datasets{"customers": d}
			}
			cols := []string{"id", "name", "email", "country", "plan", "signup_date"}
			for _, v := range []struct {
				format string
				conc   int
			}{{FormatJSONL, 1}, {FormatCSV, 1}, {FormatJSONL, 4}} {
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

// runConcurrent is run with up to conc parts in flight, as the workflow runs them.
func (h *harness) runConcurrent(t testing.TB, j job, conc int) Manifest {
	plan, err := h.plan(j.planInput(h))
	if err != nil {
		t.Fatal(err)
	}
	parts := make([]PartResult, len(plan.Ranges))
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
