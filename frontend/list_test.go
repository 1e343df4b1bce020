package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/temporalio/sqlparser"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

var updateListSeeds = flag.Bool("update-list-seeds", false, "rewrite testdata/fuzz/FuzzListCursor")

func TestParseListFilter(t *testing.T) {
	for _, tc := range []struct {
		in    ListJobsIn
		want  listFilter
		field string // invalid_argument naming this field
	}{
		{in: ListJobsIn{}, want: listFilter{pageSize: 20}},
		{in: ListJobsIn{Kind: "eval", Status: "awaiting_input", PageSize: 100}, want: listFilter{kind: "eval", status: workflows.StatusAwaitingInput, pageSize: 100}},
		{in: ListJobsIn{Kind: "export", Status: "cancelled", PageSize: 1}, want: listFilter{kind: "export", status: workflows.StatusCancelled, pageSize: 1}},
		{in: ListJobsIn{Kind: "Eval"}, field: "kind"},
		{in: ListJobsIn{Kind: "eval "}, field: "kind"},
		{in: ListJobsIn{Kind: "eval' OR 'a'='a"}, field: "kind"},
		{in: ListJobsIn{Status: "done"}, field: "status"},
		{in: ListJobsIn{Status: "Running"}, field: "status"},
		{in: ListJobsIn{Status: "running' OR ExecutionStatus != '"}, field: "status"},
		{in: ListJobsIn{PageSize: 101}, field: "page_size"},
		{in: ListJobsIn{PageSize: -1}, field: "page_size"},
	} {
		got, err := parseListFilter(tc.in, false)
		if tc.field != "" {
			var te *ToolError
			if !errors.As(err, &te) || te.Code != CodeInvalidArgument || !strings.HasPrefix(te.Message, tc.field+":") {
				t.Errorf("%+v: want invalid_argument on %s, got %v", tc.in, tc.field, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	if lf, _ := parseListFilter(ListJobsIn{}, true); !lf.all {
		t.Error("all not carried")
	}
}

func TestBuildListQuery(t *testing.T) {
	const base = "JobTenant = 'acme' AND JobOwner = 'ana' AND ExecutionStatus != 'ContinuedAsNew'"
	const baseAll = "JobTenant = 'acme' AND ExecutionStatus != 'ContinuedAsNew'"
	for _, tc := range []struct {
		lf   listFilter
		want string
	}{
		{listFilter{}, base},
		{listFilter{all: true}, baseAll},
		{listFilter{kind: "eval"}, base + " AND JobKind = 'eval'"},
		{listFilter{kind: "export", all: true}, baseAll + " AND JobKind = 'export'"},
		{listFilter{status: "queued"}, base + " AND ExecutionStatus = 'Running' AND JobStatus = 'queued'"},
		{listFilter{status: "running"}, base + " AND ExecutionStatus = 'Running' AND JobStatus = 'running'"},
		{listFilter{status: "awaiting_input"}, base + " AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'"},
		{listFilter{status: "cancelling"}, base + " AND ExecutionStatus = 'Running' AND JobStatus = 'cancelling'"},
		{listFilter{status: "succeeded"}, base + " AND ExecutionStatus = 'Completed'"},
		{listFilter{status: "failed"}, base + " AND ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut')"},
		{listFilter{status: "cancelled"}, base + " AND ExecutionStatus = 'Canceled'"},
		{listFilter{kind: "export", status: "failed", all: true}, baseAll + " AND JobKind = 'export' AND ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut')"},
		{listFilter{kind: "eval", status: "awaiting_input"}, base + " AND JobKind = 'eval' AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'"},
	} {
		got, err := buildListQuery("acme", "ana", tc.lf)
		if err != nil || got != tc.want {
			t.Errorf("%+v:\n got %q, %v\nwant %q", tc.lf, got, err, tc.want)
		}
		assertQueryShape(t, got, "acme", "ana", tc.lf)
	}
	// Values that are not ours never reach a query, even if a listFilter were built by hand.
	for _, lf := range []listFilter{{kind: "eval' OR 'a'='a"}, {status: "done"}, {status: "running' OR 1=1"}} {
		if q, err := buildListQuery("acme", "ana", lf); err == nil {
			t.Errorf("%+v: built %q", lf, q)
		}
	}
}

func TestBuildListQuery_HostileIdentities(t *testing.T) {
	// Tenants are [a-z0-9_-]: anything else is refused, never escaped.
	for _, tenant := range []string{"", "acme'", "acme' OR JobTenant != 'x", `acme\`, "ACME", "-acme", "acme/x", "ac me", strings.Repeat("a", 64)} {
		for _, all := range []bool{false, true} {
			if q, err := buildListQuery(tenant, "ana", listFilter{all: all}); err == nil {
				t.Errorf("tenant %q: built %q", tenant, q)
			}
		}
	}
	// Subjects are printable UTF-8 and quoted; quotes cannot end the literal.
	for _, tc := range []struct{ sub, lit string }{
		{"o'brien", `'o\'brien'`},
		{"x' OR JobOwner != 'y", `'x\' OR JobOwner != \'y'`},
		{"a''b", `'a\'\'b'`},
		{"über 名前", "'über 名前'"},
		{"a%b_c*", "'a%b_c*'"},
	} {
		q, err := buildListQuery("acme", tc.sub, listFilter{})
		want := "JobTenant = 'acme' AND JobOwner = " + tc.lit + " AND ExecutionStatus != 'ContinuedAsNew'"
		if err != nil || q != want {
			t.Errorf("sub %q:\n got %q, %v\nwant %q", tc.sub, q, err, want)
		}
		assertQueryShape(t, q, "acme", tc.sub, listFilter{})
	}
	// Subjects Temporal cannot match (see ownerMatchable): no own-jobs query is built; a
	// tenant-wide one ignores the subject.
	for _, sub := range []string{`back\slash`, `trail\`, `dq"x`, `x\' OR 1=1 OR JobOwner = \'`, "'", "''", "'lead", "trail'"} {
		if q, err := buildListQuery("acme", sub, listFilter{kind: "eval"}); !errors.Is(err, errOwnerUnmatchable) {
			t.Errorf("sub %q: got %q, %v; want errOwnerUnmatchable", sub, q, err)
		}
		if q, err := buildListQuery("acme", sub, listFilter{all: true}); err != nil || q != "JobTenant = 'acme' AND ExecutionStatus != 'ContinuedAsNew'" {
			t.Errorf("sub %q tenant-wide: got %q, %v", sub, q, err)
		}
	}
	// Not printable UTF-8: refused (no verified principal carries one).
	for _, sub := range []string{"", "a\x00b", "a\nb", "a\u202eb", "\xff", strings.Repeat("x", 257)} {
		if q, err := buildListQuery("acme", sub, listFilter{}); err == nil {
			t.Errorf("sub %q: built %q", sub, q)
		}
	}
	// A tenant-wide listing does not look at the subject at all.
	if _, err := buildListQuery("acme", "", listFilter{all: true}); err != nil {
		t.Errorf("tenant-wide listing: %v", err)
	}
}

func TestQuoteQueryString(t *testing.T) {
	for _, s := range []string{"plain", "o'brien", `\`, `\'`, `'\`, "a''b", `"`, "名前 ü", "%_*?"} {
		lit, err := quoteQueryString(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		// The visibility query parser reads the literal back as exactly s.
		got := parsedComparisons(t, "JobOwner = "+lit)
		if len(got) != 1 || got[0] != [2]string{"JobOwner", s} {
			t.Errorf("%q quoted as %s parses back as %q", s, lit, got)
		}
	}
}

// parsedComparisons parses a visibility query the way Temporal does (temporalio/sqlparser, as
// the WHERE clause of a SELECT) and returns its comparisons as (column, literal) pairs, in
// order. Anything other than AND-ed "=", "!=" and "IN" comparisons of a column with string
// literals fails the test: a hostile value cannot add an OR, a function or another column.
func parsedComparisons(t *testing.T, q string) [][2]string {
	t.Helper()
	stmt, err := sqlparser.Parse("select * from t where " + q)
	if err != nil {
		t.Fatalf("parse %q: %v", q, err)
	}
	sel, ok := stmt.(*sqlparser.Select)
	if !ok || sel.Where == nil {
		t.Fatalf("parse %q: not a select with a where clause", q)
	}
	var out [][2]string
	var walk func(e sqlparser.Expr)
	walk = func(e sqlparser.Expr) {
		switch e := e.(type) {
		case *sqlparser.AndExpr:
			walk(e.Left)
			walk(e.Right)
		case *sqlparser.ComparisonExpr:
			col, ok := e.Left.(*sqlparser.ColName)
			if !ok {
				t.Fatalf("%q: comparison of a non-column %s", q, sqlparser.String(e.Left))
			}
			var vals []sqlparser.Expr
			switch e.Operator {
			case sqlparser.EqualStr, sqlparser.NotEqualStr:
				vals = []sqlparser.Expr{e.Right}
			case sqlparser.InStr:
				tup, ok := e.Right.(sqlparser.ValTuple)
				if !ok {
					t.Fatalf("%q: IN without a tuple", q)
				}
				vals = tup
			default:
				t.Fatalf("%q: unexpected operator %s", q, e.Operator)
			}
			for _, v := range vals {
				sv, ok := v.(*sqlparser.SQLVal)
				if !ok || sv.Type != sqlparser.StrVal {
					t.Fatalf("%q: non-string value %s", q, sqlparser.String(v))
				}
				out = append(out, [2]string{col.Name.String(), string(sv.Val)})
			}
		default:
			t.Fatalf("%q: unexpected expression %T %s", q, e, sqlparser.String(e))
		}
	}
	walk(sel.Where.Expr)
	return out
}

// assertQueryShape checks what the parsed query says: the tenant, the owner unless tenant-wide,
// and the kind/status constants, nothing else.
func assertQueryShape(t *testing.T, q, tenant, sub string, lf listFilter) {
	t.Helper()
	got := parsedComparisons(t, q)
	want := [][2]string{{"JobTenant", tenant}}
	if !lf.all {
		want = append(want, [2]string{"JobOwner", sub})
	}
	want = append(want, [2]string{"ExecutionStatus", "ContinuedAsNew"})
	if lf.kind != "" {
		want = append(want, [2]string{"JobKind", lf.kind})
	}
	switch lf.status {
	case "":
	case workflows.StatusSucceeded:
		want = append(want, [2]string{"ExecutionStatus", "Completed"})
	case workflows.StatusFailed:
		want = append(want, [2]string{"ExecutionStatus", "Failed"}, [2]string{"ExecutionStatus", "Terminated"}, [2]string{"ExecutionStatus", "TimedOut"})
	case workflows.StatusCancelled:
		want = append(want, [2]string{"ExecutionStatus", "Canceled"})
	default:
		want = append(want, [2]string{"ExecutionStatus", "Running"}, [2]string{"JobStatus", string(lf.status)})
	}
	if len(got) != len(want) {
		t.Fatalf("%q parses as %q, want %q", q, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%q parses as %q, want %q", q, got, want)
		}
	}
}

func TestListFingerprint(t *testing.T) {
	filters := []listFilter{
		{pageSize: 20},
		{pageSize: 20, all: true},
		{pageSize: 7},
		{pageSize: 20, kind: "eval"},
		{pageSize: 20, kind: "export"},
		{pageSize: 20, status: "queued"},
		{pageSize: 20, status: "failed"},
		{pageSize: 20, kind: "eval", status: "failed"},
	}
	seen := map[string]listFilter{}
	for _, lf := range filters {
		fp := lf.fingerprint()
		if prev, dup := seen[fp]; dup {
			t.Errorf("%+v and %+v share fingerprint %s", prev, lf, fp)
		}
		seen[fp] = lf
		if fp != lf.fingerprint() {
			t.Errorf("%+v: fingerprint not stable", lf)
		}
	}
	// Omitted page_size is the default: the same traversal.
	a, _ := parseListFilter(ListJobsIn{}, false)
	b, _ := parseListFilter(ListJobsIn{PageSize: ListPageSizeDefault}, false)
	if a.fingerprint() != b.fingerprint() {
		t.Error("page_size omitted and page_size 20 differ")
	}
}

// ---------------------------------------------------------------- cursors

var (
	listNow = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	listAna = authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
)

func listTestKeys(t testing.TB) *handle.Keyring {
	t.Helper()
	k, err := handle.NewKeyring("k1", map[string][]byte{
		"k0": bytes.Repeat([]byte{0x0a}, handle.MinKeyLen),
		"k1": bytes.Repeat([]byte{0x1b}, handle.MinKeyLen),
	})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// resumeTestKeys are the resume keys of the unit tests' frontends (never the handle keys).
func resumeTestKeys(t testing.TB) *handle.Keyring {
	t.Helper()
	k, err := handle.NewKeyring("r1", map[string][]byte{"r1": bytes.Repeat([]byte{0x5f}, handle.MinKeyLen)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newListFrontend(t testing.TB, store jobStore) *Frontend {
	t.Helper()
	return newStoreFrontend(t, store, Options{UIBaseURL: "http://ui.test", Now: func() time.Time { return listNow }})
}

func sealTestCursor(k *handle.Keyring, p authz.Principal, tool string, lf listFilter, exp time.Time) string {
	return k.SealCursor(handle.Cursor{Tenant: p.Tenant, Subject: p.Subject, Tool: tool, Filter: lf.fingerprint(),
		PageToken: []byte(`{"CloseTime":"9999-12-31T23:59:59Z","StartTime":"2030-01-01T11:00:00Z","RunID":"r1"}`), Expiry: exp})
}

func wantCode(t *testing.T, name string, err error, code string) *ToolError {
	t.Helper()
	var te *ToolError
	if !errors.As(err, &te) || te.Code != code {
		t.Errorf("%s: want %s, got %v", name, code, err)
		return nil
	}
	return te
}

func TestOpenListCursor(t *testing.T) {
	f := newListFrontend(t, newMemStore())
	k := f.opts.Keys
	lf := listFilter{pageSize: 7, kind: "eval"}
	fp := lf.fingerprint()
	valid := sealTestCursor(k, listAna, listToolName, lf, listNow.Add(time.Minute))

	tok, err := f.openListCursor(listAna, listToolName, valid, fp)
	if err != nil || len(tok) == 0 {
		t.Fatalf("valid cursor: %q, %v", tok, err)
	}
	// Scopes are not part of the binding (the tenant-wide flag is, through the filters).
	if _, err := f.openListCursor(authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}}, listToolName, valid, fp); err != nil {
		t.Errorf("same principal, fewer scopes: %v", err)
	}

	bo := authz.Principal{Tenant: "acme", Subject: "bo"}
	gus := authz.Principal{Tenant: "globex", Subject: "ana"}
	expired := sealTestCursor(k, listAna, listToolName, lf, listNow)
	for name, tc := range map[string]struct {
		p   authz.Principal
		raw string
		fp  string
	}{
		"other sub":                {bo, valid, fp},
		"other tenant":             {gus, valid, fp},
		"other page_size":          {listAna, valid, listFilter{pageSize: 8, kind: "eval"}.fingerprint()},
		"other kind":               {listAna, valid, listFilter{pageSize: 7, kind: "export"}.fingerprint()},
		"no kind":                  {listAna, valid, listFilter{pageSize: 7}.fingerprint()},
		"status added":             {listAna, valid, listFilter{pageSize: 7, kind: "eval", status: "queued"}.fingerprint()},
		"tenant-wide":              {listAna, valid, listFilter{pageSize: 7, kind: "eval", all: true}.fingerprint()},
		"other tool":               {listAna, sealTestCursor(k, listAna, "list_exports", lf, listNow.Add(time.Minute)), fp},
		"expired, other sub":       {bo, expired, fp},
		"expired, other filters":   {listAna, expired, listFilter{pageSize: 7}.fingerprint()},
		"expired, other tool":      {listAna, sealTestCursor(k, listAna, "get_eval", lf, listNow), fp},
		"tampered payload":         {listAna, flipByte(valid, len("jgc2.k1.")+10), fp},
		"tampered signature":       {listAna, flipByte(valid, len(valid)-2), fp},
		"truncated":                {listAna, valid[:len(valid)-1], fp},
		"truncated to the payload": {listAna, valid[:strings.LastIndexByte(valid, '.')], fp},
		"a handle": {listAna, k.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/x", Kind: "eval",
			Expiry: listNow.Add(time.Hour)}), fp},
		"other keyring": {listAna, otherRing(t).SealCursor(handle.Cursor{Tenant: "acme", Subject: "ana", Tool: listToolName,
			Filter: fp, PageToken: []byte("x"), Expiry: listNow.Add(time.Minute)}), fp},
		"page_2":  {listAna, "page_2", fp},
		"spaces":  {listAna, " " + valid, fp},
		"too big": {listAna, valid + strings.Repeat("A", handle.MaxCursorLen), fp},
	} {
		_, err := f.openListCursor(tc.p, listToolName, tc.raw, tc.fp)
		if te := wantCode(t, name, err, CodeCursorInvalid); te != nil && te.Retryable {
			t.Errorf("%s: cursor_invalid must not be retryable", name)
		}
	}
	_, err = f.openListCursor(listAna, listToolName, expired, fp)
	if te := wantCode(t, "expired", err, CodeCursorExpired); te != nil &&
		(!strings.Contains(te.Message, "first page") || !strings.Contains(te.Message, "without cursor")) {
		t.Errorf("cursor_expired message %q does not say to restart without cursor", te.Message)
	}
}

func flipByte(s string, i int) string {
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func otherRing(t testing.TB) *handle.Keyring {
	k, err := handle.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{0x2c}, handle.MinKeyLen)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ---------------------------------------------------------------- the tool, against a fake

func payload(t testing.TB, v any) *commonpb.Payload {
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func execInfo(t testing.TB, id, tenant, owner, kind string, st enumspb.WorkflowExecutionStatus, saStatus workflows.Status) *workflowpb.WorkflowExecutionInfo {
	start := listNow.Add(-time.Hour)
	info := &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run-" + id},
		Status:    st,
		StartTime: timestamppb.New(start),
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			"JobTenant": payload(t, tenant), "JobOwner": payload(t, owner), "JobKind": payload(t, kind), "JobStatus": payload(t, string(saStatus)),
		}},
		Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{
			workflows.MemoCreatedAt: payload(t, start),
			workflows.MemoProgress:  payload(t, workflows.Progress{Done: 3, Failed: 1, Total: 10, AsOf: start.Add(time.Minute)}),
		}},
	}
	if st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		info.CloseTime = timestamppb.New(start.Add(2 * time.Minute))
	}
	return info
}

func TestListJobs_Fake(t *testing.T) {
	tok1 := []byte("page-2-token")
	ft := newMemStore()
	ft.pages = []memPage{
		{
			jobs: jobsOf(
				execInfo(t, "acme/eval/a", "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning),
				execInfo(t, "acme/eval/b", "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, workflows.StatusRunning),
				// Rows outside the query are dropped, whatever visibility says.
				execInfo(t, "globex/eval/c", "globex", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning),
				execInfo(t, "acme/eval/d", "acme", "bo", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning),
				execInfo(t, "acme/other/e", "acme", "ana", "other", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning),
			),
			next: tok1,
		},
		{jobs: jobsOf(
			execInfo(t, "acme/eval/f", "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, workflows.StatusSucceeded),
		)},
	}
	f := newListFrontend(t, ft)
	ctx := context.Background()

	out, err := f.listJobs(ctx, listAna, ListJobsIn{PageSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	r := ft.lists[0]
	if r.pageSize != 5 || r.token != nil ||
		r.q != "JobTenant = 'acme' AND JobOwner = 'ana' AND ExecutionStatus != 'ContinuedAsNew'" {
		t.Errorf("first request: %+v", r)
	}
	if len(out.Jobs) != 2 || out.Jobs[0].JobID != "acme/eval/a" || out.Jobs[1].JobID != "acme/eval/b" || out.NextCursor == "" {
		t.Fatalf("first page: %+v", out)
	}
	a, b := out.Jobs[0], out.Jobs[1]
	if a.Status != workflows.StatusRunning || a.PollAfterMS != 2000 || a.Progress.Done != 3 || a.Owner != "ana" || a.Kind != "eval" ||
		!a.CreatedAt.Equal(listNow.Add(-time.Hour)) || !a.UpdatedAt.Equal(listNow.Add(-59*time.Minute)) ||
		a.UIURL != "" { // ana is no admin: the Web UI is an operator tool (TestUIURLFor)

		t.Errorf("row a: %+v", a)
	}
	if b.Status != workflows.StatusFailed || b.PollAfterMS != 0 || b.Error == nil || b.Error.Code != "terminated" ||
		!b.UpdatedAt.Equal(listNow.Add(-58*time.Minute)) {
		t.Errorf("row b: %+v", b)
	}
	h, err := f.opts.Keys.OpenHandle(a.Handle, listNow)
	if err != nil || h.Tenant != "acme" || h.WorkflowID != "acme/eval/a" || h.Kind != "eval" || !h.Expiry.Equal(listNow.Add(HandleTTLDefault)) {
		t.Errorf("row handle: %+v, %v", h, err)
	}
	c, err := f.opts.Keys.OpenCursor(out.NextCursor, listNow)
	if err != nil || c.Tenant != "acme" || c.Subject != "ana" || c.Tool != "list_jobs" || !bytes.Equal(c.PageToken, tok1) ||
		!c.Expiry.Equal(listNow.Add(CursorTTLDefault)) || c.Filter != (listFilter{pageSize: 5}).fingerprint() {
		t.Errorf("cursor: %+v, %v", c, err)
	}

	out, err = f.listJobs(ctx, listAna, ListJobsIn{PageSize: 5, Cursor: out.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if r := ft.lists[1]; !bytes.Equal(r.token, tok1) || r.pageSize != 5 || r.q != ft.lists[0].q {
		t.Errorf("second request: %+v", r)
	}
	if len(out.Jobs) != 1 || out.Jobs[0].Status != workflows.StatusSucceeded || out.NextCursor != "" {
		t.Errorf("last page: %+v", out)
	}

	// Misused cursors never reach Temporal.
	n := len(ft.lists)
	cur := sealTestCursor(f.opts.Keys, listAna, listToolName, listFilter{pageSize: 5}, listNow.Add(time.Minute))
	_, err = f.listJobs(ctx, listAna, ListJobsIn{PageSize: 6, Cursor: cur})
	wantCode(t, "other page_size", err, CodeCursorInvalid)
	_, err = f.listJobs(ctx, authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}},
		ListJobsIn{PageSize: 5, Cursor: cur})
	wantCode(t, "now tenant-wide", err, CodeCursorInvalid)
	_, err = f.listJobs(ctx, listAna, ListJobsIn{PageSize: 5, Kind: "nope", Cursor: cur})
	wantCode(t, "bad kind with cursor", err, CodeInvalidArgument)
	if len(ft.lists) != n {
		t.Errorf("a rejected call reached Temporal")
	}

	// Admin: tenant-wide, other owners' rows kept.
	ft.pages = []memPage{{jobs: jobsOf(
		execInfo(t, "acme/eval/d", "acme", "bo", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusAwaitingInput),
	)}}
	ops := authz.Principal{Tenant: "acme", Subject: "ops", Scopes: []authz.Scope{authz.ScopeAdmin}}
	out, err = f.listJobs(ctx, ops, ListJobsIn{Kind: "eval", Status: "awaiting_input"})
	if err != nil || len(out.Jobs) != 1 || out.Jobs[0].Owner != "bo" || out.Jobs[0].Status != workflows.StatusAwaitingInput {
		t.Errorf("admin: %+v, %v", out, err)
	}
	if r := ft.lists[len(ft.lists)-1]; r.pageSize != 20 ||
		r.q != "JobTenant = 'acme' AND ExecutionStatus != 'ContinuedAsNew' AND JobKind = 'eval' AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'" {
		t.Errorf("admin request: %+v", r)
	}

	// An empty page is an empty array, not null.
	out, err = f.listJobs(ctx, listAna, ListJobsIn{})
	if err != nil || out.Jobs == nil || len(out.Jobs) != 0 || out.NextCursor != "" {
		t.Errorf("empty: %+v, %v", out, err)
	}

	// No list scope.
	_, err = f.listJobs(ctx, authz.Principal{Tenant: "acme", Subject: "s", Scopes: []authz.Scope{authz.ScopeApprove}}, ListJobsIn{})
	wantCode(t, "approve only", err, CodeForbidden)

	// Store errors: a rejected page token is cursor_invalid; a rejected query is internal;
	// unreachable is unavailable.
	ft.listErr = fmt.Errorf("list: %w", errPageToken)
	_, err = f.listJobs(ctx, listAna, ListJobsIn{PageSize: 5, Cursor: cur})
	wantCode(t, "rejected token", err, CodeCursorInvalid)
	ft.listErr = errors.New("list: invalid query")
	_, err = f.listJobs(ctx, listAna, ListJobsIn{})
	if _, ok := asToolError(err); ok || err == nil {
		t.Errorf("rejected query without cursor: want an internal error, got %v", err)
	}
	ft.listErr = fmt.Errorf("list: %w: down", errStoreUnavailable)
	_, err = f.listJobs(ctx, listAna, ListJobsIn{})
	if te, ok := asToolError(err); !ok || te.Code != CodeUnavailable || !te.Retryable {
		t.Errorf("unavailable: %v", err)
	}
}

func TestListJobs_UnmatchableSubject(t *testing.T) {
	sub := `back\slash "q"`
	ft := newMemStore()
	ft.pages = []memPage{{jobs: jobsOf(
		execInfo(t, "acme/eval/mine", "acme", sub, "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning),
	)}}
	f := newListFrontend(t, ft)
	_, err := f.listJobs(context.Background(), authz.Principal{Tenant: "acme", Subject: sub, Scopes: []authz.Scope{authz.ScopeRead}}, ListJobsIn{})
	wantCode(t, "own listing", err, CodeForbidden)
	if len(ft.lists) != 0 {
		t.Fatalf("reached the store: %+v", ft.lists)
	}
	out, err := f.listJobs(context.Background(), authz.Principal{Tenant: "acme", Subject: sub, Scopes: []authz.Scope{authz.ScopeAdmin}}, ListJobsIn{})
	if err != nil || len(out.Jobs) != 1 || ft.lists[0].q != "JobTenant = 'acme' AND ExecutionStatus != 'ContinuedAsNew'" {
		t.Fatalf("tenant-wide: %+v, %v, %+v", out, err, ft.lists)
	}
}

func TestListJobsTool_Schema(t *testing.T) {
	f := newListFrontend(t, newMemStore())
	td := f.listJobsTool()
	if td.tool.Name != "list_jobs" || td.tool.Annotations == nil || !td.tool.Annotations.ReadOnlyHint {
		t.Fatalf("tool %+v", td.tool)
	}
	raw, err := json.Marshal(td.tool)
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Input struct {
			Properties map[string]struct {
				Enum     []string `json:"enum"`
				Minimum  *float64 `json:"minimum"`
				Maximum  *float64 `json:"maximum"`
				Required []string `json:"required"`
			} `json:"properties"`
			Required []string `json:"required"`
		} `json:"inputSchema"`
		Output struct {
			Required []string `json:"required"`
		} `json:"outputSchema"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	in := schema.Input
	if len(in.Required) != 0 || strings.Join(in.Properties["kind"].Enum, ",") != "eval,export" ||
		strings.Join(in.Properties["status"].Enum, ",") != "queued,running,awaiting_input,succeeded,failed,cancelling,cancelled" ||
		in.Properties["page_size"].Minimum == nil || *in.Properties["page_size"].Minimum != 1 ||
		in.Properties["page_size"].Maximum == nil || *in.Properties["page_size"].Maximum != 100 ||
		strings.Join(schema.Output.Required, ",") != "jobs" {
		t.Errorf("schema: %s", raw)
	}
	if a, ok := f.actions["list_jobs"]; !ok || a != authz.ActionList {
		t.Errorf("list_jobs action = %q, %v", a, ok)
	}
	found := false
	for _, d := range f.tools() {
		found = found || d.tool.Name == "list_jobs"
	}
	if !found {
		t.Error("list_jobs is not in tools()")
	}
}

// ---------------------------------------------------------------- fuzzing

// listSeeds are FuzzListCursor's named seeds, deterministic (fixed keys and clock). The name
// says the outcome for listAna listing with listSeedFilter: ok, invalid or expired.
var listSeedFilter = listFilter{pageSize: 7, kind: "eval"}

func listSeeds(t testing.TB) map[string]string {
	k := listTestKeys(t)
	old, _ := handle.NewKeyring("k0", map[string][]byte{"k0": bytes.Repeat([]byte{0x0a}, handle.MinKeyLen)})
	valid := sealTestCursor(k, listAna, listToolName, listSeedFilter, listNow.Add(time.Minute))
	bo := authz.Principal{Tenant: "acme", Subject: "bo"}
	return map[string]string{
		"ok_valid":           valid,
		"ok_old_kid":         sealTestCursor(old, listAna, listToolName, listSeedFilter, listNow.Add(time.Minute)),
		"expired":            sealTestCursor(k, listAna, listToolName, listSeedFilter, listNow),
		"invalid_other_sub":  sealTestCursor(k, bo, listToolName, listSeedFilter, listNow.Add(time.Minute)),
		"invalid_other_tool": sealTestCursor(k, listAna, "list_other", listSeedFilter, listNow.Add(time.Minute)),
		"invalid_filters":    sealTestCursor(k, listAna, listToolName, listFilter{pageSize: 7}, listNow.Add(time.Minute)),
		"invalid_expired_bo": sealTestCursor(k, bo, listToolName, listSeedFilter, listNow),
		"invalid_tampered":   flipByte(valid, len("jgc2.k1.")+12),
		"invalid_truncated":  valid[:len(valid)-4],
		"invalid_handle": k.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/x", Kind: "eval",
			Expiry: listNow.Add(time.Hour)}),
		"invalid_garbage": "jgc2.k1.!!",
	}
}

// TestListCursorSeedCorpus keeps testdata/fuzz/FuzzListCursor in step with listSeeds and checks
// each seed's outcome. Rewrite with: go test ./frontend -run TestListCursorSeedCorpus -update-list-seeds
func TestListCursorSeedCorpus(t *testing.T) {
	f := newListFrontend(t, newMemStore())
	dir := filepath.Join("testdata", "fuzz", "FuzzListCursor")
	for name, s := range listSeeds(t) {
		want := "go test fuzz v1\nstring(" + strconv.Quote(s) + ")\n"
		path := filepath.Join(dir, name)
		if *updateListSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s is missing or stale (err %v); run go test ./frontend -run TestListCursorSeedCorpus -update-list-seeds", path, err)
		}
		_, err := f.openListCursor(listAna, listToolName, s, listSeedFilter.fingerprint())
		switch {
		case strings.HasPrefix(name, "ok_"):
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case strings.HasPrefix(name, "expired"):
			wantCode(t, name, err, CodeCursorExpired)
		default:
			wantCode(t, name, err, CodeCursorInvalid)
		}
	}
}

// FuzzListCursor: whatever the string, openListCursor answers a page token only for a cursor
// this service sealed for exactly this caller, tool and filters, and otherwise exactly
// cursor_invalid or cursor_expired (binding before expiry); it never panics.
func FuzzListCursor(f *testing.F) {
	fe := newListFrontend(f, newMemStore())
	fp := listSeedFilter.fingerprint()
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fe.openListCursor(listAna, listToolName, s, fp)
		c, oerr := fe.opts.Keys.OpenCursor(s, listNow)
		bound := oerr == nil || errors.Is(oerr, handle.ErrExpired)
		bound = bound && c.Tenant == listAna.Tenant && c.Subject == listAna.Subject && c.Tool == listToolName && c.Filter == fp
		var te *ToolError
		switch {
		case err == nil:
			if !bound || oerr != nil || len(tok) == 0 || !bytes.Equal(tok, c.PageToken) {
				t.Fatalf("accepted %q: token %q, cursor %+v, %v", s, tok, c, oerr)
			}
		case !errors.As(err, &te):
			t.Fatalf("%q: non-tool error %v", s, err)
		case te.Code == CodeCursorExpired:
			if !bound || !errors.Is(oerr, handle.ErrExpired) {
				t.Fatalf("%q: cursor_expired for an unbound or unexpired cursor (%+v, %v)", s, c, oerr)
			}
		case te.Code == CodeCursorInvalid:
			if bound {
				t.Fatalf("%q: cursor_invalid for a bound cursor (%+v, %v)", s, c, oerr)
			}
		default:
			t.Fatalf("%q: code %s", s, te.Code)
		}
	})
}

// TestBuildApprovalsQuery: list_approvals selects answerable rows in the query itself —
// requests allowing self-approval, and approver requests of jobs the caller does not own — with
// the caller's subject quoted; a subject the store cannot match falls back to both approver kinds
// (its own rows are then dropped after the query, and only its own).
func TestBuildApprovalsQuery(t *testing.T) {
	lf, err := parseListFilter(ListJobsIn{Kind: "export", Status: string(workflows.StatusAwaitingInput)}, true)
	if err != nil {
		t.Fatal(err)
	}
	base := "JobTenant = 'acme' AND ExecutionStatus != 'ContinuedAsNew' AND JobKind = 'export' AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'"
	for sub, want := range map[string]string{
		"steward": base + " AND (JobAnswerer = 'approver-or-owner' OR (JobAnswerer = 'approver' AND JobOwner != 'steward'))",
		"o'neil":  base + ` AND (JobAnswerer = 'approver-or-owner' OR (JobAnswerer = 'approver' AND JobOwner != 'o\'neil'))`,
		`a\b`:     base + " AND JobAnswerer IN ('approver', 'approver-or-owner')",
		"'quoted": base + " AND JobAnswerer IN ('approver', 'approver-or-owner')",
	} {
		got, err := buildApprovalsQuery("acme", sub, lf)
		if err != nil || got != want {
			t.Errorf("sub %q:\n got %q, %v\nwant %q", sub, got, err, want)
		}
	}
	if q, err := buildApprovalsQuery("acme", "", lf); err == nil {
		t.Errorf("empty subject: %q", q)
	}
	own := lf
	own.all = false
	if q, err := buildApprovalsQuery("acme", "steward", own); err == nil {
		t.Errorf("own-jobs filter accepted: %q", q)
	}
}
