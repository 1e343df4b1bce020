package frontend

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/temporalio/sqlparser"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/temporalstore"
	"github.com/jobgate/jobgate/workflows"
)

// listQuery is list_jobs' filter for tenant/sub as the Temporal store renders it.
func listQuery(tenant, sub string, lf jobcore.ListFilter) (string, error) {
	jf, err := jobcore.ListJobFilter(tenant, sub, lf)
	if err != nil {
		return "", err
	}
	return temporalstore.VisibilityQuery(jf)
}

// approvalsQuery is list_approvals' filter for tenant/sub as the Temporal store renders it.
func approvalsQuery(tenant, sub string, lf jobcore.ListFilter) (string, error) {
	jf, err := jobcore.ApprovalsJobFilter(tenant, sub, lf)
	if err != nil {
		return "", err
	}
	return temporalstore.VisibilityQuery(jf)
}

func TestBuildListQuery(t *testing.T) {
	const base = "JobTenant = 'acme' AND JobOwner = 'ana' AND ExecutionStatus != 'ContinuedAsNew'"
	const baseAll = "JobTenant = 'acme' AND ExecutionStatus != 'ContinuedAsNew'"
	for _, tc := range []struct {
		lf   jobcore.ListFilter
		want string
	}{
		{jobcore.ListFilter{}, base},
		{jobcore.ListFilter{All: true}, baseAll},
		{jobcore.ListFilter{Kind: "eval"}, base + " AND JobKind = 'eval'"},
		{jobcore.ListFilter{Kind: "export", All: true}, baseAll + " AND JobKind = 'export'"},
		{jobcore.ListFilter{Status: "queued"}, base + " AND ExecutionStatus = 'Running' AND JobStatus = 'queued'"},
		{jobcore.ListFilter{Status: "running"}, base + " AND ExecutionStatus = 'Running' AND JobStatus = 'running'"},
		{jobcore.ListFilter{Status: "awaiting_input"}, base + " AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'"},
		{jobcore.ListFilter{Status: "cancelling"}, base + " AND ExecutionStatus = 'Running' AND JobStatus = 'cancelling'"},
		{jobcore.ListFilter{Status: "succeeded"}, base + " AND ExecutionStatus = 'Completed'"},
		{jobcore.ListFilter{Status: "failed"}, base + " AND ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut')"},
		{jobcore.ListFilter{Status: "cancelled"}, base + " AND ExecutionStatus = 'Canceled'"},
		{jobcore.ListFilter{Kind: "export", Status: "failed", All: true}, baseAll + " AND JobKind = 'export' AND ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut')"},
		{jobcore.ListFilter{Kind: "eval", Status: "awaiting_input"}, base + " AND JobKind = 'eval' AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'"},
	} {
		got, err := listQuery("acme", "ana", tc.lf)
		if err != nil || got != tc.want {
			t.Errorf("%+v:\n got %q, %v\nwant %q", tc.lf, got, err, tc.want)
		}
		assertQueryShape(t, got, "acme", "ana", tc.lf)
	}
	// Values that are not ours never reach a query, even if a listFilter were built by hand.
	for _, lf := range []jobcore.ListFilter{{Kind: "eval' OR 'a'='a"}, {Status: "done"}, {Status: "running' OR 1=1"}} {
		if q, err := listQuery("acme", "ana", lf); err == nil {
			t.Errorf("%+v: built %q", lf, q)
		}
	}
}

func TestBuildListQuery_HostileIdentities(t *testing.T) {
	// Tenants are [a-z0-9_-]: anything else is refused, never escaped.
	for _, tenant := range []string{"", "acme'", "acme' OR JobTenant != 'x", `acme\`, "ACME", "-acme", "acme/x", "ac me", strings.Repeat("a", 64)} {
		for _, all := range []bool{false, true} {
			if q, err := listQuery(tenant, "ana", jobcore.ListFilter{All: all}); err == nil {
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
		q, err := listQuery("acme", tc.sub, jobcore.ListFilter{})
		want := "JobTenant = 'acme' AND JobOwner = " + tc.lit + " AND ExecutionStatus != 'ContinuedAsNew'"
		if err != nil || q != want {
			t.Errorf("sub %q:\n got %q, %v\nwant %q", tc.sub, q, err, want)
		}
		assertQueryShape(t, q, "acme", tc.sub, jobcore.ListFilter{})
	}
	// Subjects Temporal cannot match (see ownerMatchable): no own-jobs query is built; a
	// tenant-wide one ignores the subject.
	for _, sub := range []string{`back\slash`, `trail\`, `dq"x`, `x\' OR 1=1 OR JobOwner = \'`, "'", "''", "'lead", "trail'"} {
		if q, err := listQuery("acme", sub, jobcore.ListFilter{Kind: "eval"}); !errors.Is(err, jobstore.ErrOwnerUnmatchable) {
			t.Errorf("sub %q: got %q, %v; want errOwnerUnmatchable", sub, q, err)
		}
		if q, err := listQuery("acme", sub, jobcore.ListFilter{All: true}); err != nil || q != "JobTenant = 'acme' AND ExecutionStatus != 'ContinuedAsNew'" {
			t.Errorf("sub %q tenant-wide: got %q, %v", sub, q, err)
		}
	}
	// Not printable UTF-8: refused (no verified principal carries one).
	for _, sub := range []string{"", "a\x00b", "a\nb", "a\u202eb", "\xff", strings.Repeat("x", 257)} {
		if q, err := listQuery("acme", sub, jobcore.ListFilter{}); err == nil {
			t.Errorf("sub %q: built %q", sub, q)
		}
	}
	// A tenant-wide listing does not look at the subject at all.
	if _, err := listQuery("acme", "", jobcore.ListFilter{All: true}); err != nil {
		t.Errorf("tenant-wide listing: %v", err)
	}
}

func TestQuoteQueryString(t *testing.T) {
	for _, s := range []string{"plain", "o'brien", `\`, `\'`, `'\`, "a''b", `"`, "名前 ü", "%_*?"} {
		lit, err := temporalstore.QuoteQueryString(s)
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
func assertQueryShape(t *testing.T, q, tenant, sub string, lf jobcore.ListFilter) {
	t.Helper()
	got := parsedComparisons(t, q)
	want := [][2]string{{"JobTenant", tenant}}
	if !lf.All {
		want = append(want, [2]string{"JobOwner", sub})
	}
	want = append(want, [2]string{"ExecutionStatus", "ContinuedAsNew"})
	if lf.Kind != "" {
		want = append(want, [2]string{"JobKind", lf.Kind})
	}
	switch lf.Status {
	case "":
	case workflows.StatusSucceeded:
		want = append(want, [2]string{"ExecutionStatus", "Completed"})
	case workflows.StatusFailed:
		want = append(want, [2]string{"ExecutionStatus", "Failed"}, [2]string{"ExecutionStatus", "Terminated"}, [2]string{"ExecutionStatus", "TimedOut"})
	case workflows.StatusCancelled:
		want = append(want, [2]string{"ExecutionStatus", "Canceled"})
	default:
		want = append(want, [2]string{"ExecutionStatus", "Running"}, [2]string{"JobStatus", string(lf.Status)})
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

// TestBuildApprovalsQuery: list_approvals selects answerable rows in the query itself —
// requests allowing self-approval, and approver requests of jobs the caller does not own — with
// the caller's subject quoted; a subject the store cannot match falls back to both approver kinds
// (its own rows are then dropped after the query, and only its own).
func TestBuildApprovalsQuery(t *testing.T) {
	lf, err := jobcore.ParseListFilter(jobcore.ListJobsIn{Kind: "export", Status: string(workflows.StatusAwaitingInput)}, true)
	if err != nil {
		t.Fatal(err)
	}
	base := "JobTenant = 'acme' AND ExecutionStatus != 'ContinuedAsNew' AND JobKind = 'export' AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'"
	for sub, want := range map[string]string{
		"steward": base + " AND (JobAnswerer = 'approver-or-owner' OR (JobAnswerer = 'approver' AND JobOwner != 'steward'))",
		"o'neil":  base + ` AND (JobAnswerer = 'approver-or-owner' OR (JobAnswerer = 'approver' AND JobOwner != 'o\'neil'))`,
		`a\b`:     base + " AND JobAnswerer IN ('approver-or-owner', 'approver')",
		"'quoted": base + " AND JobAnswerer IN ('approver-or-owner', 'approver')",
	} {
		got, err := approvalsQuery("acme", sub, lf)
		if err != nil || got != want {
			t.Errorf("sub %q:\n got %q, %v\nwant %q", sub, got, err, want)
		}
	}
	if q, err := approvalsQuery("acme", "", lf); err == nil {
		t.Errorf("empty subject: %q", q)
	}
	own := lf
	own.All = false
	if q, err := approvalsQuery("acme", "steward", own); err == nil {
		t.Errorf("own-jobs filter accepted: %q", q)
	}
}

// A group of owners (quota's owner groups) is one IN list of quoted literals: each owner parses
// back as exactly itself, whatever quotes it holds, and nothing else joins the query; a subject
// the store cannot match refuses the whole filter.
func TestOwnersQuery(t *testing.T) {
	owners := []string{"ana", "o'brien", "a''b", "x' OR JobOwner != 'y", "名前 ü"}
	q, err := temporalstore.VisibilityQuery(jobstore.Filter{Tenant: "acme", Owners: owners, Runs: jobstore.RunsUnfinished})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"JobTenant", "acme"}}
	for _, o := range owners {
		want = append(want, [2]string{"JobOwner", o})
	}
	want = append(want, [2]string{"ExecutionStatus", "Running"})
	if got := parsedComparisons(t, q); !slices.Equal(got, want) {
		t.Fatalf("%q parses as %q, want %q", q, got, want)
	}
	if q, err := temporalstore.VisibilityQuery(jobstore.Filter{Tenant: "acme", Owners: []string{"ana", `trail\`}}); !errors.Is(err, jobstore.ErrOwnerUnmatchable) {
		t.Fatalf("an unmatchable owner in the group: %q, %v", q, err)
	}
}
