package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/workflows"
)

var updateListSeeds = flag.Bool("update-list-seeds", false, "rewrite testdata/fuzz/FuzzListCursor")

func TestParseListFilter(t *testing.T) {
	for _, tc := range []struct {
		in    jobcore.ListJobsIn
		want  jobcore.ListFilter
		field string // invalid_argument naming this field
	}{
		{in: jobcore.ListJobsIn{}, want: jobcore.ListFilter{PageSize: 20}},
		{in: jobcore.ListJobsIn{Kind: "eval", Status: "awaiting_input", PageSize: 100}, want: jobcore.ListFilter{Kind: "eval", Status: workflows.StatusAwaitingInput, PageSize: 100}},
		{in: jobcore.ListJobsIn{Kind: "export", Status: "cancelled", PageSize: 1}, want: jobcore.ListFilter{Kind: "export", Status: workflows.StatusCancelled, PageSize: 1}},
		{in: jobcore.ListJobsIn{Kind: "Eval"}, field: "kind"},
		{in: jobcore.ListJobsIn{Kind: "eval "}, field: "kind"},
		{in: jobcore.ListJobsIn{Kind: "eval' OR 'a'='a"}, field: "kind"},
		{in: jobcore.ListJobsIn{Status: "done"}, field: "status"},
		{in: jobcore.ListJobsIn{Status: "Running"}, field: "status"},
		{in: jobcore.ListJobsIn{Status: "running' OR ExecutionStatus != '"}, field: "status"},
		{in: jobcore.ListJobsIn{PageSize: 101}, field: "page_size"},
		{in: jobcore.ListJobsIn{PageSize: -1}, field: "page_size"},
	} {
		got, err := jobcore.ParseListFilter(tc.in, false)
		if tc.field != "" {
			var te *jobcore.ToolError
			if !errors.As(err, &te) || te.Code != jobcore.CodeInvalidArgument || !strings.HasPrefix(te.Message, tc.field+":") {
				t.Errorf("%+v: want invalid_argument on %s, got %v", tc.in, tc.field, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	if lf, _ := jobcore.ParseListFilter(jobcore.ListJobsIn{}, true); !lf.All {
		t.Error("all not carried")
	}
}

func TestListFingerprint(t *testing.T) {
	filters := []jobcore.ListFilter{
		{PageSize: 20},
		{PageSize: 20, All: true},
		{PageSize: 7},
		{PageSize: 20, Kind: "eval"},
		{PageSize: 20, Kind: "export"},
		{PageSize: 20, Status: "queued"},
		{PageSize: 20, Status: "failed"},
		{PageSize: 20, Kind: "eval", Status: "failed"},
	}
	seen := map[string]jobcore.ListFilter{}
	for _, lf := range filters {
		fp := lf.Fingerprint()
		if prev, dup := seen[fp]; dup {
			t.Errorf("%+v and %+v share fingerprint %s", prev, lf, fp)
		}
		seen[fp] = lf
		if fp != lf.Fingerprint() {
			t.Errorf("%+v: fingerprint not stable", lf)
		}
	}
	// Omitted page_size is the default: the same traversal.
	a, _ := jobcore.ParseListFilter(jobcore.ListJobsIn{}, false)
	b, _ := jobcore.ParseListFilter(jobcore.ListJobsIn{PageSize: jobcore.ListPageSizeDefault}, false)
	if a.Fingerprint() != b.Fingerprint() {
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

func newListFrontend(t testing.TB, store jobstore.Store) *Frontend {
	t.Helper()
	return newStoreFrontend(t, store, jobcore.Options{UIBaseURL: "http://ui.test", Now: func() time.Time { return listNow }})
}

func wantCode(t *testing.T, name string, err error, code string) *jobcore.ToolError {
	t.Helper()
	var te *jobcore.ToolError
	if !errors.As(err, &te) || te.Code != code {
		t.Errorf("%s: want %s, got %v", name, code, err)
		return nil
	}
	return te
}

func TestListJobs_Fake(t *testing.T) {
	ft := memstore.New()
	run, term, done := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	ft.Put(memstore.ExecInfo(t, "acme/eval/a", "acme", "ana", "eval", run, workflows.StatusRunning))
	ft.Put(memstore.ExecInfo(t, "acme/eval/b", "acme", "ana", "eval", term, workflows.StatusRunning))
	ft.Put(memstore.ExecInfo(t, "acme/eval/f", "acme", "ana", "eval", done, workflows.StatusSucceeded))
	ft.Put(memstore.ExecInfo(t, "acme/eval/d", "acme", "bo", "eval", run, workflows.StatusAwaitingInput))
	// Rows outside the filter are dropped, whatever the store returns.
	ft.Leaked = memstore.JobsOf(
		memstore.ExecInfo(t, "globex/eval/c", "globex", "ana", "eval", run, workflows.StatusRunning),
		memstore.ExecInfo(t, "acme/eval/d", "acme", "bo", "eval", run, workflows.StatusRunning),
		memstore.ExecInfo(t, "acme/other/e", "acme", "ana", "other", run, workflows.StatusRunning),
	)
	f := newListFrontend(t, ft)
	ctx := context.Background()

	// ana's jobs, two a page: the running one first, then the finished ones.
	out, err := f.ListJobs(ctx, listAna, jobcore.ListJobsIn{PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := ft.Lists[0]
	if want := (jobstore.Filter{Tenant: "acme", Owner: "ana", Runs: jobstore.RunsLatest}); r.PageSize != 2 || r.Token != nil || !reflect.DeepEqual(r.Filter, want) {
		t.Errorf("first request: %+v, want filter %+v", r, want)
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
	h, err := f.Opts.Keys.OpenHandle(a.Handle, listNow)
	if err != nil || h.Tenant != "acme" || h.WorkflowID != "acme/eval/a" || h.Kind != "eval" || !h.Expiry.Equal(listNow.Add(jobcore.HandleTTLDefault)) {
		t.Errorf("row handle: %+v, %v", h, err)
	}
	c, err := f.Opts.Keys.OpenCursor(out.NextCursor, listNow)
	if err != nil || c.Tenant != "acme" || c.Subject != "ana" || c.Tool != "list_jobs" || len(c.PageToken) == 0 ||
		!c.Expiry.Equal(listNow.Add(jobcore.CursorTTLDefault)) || c.Filter != (jobcore.ListFilter{PageSize: 2}).Fingerprint() {
		t.Errorf("cursor: %+v, %v", c, err)
	}

	out, err = f.ListJobs(ctx, listAna, jobcore.ListJobsIn{PageSize: 2, Cursor: out.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if r := ft.Lists[1]; !bytes.Equal(r.Token, c.PageToken) || r.PageSize != 2 || !reflect.DeepEqual(r.Filter, ft.Lists[0].Filter) {
		t.Errorf("second request: %+v", r)
	}
	if len(out.Jobs) != 1 || out.Jobs[0].Status != workflows.StatusSucceeded || out.NextCursor != "" {
		t.Errorf("last page: %+v", out)
	}

	// Misused cursors never reach Temporal.
	n := len(ft.Lists)
	cur := sealTestCursor(f.Opts.Keys, listAna, jobcore.ListToolName, jobcore.ListFilter{PageSize: 5}, listNow.Add(time.Minute))
	_, err = f.ListJobs(ctx, listAna, jobcore.ListJobsIn{PageSize: 6, Cursor: cur})
	wantCode(t, "other page_size", err, jobcore.CodeCursorInvalid)
	_, err = f.ListJobs(ctx, authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}},
		jobcore.ListJobsIn{PageSize: 5, Cursor: cur})
	wantCode(t, "now tenant-wide", err, jobcore.CodeCursorInvalid)
	_, err = f.ListJobs(ctx, listAna, jobcore.ListJobsIn{PageSize: 5, Kind: "nope", Cursor: cur})
	wantCode(t, "bad kind with cursor", err, jobcore.CodeInvalidArgument)
	if len(ft.Lists) != n {
		t.Errorf("a rejected call reached Temporal")
	}

	// Admin: tenant-wide, other owners' rows kept.
	ft.Leaked = nil
	ops := authz.Principal{Tenant: "acme", Subject: "ops", Scopes: []authz.Scope{authz.ScopeAdmin}}
	out, err = f.ListJobs(ctx, ops, jobcore.ListJobsIn{Kind: "eval", Status: "awaiting_input"})
	if err != nil || len(out.Jobs) != 1 || out.Jobs[0].Owner != "bo" || out.Jobs[0].Status != workflows.StatusAwaitingInput {
		t.Errorf("admin: %+v, %v", out, err)
	}
	if r, want := ft.Lists[len(ft.Lists)-1], (jobstore.Filter{Tenant: "acme", Runs: jobstore.RunsLatest, Kinds: []string{"eval"}, Status: workflows.StatusAwaitingInput}); r.PageSize != 20 ||
		!reflect.DeepEqual(r.Filter, want) {
		t.Errorf("admin request: %+v, want filter %+v", r, want)
	}

	// An empty page is an empty array, not null.
	cy := listAna
	cy.Subject = "cy"
	out, err = f.ListJobs(ctx, cy, jobcore.ListJobsIn{})
	if err != nil || out.Jobs == nil || len(out.Jobs) != 0 || out.NextCursor != "" {
		t.Errorf("empty: %+v, %v", out, err)
	}

	// No list scope.
	_, err = f.ListJobs(ctx, authz.Principal{Tenant: "acme", Subject: "s", Scopes: []authz.Scope{authz.ScopeApprove}}, jobcore.ListJobsIn{})
	wantCode(t, "approve only", err, jobcore.CodeForbidden)

	// Store errors: a rejected page token is cursor_invalid; a rejected query is internal;
	// unreachable is unavailable.
	ft.ListErr = fmt.Errorf("list: %w", jobstore.ErrPageToken)
	_, err = f.ListJobs(ctx, listAna, jobcore.ListJobsIn{PageSize: 5, Cursor: cur})
	wantCode(t, "rejected token", err, jobcore.CodeCursorInvalid)
	ft.ListErr = errors.New("list: invalid query")
	_, err = f.ListJobs(ctx, listAna, jobcore.ListJobsIn{})
	if _, ok := jobcore.AsToolError(err); ok || err == nil {
		t.Errorf("rejected query without cursor: want an internal error, got %v", err)
	}
	ft.ListErr = fmt.Errorf("list: %w: down", jobstore.ErrStoreUnavailable)
	_, err = f.ListJobs(ctx, listAna, jobcore.ListJobsIn{})
	if te, ok := jobcore.AsToolError(err); !ok || te.Code != jobcore.CodeUnavailable || !te.Retryable {
		t.Errorf("unavailable: %v", err)
	}
}

func TestListJobs_UnmatchableSubject(t *testing.T) {
	sub := `back\slash "q"`
	ft := memstore.New()
	ft.Put(memstore.ExecInfo(t, "acme/eval/mine", "acme", sub, "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning))
	f := newListFrontend(t, ft)
	_, err := f.ListJobs(context.Background(), authz.Principal{Tenant: "acme", Subject: sub, Scopes: []authz.Scope{authz.ScopeRead}}, jobcore.ListJobsIn{})
	wantCode(t, "own listing", err, jobcore.CodeForbidden)
	if len(ft.Lists) != 0 {
		t.Fatalf("reached the store: %+v", ft.Lists)
	}
	out, err := f.ListJobs(context.Background(), authz.Principal{Tenant: "acme", Subject: sub, Scopes: []authz.Scope{authz.ScopeAdmin}}, jobcore.ListJobsIn{})
	if err != nil || len(out.Jobs) != 1 || !reflect.DeepEqual(ft.Lists[0].Filter, jobstore.Filter{Tenant: "acme", Runs: jobstore.RunsLatest}) {
		t.Fatalf("tenant-wide: %+v, %v, %+v", out, err, ft.Lists)
	}
}

func TestListJobsTool_Schema(t *testing.T) {
	f := newListFrontend(t, memstore.New())
	td := f.ListJobsTool()
	if td.Tool.Name != "list_jobs" || td.Tool.Annotations == nil || !td.Tool.Annotations.ReadOnlyHint {
		t.Fatalf("tool %+v", td.Tool)
	}
	raw, err := json.Marshal(td.Tool)
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
	if len(in.Required) != 0 || !slices.Equal(in.Properties["kind"].Enum, workflows.DefaultKindNames()) ||
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
	for _, d := range f.Tools() {
		found = found || d.Tool.Name == "list_jobs"
	}
	if !found {
		t.Error("list_jobs is not in tools()")
	}
}

// ---------------------------------------------------------------- fuzzing
