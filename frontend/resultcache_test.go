package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/workflows"
)

var (
	rcNow  = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	rcAna  = authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	rcBo   = authz.Principal{Tenant: "acme", Subject: "bo", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	rcOps  = authz.Principal{Tenant: "acme", Subject: "ops", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}}
	rcGus  = authz.Principal{Tenant: "globex", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite, authz.ScopeAdmin}}
	rcEval = workflows.EvalResult{EvalSummary: workflows.EvalSummary{Episodes: 10, Scored: 10, Passed: 9, MeanScore: 0.87, StdErr: 0.03}}
)

type resultFixture struct {
	f   *Frontend
	tc  *memstore.Store
	now time.Time
}

func newResultFixture(t *testing.T, artifacts contract.ArtifactReader) *resultFixture {
	t.Helper()
	fx := &resultFixture{now: rcNow, tc: memstore.New()}
	v, err := authz.NewHS256Verifier("iss", "http://localhost/mcp", bytes.Repeat([]byte{1}, 32), "")
	if err != nil {
		t.Fatal(err)
	}
	fx.f, err = newFrontend(jobcore.Options{Verifier: v, Keys: taskKeys(t), ResumeKeys: resumeTestKeys(t), ResourceURI: "http://localhost/mcp",
		UIBaseURL: "http://ui.test", Kinds: []jobcore.KindSpec{jobcore.EvalKind(jobcore.EvalOptions{}), jobcore.ExportKind(jobcore.ExportOptions{Artifacts: artifacts})},
		Now: func() time.Time { return fx.now }}, fx.tc)
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

// succeeded adds a succeeded run of job id (owner ana) with the given run ID and result.
func (fx *resultFixture) succeeded(t *testing.T, id, kind, runID string, result any) {
	t.Helper()
	info := memstore.ExecInfo(t, id, "acme", "ana", kind, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, workflows.StatusRunning)
	info.Execution.RunId = runID
	fx.tc.Put(info)
	fx.tc.Results[runID] = result
}

func (fx *resultFixture) handle(tenant, id, kind string) string {
	return fx.f.Opts.Keys.SealHandle(handle.Handle{Tenant: tenant, WorkflowID: id, Kind: kind, Expiry: rcNow.Add(24 * time.Hour)})
}

// get calls get_<kind> as p and returns the result's text (a view or a tool error).
func (fx *resultFixture) get(t *testing.T, p authz.Principal, kind, h string) (string, *mcp.CallToolResult) {
	t.Helper()
	res := callTool(t, fx.f, "get_"+kind, p, map[string]any{"handle": h})
	return res.Content[0].(*mcp.TextContent).Text, res
}

func TestResultCache_ClosedRunReadOnce(t *testing.T) {
	fx := newResultFixture(t, nil)
	fx.succeeded(t, "acme/eval/done", "eval", "run-1", rcEval)
	h := fx.handle("acme", "acme/eval/done", "eval")

	first, res := fx.get(t, rcAna, "eval", h)
	if res.IsError || !strings.Contains(first, `"result":{"episodes":10,"scored":10,"passed":9,"failed":0,"mean_score":0.87,"std_err":0.03}`) {
		t.Fatalf("first get: %s", first)
	}
	fx.now = fx.now.Add(time.Minute) // a later call: a fresh handle, the same result
	second, _ := fx.get(t, rcAna, "eval", h)
	if fx.tc.ResultReads["run-1"] != 1 {
		t.Fatalf("the result of a closed run was read %d times, want once", fx.tc.ResultReads["run-1"])
	}
	if fx.tc.Describes != 2 {
		t.Fatalf("%d Describes for two calls: every call must read (and authorize) the job afresh", fx.tc.Describes)
	}
	var v1, v2 jobcore.JobView
	if json.Unmarshal([]byte(first), &v1) != nil || json.Unmarshal([]byte(second), &v2) != nil {
		t.Fatal("views do not decode")
	}
	if v1.Handle == v2.Handle {
		t.Error("the second view repeats the first handle: the handle must be sealed per call, never cached")
	}
	if !reflect.DeepEqual(v1.Result, v2.Result) {
		t.Errorf("cached result differs: %v vs %v", v1.Result, v2.Result)
	}
}

// A workflow ID can name another run later (e.g. the job was purged after retention and the
// key reused): the cache is keyed by run ID, so the new run's result is read, never the old one.
func TestResultCache_KeyedByRunID(t *testing.T) {
	fx := newResultFixture(t, nil)
	fx.succeeded(t, "acme/eval/k", "eval", "run-1", rcEval)
	h := fx.handle("acme", "acme/eval/k", "eval")
	fx.get(t, rcAna, "eval", h)

	other := rcEval
	other.Passed, other.MeanScore = 2, 0.25
	fx.succeeded(t, "acme/eval/k", "eval", "run-2", other)
	got, _ := fx.get(t, rcAna, "eval", h)
	if !strings.Contains(got, `"passed":2,`) || !strings.Contains(got, `"mean_score":0.25`) {
		t.Fatalf("new run served the old run's result: %s", got)
	}
	if fx.tc.ResultReads["run-1"] != 1 || fx.tc.ResultReads["run-2"] != 1 {
		t.Fatalf("reads %v, want one per run", fx.tc.ResultReads)
	}
	// And a run that is not (or no longer) succeeded is never served from the cache.
	fx.tc.Jobs["acme/eval/k"].Exec = jobstore.RunFailed
	got, _ = fx.get(t, rcAna, "eval", h)
	if strings.Contains(got, `"result"`) {
		t.Fatalf("a failed run shows a result: %s", got)
	}
}

// The cache never answers who may see a job: another tenant, another owner and a purged job get
// exactly the answer of an unknown job, also while the result is cached.
func TestResultCache_NeverBypassesAuthz(t *testing.T) {
	fx := newResultFixture(t, nil)
	fx.succeeded(t, "acme/eval/done", "eval", "run-1", rcEval)
	h := fx.handle("acme", "acme/eval/done", "eval")
	if _, res := fx.get(t, rcAna, "eval", h); res.IsError {
		t.Fatal("owner's get failed")
	}
	unknown, _ := fx.get(t, rcAna, "eval", fx.handle("acme", "acme/eval/nope", "eval"))
	if !strings.Contains(unknown, jobcore.CodeNotFound) {
		t.Fatalf("unknown job: %s", unknown)
	}
	for name, c := range map[string]struct {
		p authz.Principal
		h string
	}{
		"other tenant, the job's handle":         {rcGus, h},
		"other tenant, a handle of its own":      {rcGus, fx.handle("globex", "acme/eval/done", "eval")},
		"other tenant, its own ID for the job":   {rcGus, fx.handle("globex", "globex/eval/done", "eval")},
		"same tenant, not the owner, not admin":  {rcBo, h},
		"same tenant, read scope only, no owner": {authz.Principal{Tenant: "acme", Subject: "cy", Scopes: []authz.Scope{authz.ScopeRead}}, h},
	} {
		got, res := fx.get(t, c.p, "eval", c.h)
		if !res.IsError || got != unknown {
			t.Errorf("%s: %s, want exactly %s", name, got, unknown)
		}
	}
	delete(fx.tc.Jobs, "acme/eval/done") // purged: the cached result must not keep it alive
	if got, _ := fx.get(t, rcAna, "eval", h); got != unknown {
		t.Errorf("purged job: %s, want exactly %s", got, unknown)
	}
	if fx.tc.ResultReads["run-1"] != 1 {
		t.Errorf("result reads %d, want 1", fx.tc.ResultReads["run-1"])
	}
}

// Only the workflow's result is shared: the rest of an export's result view (its download
// link, bound to the caller) is rendered for each caller.
func TestResultCache_PerCallerViewOfExport(t *testing.T) {
	store, err := activities.OpenArtifactStore(context.Background(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	fx := newResultFixture(t, store)
	fx.succeeded(t, "acme/export/x", "export", "run-x", workflows.ExportResult{Manifest: contract.Manifest{
		Object: "acme/export/x/data.jsonl.gz", FileName: "x.jsonl.gz", Format: "jsonl", Columns: []string{"id", "name"},
		Rows: 3, Bytes: 99, SHA256: strings.Repeat("a", 64), Parts: []contract.ManifestPart{{Part: 0, Rows: 3, Bytes: 99}},
		CreatedAt: rcNow.Add(-time.Hour), ExpiresAt: rcNow.Add(24 * time.Hour)}})
	h := fx.handle("acme", "acme/export/x", "export")
	links := map[string]string{}
	for _, p := range []authz.Principal{rcAna, rcOps, rcAna} {
		got, res := fx.get(t, p, "export", h)
		var v struct {
			Result jobcore.ExportResultView `json:"result"`
		}
		if res.IsError || json.Unmarshal([]byte(got), &v) != nil || v.Result.DownloadURL == "" || v.Result.Rows != 3 ||
			strings.Join(v.Result.Columns, ",") != "id,name" {
			t.Fatalf("%s: %s", p.Subject, got)
		}
		tok := v.Result.DownloadURL[strings.LastIndex(v.Result.DownloadURL, "/")+1:]
		d, err := fx.f.Opts.Keys.OpenDownload(tok, fx.now)
		if err != nil || d.Subject != p.Subject {
			t.Fatalf("%s got a download link for %q (%v)", p.Subject, d.Subject, err)
		}
		if prev, ok := links[p.Subject]; ok && prev != v.Result.DownloadURL {
			t.Errorf("%s: link changed between calls at the same time", p.Subject)
		}
		links[p.Subject] = v.Result.DownloadURL
	}
	if links["ana"] == links["ops"] {
		t.Error("two principals were served the same download link")
	}
	if fx.tc.ResultReads["run-x"] != 1 {
		t.Errorf("result reads %d, want 1", fx.tc.ResultReads["run-x"])
	}
}

func TestResultCache_Bounded(t *testing.T) {
	c := jobcore.NewResultCache()
	typ := reflect.TypeFor[*workflows.EvalResult]()
	for i := range jobcore.ResultCacheMaxEntries + 100 {
		c.Put(jobcore.ResultKey{WorkflowID: "acme/eval/k", RunID: fmt.Sprint("run-", i), Typ: typ}, []byte(`{}`))
	}
	if n := c.Len(); n != jobcore.ResultCacheMaxEntries {
		t.Fatalf("%d entries, want the cap %d", n, jobcore.ResultCacheMaxEntries)
	}
	if _, ok := c.Get(jobcore.ResultKey{WorkflowID: "acme/eval/k", RunID: "run-0", Typ: typ}); ok {
		t.Error("the oldest entry survived eviction")
	}
	if _, ok := c.Get(jobcore.ResultKey{WorkflowID: "acme/eval/k", RunID: fmt.Sprint("run-", jobcore.ResultCacheMaxEntries+99), Typ: typ}); !ok {
		t.Error("the newest entry is missing")
	}
	big := bytes.Repeat([]byte("x"), jobcore.ResultCacheMaxEntry)
	for i := range jobcore.ResultCacheMaxBytes/jobcore.ResultCacheMaxEntry + 10 {
		c.Put(jobcore.ResultKey{WorkflowID: "acme/export/k", RunID: fmt.Sprint("big-", i), Typ: typ}, big)
	}
	if c.Bytes > jobcore.ResultCacheMaxBytes {
		t.Fatalf("%d bytes cached, max %d", c.Bytes, jobcore.ResultCacheMaxBytes)
	}
	c.Put(jobcore.ResultKey{WorkflowID: "acme/export/huge", RunID: "r", Typ: typ}, append(big, 'x'))
	if _, ok := c.Get(jobcore.ResultKey{WorkflowID: "acme/export/huge", RunID: "r", Typ: typ}); ok {
		t.Error("an entry above resultCacheMaxEntry was cached")
	}
	// The key includes the run: the same workflow ID with another run ID is another entry.
	k1 := jobcore.ResultKey{WorkflowID: "acme/eval/same", RunID: "a", Typ: typ}
	c.Put(k1, []byte(`{"passed":1}`))
	if _, ok := c.Get(jobcore.ResultKey{WorkflowID: "acme/eval/same", RunID: "b", Typ: typ}); ok {
		t.Error("a run ID that was never cached hit the cache")
	}
}
