package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

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
	for _, format := range []string{contract.FormatJSONL, contract.FormatCSV} {
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
			{"acme", contract.FormatJSONL, cust.DefaultColumns(), 5000},
			{"acme", contract.FormatCSV, []string{"email", "id", "country", "signup_date"}, 5000},
			{"globex", contract.FormatJSONL, []string{"signup_date", "name", "email"}, 3000},
			{"globex", contract.FormatCSV, cust.DefaultColumns(), 3000},
			{"initech", contract.FormatJSONL, cust.DefaultColumns(), 0},
			{"initech", contract.FormatCSV, cust.DefaultColumns(), 0},
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
			if c.format == contract.FormatCSV && strings.Count(string(got), strings.Join(c.cols, ",")+"\n") != 1 {
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
		clean := job{id: "acme/export/clean", tenant: "acme", dataset: "customers", format: contract.FormatJSONL,
			columns: []string{"id", "name", "email", "country"}, partRows: 700, pageRows: 128}
		plan, err := h.plan(clean.planInput(h))
		if err != nil {
			t.Fatal(err)
		}
		var cleanParts []contract.PartResult
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
		var parts []contract.PartResult
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
			// A probe that the last key is unique, then one query from after it: resumed, not restarted.
			if q := h.queries() - before; q != 2 || !strings.Contains(h.qs[before], `LIMIT 2`) || !strings.Contains(h.qs[len(h.qs)-1], `"id" > $2 AND "id" <= $3`) {
				t.Fatalf("resumed part sent %d queries: %q", q, h.qs[before:])
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
		approved.Columns = append([]contract.Column{}, cust.Columns...)
		approved.Columns[2].Sensitive = false
		approved.Columns = append(approved.Columns, contract.Column{Name: "phone"})
		staleDigest := approved.ConfigDigest()

		h := newHarness(t, be.datasets)
		var logged int
		if be.statements != nil {
			logged = len(be.statements())
		}
		cols := []string{"id", "email", "phone"}
		res, err := h.plan(contract.PlanExportInput{JobID: "acme/export/stale", Tenant: "acme", Dataset: "customers",
			Columns: cols, ConfigDigest: staleDigest, PartRows: 700})
		if err != nil {
			t.Fatal(err)
		}
		if !res.ScopeChanged || res.ConfigDigest != cust.ConfigDigest() || !res.Sensitive ||
			!reflect.DeepEqual(res.Missing, []string{"phone"}) || res.Rows != 0 || len(res.Ranges) != 0 {
			t.Fatalf("plan %+v", res)
		}
		_, err = h.part(contract.ExportPartInput{JobID: "acme/export/stale", Tenant: "acme", Dataset: "customers",
			Columns: []string{"id", "email"}, Format: contract.FormatJSONL, ConfigDigest: staleDigest, Part: 1,
			Range: contract.KeyRange{Through: "8000"}}, nil)
		if appErrType(err) != contract.ErrTypeScopeChanged {
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
		if _, err := h.plan(contract.PlanExportInput{JobID: "acme/export/stale", Tenant: "acme", Dataset: "customers",
			Columns: []string{"id"}, ConfigDigest: cust.ConfigDigest(), PartRows: 700}); err != nil {
			t.Fatal(err)
		}
		if n := h.queries(); n != 3 {
			t.Fatalf("control plan: %d statements", n)
		}
		if be.statements != nil {
			want := `SELECT count(*), (SELECT "id" FROM "customers" WHERE "tenant" = $1 AND "id" > $2 ORDER BY "id" DESC LIMIT 1) FROM "customers" WHERE "tenant" = $1 AND "id" > $2`
			if !slices.Contains(be.statements()[logged:], want) {
				t.Fatalf("server log lacks %q: %q", want, be.statements()[logged:])
			}
		}
	})

	t.Run("limits and errors", func(t *testing.T) {
		small := be.datasets["customers"]
		small.MaxRows = 4999
		ds := contract.Datasets{"customers": small}
		h := newHarness(t, ds)
		j := job{id: "acme/export/big", tenant: "acme", dataset: "customers", columns: []string{"id"}, partRows: 700}
		_, err := h.plan(j.planInput(h))
		if appErrType(err) != contract.ErrTypeDatasetTooLarge || !strings.Contains(err.Error(), "4999") {
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
		_, err = h.plan(contract.PlanExportInput{JobID: "acme/export/x", Tenant: "acme", Dataset: "nope", Columns: []string{"id"}})
		if appErrType(err) != contract.ErrTypeDatasetMissing {
			t.Fatalf("unknown dataset: %v", err)
		}
		_, err = h.part(contract.ExportPartInput{JobID: "acme/export/x", Tenant: "acme", Dataset: "nope", Columns: []string{"id"},
			Format: contract.FormatJSONL, Part: 1, Range: contract.KeyRange{Through: "1"}}, nil)
		if appErrType(err) != contract.ErrTypeDatasetMissing {
			t.Fatalf("unknown dataset: %v", err)
		}
		good := job{id: "acme/export/x", tenant: "acme", dataset: "customers", format: contract.FormatJSONL, columns: []string{"id"}}
		mod := func(f func(*contract.ExportPartInput)) contract.ExportPartInput {
			in := good.partInput(h, 1, contract.KeyRange{Through: "9"})
			f(&in)
			return in
		}
		for name, in := range map[string]contract.ExportPartInput{
			"unknown column":  mod(func(in *contract.ExportPartInput) { in.Columns = []string{"id", "ssn"} }),
			"repeated column": mod(func(in *contract.ExportPartInput) { in.Columns = []string{"id", "id"} }),
			"format":          mod(func(in *contract.ExportPartInput) { in.Format = "xml" }),
			"bad key":         mod(func(in *contract.ExportPartInput) { in.Range.Through = "9; DROP TABLE customers" }),
			"no tenant":       mod(func(in *contract.ExportPartInput) { in.Tenant = "" }),
			"part 0":          mod(func(in *contract.ExportPartInput) { in.Part = 0 }),
			"huge page":       mod(func(in *contract.ExportPartInput) { in.PageRows = 1 << 30 }),
			"quoted column":   mod(func(in *contract.ExportPartInput) { in.Columns = []string{`id" FROM x; --`} }),
		} {
			if _, err := h.part(in, nil); appErrType(err) != contract.ErrTypeExportInvalid {
				t.Errorf("%s: %v", name, err)
			}
		}
		// A dataset built in code with a bad identifier is refused before any SQL.
		bad := be.datasets["customers"]
		bad.Table = `customers" WHERE 1=1; --`
		hb := newHarness(t, contract.Datasets{"customers": bad})
		if _, err := hb.plan(contract.PlanExportInput{JobID: "acme/export/x", Tenant: "acme", Dataset: "customers",
			Columns: []string{"id"}, ConfigDigest: bad.ConfigDigest()}); appErrType(err) != contract.ErrTypeExportInvalid || hb.queries() != 0 {
			t.Fatalf("misconfigured dataset: %v, %d statements", err, hb.queries())
		}
		if n := h.queries() - before; n != 0 {
			t.Fatalf("rejected requests sent %d statements", n)
		}
	})

	t.Run("text key", func(t *testing.T) {
		acc := be.datasets["accounts"]
		for _, format := range []string{contract.FormatJSONL, contract.FormatCSV} {
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
		j := job{id: "acme/export/delete-me", tenant: "acme", dataset: "customers", format: contract.FormatCSV,
			columns: []string{"id"}, partRows: 2000, pageRows: 1000}
		plan, err := h.plan(j.planInput(h))
		if err != nil {
			t.Fatal(err)
		}
		parts := []contract.PartResult{}
		for i, r := range plan.Ranges {
			p, err := h.part(j.partInput(h, i+1, r), nil)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, p)
		}
		// Another job's objects must survive.
		other := job{id: "acme/export/delete-me-not", tenant: "acme", dataset: "customers", format: contract.FormatCSV,
			columns: []string{"id"}, partRows: 2000, pageRows: 1000}
		_, _, mOther := h.run(t, other)
		del := func() error {
			_, err := h.env(nil).ExecuteActivity(h.a.DeleteExport, contract.DeleteExportInput{JobID: j.id, FirstRunID: j.firstRun()})
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
		if _, err := h.a.Artifacts.ReadManifest(ctx, j.id, j.firstRun()); !errors.Is(err, contract.ErrArtifactGone) {
			t.Fatalf("manifest after delete: %v", err)
		}
		if _, err := h.a.Artifacts.OpenArtifact(ctx, m); !errors.Is(err, contract.ErrArtifactGone) {
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
	old := job{id: id, run: "run-old", tenant: "acme", dataset: "customers", format: contract.FormatCSV,
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
	for _, in := range []contract.DeleteExportInput{{JobID: id, FirstRunID: "run-old"}, {JobID: id}} {
		if _, err := h.env(nil).ExecuteActivity(h.a.DeleteExport, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.a.Artifacts.ReadManifest(ctx, id, "run-old"); !errors.Is(err, contract.ErrArtifactGone) {
		t.Fatalf("old manifest after its delete: %v", err)
	}
	if got, err := h.a.Artifacts.ReadManifest(ctx, id, "run-new"); err != nil || got.SHA256 != mNew.SHA256 {
		t.Fatalf("new manifest after the old delete: %+v, %v", got, err)
	}
	h.artifact(t, mNew)
}
