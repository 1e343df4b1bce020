package tests

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"database/sql"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	_ "modernc.org/sqlite"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// exWait polls get_export until the job reaches want (failing fast on another terminal status).
func exWait(t testing.TB, cs *mcp.ClientSession, h string, want workflows.Status, within time.Duration) *jobcore.JobView {
	t.Helper()
	var v *jobcore.JobView
	eventually(t, within, "export status "+string(want), func() bool {
		v = mustView(t, call(t, cs, "get_export", map[string]any{"handle": h}))
		if v.Status.Terminal() && v.Status != want {
			t.Fatalf("export ended %s, want %s: %+v", v.Status, want, v.Error)
		}
		return v.Status == want
	})
	return v
}

func exStart(t testing.TB, cs *mcp.ClientSession, key, format string, cols []string) outcome {
	t.Helper()
	args := map[string]any{"idempotency_key": key, "dataset": "customers", "format": format, "purpose": "quarterly churn analysis"}
	if cols != nil {
		args["columns"] = cols
	}
	return call(t, cs, "start_export", args)
}

// exAwaiting sets up a bundle with the demo customers catalog, in which ana (replica 0) starts
// an export of cols that waits for an approver: the bundle, ana's session, her start view and
// the waiting view.
func exAwaiting(t *testing.T, format string, cols ...string) (*testBundle, *mcp.ClientSession, *jobcore.JobView, *jobcore.JobView) {
	t.Helper()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	cs := b.session(ana, 0, "")
	v := mustView(t, exStart(t, cs, uniqueKey(t), format, cols))
	return b, cs, v, exWait(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
}

func exResume(t testing.TB, cs *mcp.ClientSession, v *jobcore.JobView, decision string) outcome {
	t.Helper()
	return call(t, cs, "resume_export", map[string]any{"handle": v.Handle, "input_id": v.NeedsInput.InputID,
		"scope_digest": v.NeedsInput.ScopeDigest, "decision": decision})
}

// exResult decodes a succeeded export's result.
func exResult(t testing.TB, v *jobcore.JobView) jobcore.ExportResultView {
	t.Helper()
	raw, err := json.Marshal(v.Result)
	must(t, err)
	var r jobcore.ExportResultView
	must(t, json.Unmarshal(raw, &r))
	return r
}

// exGet downloads url with bearer token tok ("" for none) and optional extra headers.
func exGet(t testing.TB, url, tok string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	must(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp, body
}

// onReplica rewrites a download URL (built from the shared resource URI) to replica i.
func (b *testBundle) onReplica(u string, i int) string {
	return strings.Replace(u, "http://localhost", "http://"+b.frontends[i].Addr(), 1)
}

// canonicalRows reads the decompressed artifact and renders each row as "v1\x1fv2…" (NULL as
// \x00), for comparison with an independent read of the source.
func canonicalRows(t testing.TB, format string, gz []byte, cols []string) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	must(t, err)
	raw, err := io.ReadAll(zr)
	must(t, err)
	var out []string
	switch format {
	case "jsonl":
		for _, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
			dec := json.NewDecoder(strings.NewReader(line))
			dec.UseNumber()
			tok, err := dec.Token()
			must(t, err)
			if tok != json.Delim('{') {
				t.Fatalf("line %q is not an object", line)
			}
			var vals []string
			for i := 0; dec.More(); i++ {
				k, err := dec.Token()
				must(t, err)
				if i >= len(cols) || k != cols[i] {
					t.Fatalf("line %q: key %v at %d, want columns %v in order", line, k, i, cols)
				}
				var v any
				must(t, dec.Decode(&v))
				if v == nil {
					vals = append(vals, "\x00")
				} else {
					vals = append(vals, fmt.Sprint(v))
				}
			}
			if len(vals) != len(cols) {
				t.Fatalf("line %q has %d columns, want %d", line, len(vals), len(cols))
			}
			out = append(out, strings.Join(vals, "\x1f"))
		}
	case "csv":
		recs, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
		must(t, err)
		if strings.Join(recs[0], ",") != strings.Join(cols, ",") {
			t.Fatalf("csv header %v, want %v", recs[0], cols)
		}
		for _, r := range recs[1:] {
			out = append(out, strings.Join(r, "\x1f"))
		}
	}
	return out
}

// sourceRows reads tenant's rows of the customers table straight from the database, in key
// order, rendered like canonicalRows (csv cannot tell NULL from empty, so nullAs is "" there).
func sourceRows(t testing.TB, db *sql.DB, placeholder, tenant string, cols []string, nullAs string) []string {
	t.Helper()
	// Every value as the database's own text rendering, so this read shares no code with ours.
	exprs := make([]string, len(cols))
	for i, c := range cols {
		exprs[i] = "CAST(" + c + " AS TEXT)"
	}
	rows, err := db.Query("SELECT "+strings.Join(exprs, ", ")+" FROM customers WHERE tenant = "+placeholder+" ORDER BY customers.id", tenant)
	must(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		must(t, rows.Scan(ptrs...))
		s := make([]string, len(cols))
		for i, v := range vals {
			s[i] = v.String
			if !v.Valid {
				s[i] = nullAs
			}
		}
		out = append(out, strings.Join(s, "\x1f"))
	}
	must(t, rows.Err())
	return out
}

func digestOf(rows []string) string {
	h := sha256.New()
	for _, r := range rows {
		h.Write([]byte(r + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// exDownloadAndCheck downloads a succeeded export as p and checks the bytes against the manifest.
func exDownloadAndCheck(t testing.TB, b *testBundle, p principal, r jobcore.ExportResultView) []byte {
	t.Helper()
	if r.DownloadURL == "" {
		t.Fatalf("no download_url: %+v", r)
	}
	resp, body := exGet(t, b.onReplica(r.DownloadURL, 1), b.token(p), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %d %s", resp.StatusCode, body)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != r.SHA256 || int64(len(body)) != r.Bytes {
		t.Fatalf("downloaded %d bytes sha256 %x; manifest says %d bytes %s", len(body), sum, r.Bytes, r.SHA256)
	}
	return body
}

// TestExportFourEyes: a sensitive column needs an approver other than the owner; every wrong
// answer is refused before history, and no statement reaches the dataset before approval.
func TestExportFourEyes(t *testing.T) {
	t.Parallel()
	b, csAna, v, w := exAwaiting(t, "jsonl", "id", "name", "email")
	csSteward := b.session(steward, 1, "")
	ni := w.NeedsInput
	if ni.Approver != authz.ApproverApprover || ni.RequestedBy != "ana" || ni.SelfApproval ||
		ni.Scope["purpose"] != "quarterly churn analysis" || ni.Scope["dataset"] != "customers" ||
		!strings.Contains(ni.Prompt, "email") {
		t.Fatalf("needs_input: %+v", ni)
	}

	t.Run("OwnerCannotApprove", func(t *testing.T) {
		// ana's own jobs:approve would not help either: authz tests cover that combination.
		mustErr(t, exResume(t, csAna, w, "approve"), jobcore.CodeForbidden)
	})
	t.Run("ApproverOfAnotherTenantGetsNotFound", func(t *testing.T) {
		globexSteward := principal{"globex", "steward", []authz.Scope{authz.ScopeApprove}}
		mustErr(t, exResume(t, b.session(globexSteward, 0, ""), w, "approve"), jobcore.CodeNotFound)
	})
	t.Run("ReadOnlyIsRefusedAtHTTP", func(t *testing.T) {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		defer cancel()
		_, err := b.session(anaRO, 0, "").CallTool(ctx, &mcp.CallToolParams{Name: "resume_export", Arguments: map[string]any{
			"handle": w.Handle, "input_id": ni.InputID, "scope_digest": ni.ScopeDigest, "decision": "approve"}})
		if err == nil || !(strings.Contains(err.Error(), "403") || strings.Contains(err.Error(), "Forbidden")) {
			t.Fatalf("jobs:read only resume: err=%v, want HTTP 403 insufficient_scope", err)
		}
	})
	t.Run("WrongDigestAndStaleInputID", func(t *testing.T) {
		mustErr(t, call(t, csSteward, "resume_export", map[string]any{"handle": w.Handle, "input_id": ni.InputID,
			"scope_digest": "sha256:" + strings.Repeat("0", 64), "decision": "approve"}), jobcore.CodeInputNotExpected)
		mustErr(t, call(t, csSteward, "resume_export", map[string]any{"handle": w.Handle, "input_id": "approve-000000000000",
			"scope_digest": ni.ScopeDigest, "decision": "approve"}), jobcore.CodeInputNotExpected)
	})
	if n := b.queries.count("customers"); n != 0 {
		t.Fatalf("%d statements reached the dataset before approval", n)
	}
	// list_approvals reads visibility, which trails the job's own record by a moment: the
	// request the steward was just shown (get_export, from the run itself) appears there soon.
	eventually(t, 10*time.Second, "list_approvals shows "+v.JobID, func() bool {
		return containsJob(mustPage(t, csSteward, "list_approvals", map[string]any{"kind": "export"}), v.JobID)
	})
	if containsJob(mustPage(t, b.session(ops, 0, ""), "list_jobs", map[string]any{}), "") {
		t.Fatal("a row without a job_id")
	}
	approved := mustView(t, exResume(t, csSteward, w, "approve"))
	if approved.Status == workflows.StatusAwaitingInput {
		t.Fatalf("still awaiting after approval: %+v", approved)
	}
	done := exWait(t, csAna, v.Handle, workflows.StatusSucceeded, 60*time.Second)
	r := exResult(t, done)
	if r.ApprovedBy != "steward" || r.Rows != 5000 || strings.Join(r.Columns, ",") != "id,name,email" {
		t.Fatalf("result: %+v", r)
	}
	if b.queries.count("customers") == 0 {
		t.Fatal("the query hook saw nothing: it proves nothing")
	}
	// The approver lost sight of the job with its input request.
	mustErr(t, call(t, csSteward, "get_export", map[string]any{"handle": v.Handle}), jobcore.CodeNotFound)
}

// TestExportApprovalExpiryAndReject: unanswered → failed/input_expired; rejected → cancelled;
// neither read a row.
func TestExportApprovalExpiryAndReject(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), func(d *contract.Dataset) {
		d.ApprovalTimeout = contract.Duration(2 * time.Second)
	}))})
	cs := b.session(ana, 0, "")
	v := mustView(t, exStart(t, cs, uniqueKey(t), "csv", []string{"id", "email"}))
	f := exWait(t, cs, v.Handle, workflows.StatusFailed, 30*time.Second)
	if f.Error == nil || f.Error.Code != workflows.ErrCodeInputExpired {
		t.Fatalf("expired approval: %+v", f.Error)
	}

	b2, cs2, v2, w2 := exAwaiting(t, "csv", "id", "email")
	mustView(t, exResume(t, b2.session(steward, 0, ""), w2, "reject"))
	c := exWait(t, cs2, v2.Handle, workflows.StatusCancelled, 30*time.Second)
	if c.Error == nil || c.Error.Code != workflows.ErrCodeRejected || !strings.Contains(c.Error.Message, "steward") {
		t.Fatalf("rejected: %+v", c.Error)
	}
	if n := b.queries.count("customers") + b2.queries.count("customers"); n != 0 {
		t.Fatalf("%d statements reached the dataset without an approval", n)
	}
}

// TestExportConfigChangedAfterApproval: the approval was given for the catalog as it was at
// start; the worker now has a catalog where another column is sensitive. The job asks again
// (new input_id, new digest) and reads nothing until that second approval.
func TestExportConfigChangedAfterApproval(t *testing.T) {
	t.Parallel()
	db := demoDB(t)
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(db, nil))})
	cs, csSteward := b.session(ana, 0, ""), b.session(steward, 0, "")
	v := mustView(t, exStart(t, cs, uniqueKey(t), "jsonl", []string{"id", "name", "email"}))
	w := exWait(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)

	// The dataset owner marks "name" sensitive; workers pick up the new catalog.
	b.stopWorker()
	must(t, os.WriteFile(b.datasets, []byte(catalogJSON(t, demoDataset(db, func(d *contract.Dataset) {
		for i := range d.Columns {
			if d.Columns[i].Name == "name" {
				d.Columns[i].Sensitive = true
			}
		}
	}))), 0o600))
	b.startWorker()

	mustView(t, exResume(t, csSteward, w, "approve"))
	var again *jobcore.JobView
	eventually(t, 30*time.Second, "a second input request", func() bool {
		again = mustView(t, call(t, cs, "get_export", map[string]any{"handle": v.Handle}))
		return again.NeedsInput != nil && again.NeedsInput.InputID != w.NeedsInput.InputID
	})
	if again.Status != workflows.StatusAwaitingInput || again.NeedsInput.ScopeDigest == w.NeedsInput.ScopeDigest ||
		!strings.Contains(again.NeedsInput.Prompt, "changed") || fmt.Sprint(again.NeedsInput.Scope["sensitive_columns"]) != "[name email]" {
		t.Fatalf("second request: %+v", again.NeedsInput)
	}
	if n := b.queries.count("customers"); n != 0 {
		t.Fatalf("%d statements reached the changed dataset under the old approval", n)
	}
	// Repeating the accepted answer is deduplicated (a retry after a lost response); it does
	// not answer the new request, and any other answer to the old request is stale.
	if rep := mustView(t, exResume(t, csSteward, w, "approve")); rep.NeedsInput == nil || rep.NeedsInput.InputID != again.NeedsInput.InputID {
		t.Fatalf("a repeated old approval answered the new request: %+v", rep)
	}
	mustErr(t, exResume(t, csSteward, w, "reject"), jobcore.CodeInputNotExpected)
	mustView(t, exResume(t, csSteward, again, "approve"))
	done := exWait(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second)
	if r := exResult(t, done); r.Rows != 5000 {
		t.Fatalf("rows %d", r.Rows)
	}
}

// TestExportRowsSQLite: exactly the caller tenant's rows and the requested columns, equal to an
// independent read of the source, in jsonl and csv; downloads verified against the manifest.
func TestExportRowsSQLite(t *testing.T) {
	t.Parallel()
	path := demoDB(t)
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(path, nil)),
		export: jobcore.ExportTuning{PartRows: 700, PageRows: 128, Concurrency: 3}})
	src, err := sql.Open("sqlite", path)
	must(t, err)
	t.Cleanup(func() { src.Close() })
	cols := []string{"id", "name", "country", "plan", "signup_date"}
	for _, tc := range []struct {
		p      principal
		tenant string
		format string
		rows   int
	}{{ana, "acme", "jsonl", 5000}, {gus, "globex", "csv", 3000}} {
		t.Run(tc.tenant+"/"+tc.format, func(t *testing.T) {
			cs := b.session(tc.p, 0, "")
			v := mustView(t, exStart(t, cs, uniqueKey(t), tc.format, nil)) // default: non-sensitive columns
			done := exWait(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second)
			r := exResult(t, done)
			if strings.Join(r.Columns, ",") != strings.Join(cols, ",") || r.Rows != tc.rows || r.Parts < 2 {
				t.Fatalf("result: %+v", r)
			}
			if done.Progress.Unit != "rows" || done.Progress.Done != tc.rows || done.Progress.Total != tc.rows {
				t.Fatalf("progress: %+v", done.Progress)
			}
			body := exDownloadAndCheck(t, b, tc.p, r)
			got := canonicalRows(t, tc.format, body, cols)
			nullAs := "\x00"
			if tc.format == "csv" {
				nullAs = ""
			}
			want := sourceRows(t, src, "?", tc.tenant, cols, nullAs)
			if len(got) != tc.rows || digestOf(got) != digestOf(want) {
				t.Fatalf("exported %d rows (digest %s); source has %d (digest %s)", len(got), digestOf(got), len(want), digestOf(want))
			}
		})
	}
}

// TestExportDownload: what a download link is and is not worth.
func TestExportDownload(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil)), downloadTTL: time.Hour})
	cs := b.session(ana, 0, "")
	v := mustView(t, exStart(t, cs, uniqueKey(t), "csv", nil))
	r := exResult(t, exWait(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second))
	url := b.onReplica(r.DownloadURL, 0)

	resp, body := exGet(t, url, b.token(ana), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Length") != fmt.Sprint(r.Bytes) ||
		!strings.HasPrefix(resp.Header.Get("Repr-Digest"), "sha-256=:") ||
		!strings.Contains(resp.Header.Get("Content-Disposition"), r.FileName) {
		t.Fatalf("valid download: %d %v", resp.StatusCode, resp.Header)
	}
	full := body
	t.Run("Range", func(t *testing.T) {
		resp, body := exGet(t, url, b.token(ana), map[string]string{"Range": "bytes=10-19"})
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, full[10:20]) {
			t.Fatalf("range: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("AdminOfTenant", func(t *testing.T) {
		if resp, _ := exGet(t, url, b.token(ops), nil); resp.StatusCode != 200 {
			t.Fatalf("tenant admin: %d", resp.StatusCode)
		}
	})
	notFound := func(t *testing.T, what, url, tok string) {
		t.Helper()
		resp, body := exGet(t, url, tok, nil)
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), v.JobID) {
			t.Fatalf("%s: %d %q", what, resp.StatusCode, body)
		}
	}
	t.Run("OtherPrincipal", func(t *testing.T) { notFound(t, "bo", url, b.token(bo)) })
	t.Run("OtherTenant", func(t *testing.T) { notFound(t, "gus", url, b.token(gus)) })
	t.Run("Tampered", func(t *testing.T) {
		i := strings.LastIndex(url, ".") + 3
		c := byte('A')
		if url[i] == 'A' {
			c = 'B'
		}
		notFound(t, "tampered", url[:i]+string(c)+url[i+1:], b.token(ana))
	})
	t.Run("NoBearer", func(t *testing.T) {
		resp, _ := exGet(t, url, "", nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata") {
			t.Fatalf("no bearer: %d %v", resp.StatusCode, resp.Header)
		}
	})
	t.Run("Expired", func(t *testing.T) {
		b.clock.advanceTo(time.Now().Add(time.Hour + time.Second))
		if resp, _ := exGet(t, url, b.token(ana), nil); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("a link past its hour: %d", resp.StatusCode)
		}
		// A fresh view issues a fresh link.
		r2 := exResult(t, mustView(t, call(t, cs, "get_export", map[string]any{"handle": v.Handle})))
		if resp, _ := exGet(t, b.onReplica(r2.DownloadURL, 1), b.token(ana), nil); resp.StatusCode != 200 {
			t.Fatalf("fresh link: %d", resp.StatusCode)
		}
	})
}

// TestExportRetention: past retention the artifact is deleted by the retention workflow,
// get_export says so, and a link issued before answers 410.
func TestExportRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), func(d *contract.Dataset) {
		d.Retention = contract.Duration(4 * time.Second)
	}))})
	cs := b.session(ana, 0, "")
	v := mustView(t, exStart(t, cs, uniqueKey(t), "jsonl", nil))
	r := exResult(t, exWait(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second))
	if r.Expired || r.DownloadURL == "" {
		t.Fatalf("fresh export: %+v", r)
	}
	dir := filepath.Join(strings.TrimPrefix(b.artifacts, "file://"), "exports")
	if n := countFiles(t, dir); n == 0 {
		t.Fatal("no artifact files")
	}
	eventually(t, 30*time.Second, "the retention workflow to delete the artifact", func() bool { return countFiles(t, dir) == 0 })
	g := exResult(t, mustView(t, call(t, cs, "get_export", map[string]any{"handle": v.Handle})))
	if !g.Expired || g.DownloadURL != "" || g.Note == "" {
		t.Fatalf("expired export view: %+v", g)
	}
	if resp, _ := exGet(t, b.onReplica(r.DownloadURL, 0), b.token(ana), nil); resp.StatusCode != http.StatusGone {
		t.Fatalf("download past retention: %d, want 410", resp.StatusCode)
	}
}
