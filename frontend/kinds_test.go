package frontend

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// kindsFrontend is a frontend serving kinds (nil: the defaults) over a Temporal client that
// never connects: enough for tools, routes and argument checks.
func kindsFrontend(t *testing.T, kinds ...jobcore.KindSpec) (*Frontend, error) {
	t.Helper()
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := authz.NewHS256Verifier("iss", "http://localhost/mcp", []byte("0123456789abcdef0123456789abcdef"), "")
	if err != nil {
		t.Fatal(err)
	}
	return New(jobcore.Options{Temporal: c, Verifier: v, Keys: listTestKeys(t), ResumeKeys: resumeTestKeys(t),
		ResourceURI: "http://localhost/mcp", Kinds: kinds})
}

func servedToolNames(f *Frontend) []string {
	var out []string
	for _, td := range f.Tools() {
		out = append(out, td.Tool.Name)
	}
	return out
}

// specNames are the names of kinds, in order.
func specNames(ks []jobcore.KindSpec) []string {
	var out []string
	for _, k := range ks {
		out = append(out, k.Name())
	}
	return out
}

// toolOrder is the tools/list order for kinds served in this order: every get tool, the
// lists, the kinds' further read tools (eval's list_episodes), then starts, cancels and
// resumes (space-separated).
func toolOrder(kinds ...string) string {
	var out []string
	for _, verb := range []string{"get", "", "start", "cancel", "resume"} {
		if verb == "" {
			out = append(out, "list_jobs", "list_approvals", "describe_job")
			if slices.Contains(kinds, "eval") {
				out = append(out, "list_episodes")
			}
			continue
		}
		for _, k := range kinds {
			out = append(out, verb+"_"+k)
		}
	}
	// Last, the MCP Apps card's app-only tool (listed only to hosts that render apps).
	return strings.Join(append(out, "decide_approval"), " ")
}

// TestKindsToolOrder: tools/list is built by looping over the served kinds, in Options order:
// every get tool, the lists, then starts, cancels and resumes. The default (no Kinds) serves
// every default kind; eval and export come first, in that order, as the snapshots and
// clients know (a further kind only adds tools after them in each group). The cases with
// explicit kinds pin the exact text.
func TestKindsToolOrder(t *testing.T) {
	defaults := specNames(jobcore.DefaultKinds())
	if len(defaults) < 2 || defaults[0] != "eval" || defaults[1] != "export" {
		t.Fatalf("default kinds %v: want eval and export first, in that order", defaults)
	}
	for _, tc := range []struct {
		name  string
		kinds []jobcore.KindSpec
		want  string
	}{
		{"default", nil, toolOrder(defaults...)},
		{"default kinds listed", jobcore.DefaultKinds(), toolOrder(defaults...)},
		{"reversed", []jobcore.KindSpec{jobcore.ExportKind(jobcore.ExportOptions{}), jobcore.EvalKind(jobcore.EvalOptions{})},
			"get_export get_eval list_jobs list_approvals describe_job list_episodes start_export start_eval cancel_export cancel_eval resume_export resume_eval decide_approval"},
		{"eval only", []jobcore.KindSpec{jobcore.EvalKind(jobcore.EvalOptions{})}, "get_eval list_jobs list_approvals describe_job list_episodes start_eval cancel_eval resume_eval decide_approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := kindsFrontend(t, tc.kinds...)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(servedToolNames(f), " "); got != tc.want {
				t.Fatalf("tools:\n got %s\nwant %s", got, tc.want)
			}
			// What the MCP server lists is what tools() builds, scope table included.
			for _, n := range servedToolNames(f) {
				if _, ok := f.actions[n]; !ok {
					t.Errorf("%s has no 403 scope entry", n)
				}
			}
		})
	}
}

// TestKindsRoutes: a kind's HTTP routes are served, behind the bearer check, only when the
// kind is: an eval-only frontend has no /artifacts.
func TestKindsRoutes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []jobcore.KindSpec
		want  int
	}{
		{"default", nil, http.StatusUnauthorized},
		{"export", []jobcore.KindSpec{jobcore.ExportKind(jobcore.ExportOptions{})}, http.StatusUnauthorized},
		{"eval only", []jobcore.KindSpec{jobcore.EvalKind(jobcore.EvalOptions{})}, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := kindsFrontend(t, tc.kinds...)
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			f.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/artifacts/some-token", nil))
			if rec.Code != tc.want {
				t.Fatalf("GET /artifacts without a token: %d, want %d", rec.Code, tc.want)
			}
		})
	}
}

// otherKind is a kind the workflows layer does not register.
type otherKind struct{}

func (otherKind) Name() string                           { return "ingest-unregistered" }
func (otherKind) Serve(*jobcore.Core) jobcore.ServedKind { panic("never served") }

// TestKindsRefused: a kind listed twice, one the workflows layer does not know, and a nil one
// are configuration errors at New, not panics or clashing tools.
func TestKindsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []jobcore.KindSpec
		want  string
	}{
		{"twice", []jobcore.KindSpec{jobcore.EvalKind(jobcore.EvalOptions{}), jobcore.ExportKind(jobcore.ExportOptions{}), jobcore.EvalKind(jobcore.EvalOptions{})}, `kind "eval" is listed twice`},
		{"unregistered", []jobcore.KindSpec{jobcore.EvalKind(jobcore.EvalOptions{}), otherKind{}}, `kind "ingest-unregistered" is not registered in workflows`},
		{"nil", []jobcore.KindSpec{nil}, "nil kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kindsFrontend(t, tc.kinds...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestKindsSlots: the episode-slot quota counts the jobs of the kinds that hold slots, and one
// job holds at most what its kind allows; a frontend without such a kind has none.
func TestKindsSlots(t *testing.T) {
	suites := contract.DefaultCatalog()
	big := suites["demo"]
	big.Name, big.MaxConcurrency = "big", 777
	suites["big"] = big
	f, err := kindsFrontend(t, jobcore.ExportKind(jobcore.ExportOptions{}), jobcore.EvalKind(jobcore.EvalOptions{Suites: suites}))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Quota.SlotKinds(); !slices.Equal(got, []string{"eval"}) {
		t.Errorf("slot kinds %q, want [eval]", got)
	}
	if got := f.Quota.MaxJobSlots(); got != 777 {
		t.Errorf("max slots %d, want 777 (the largest suite concurrency)", got)
	}
	f, err = kindsFrontend(t, jobcore.ExportKind(jobcore.ExportOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Quota.MaxJobSlots(); got != 0 {
		t.Errorf("export-only max slots %d, want 0", got)
	}
}

// TestStartChecksOnce: every kind's start checks the start permission first, then the
// idempotency key, before its own arguments (startTool, once for all kinds).
func TestStartChecksOnce(t *testing.T) {
	f, err := kindsFrontend(t)
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool string, p authz.Principal, args map[string]any) *jobcore.ToolError {
		t.Helper()
		i := slices.IndexFunc(f.Tools(), func(td jobcore.ToolDef) bool { return td.Tool.Name == tool })
		raw, _ := json.Marshal(args)
		res, err := f.Tools()[i].Handler(context.Background(), &mcp.CallToolRequest{
			Params: &mcp.CallToolParamsRaw{Name: tool, Arguments: raw},
			Extra:  &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{Extra: map[string]any{jobcore.PrincipalKey: p}}},
		})
		if err != nil || !res.IsError {
			t.Fatalf("%s: %v %+v, want a tool error", tool, err, res)
		}
		var te jobcore.ToolError
		if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &te); err != nil {
			t.Fatal(err)
		}
		return &te
	}
	reader := authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}}
	writer := authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeWrite}}
	for _, tool := range []string{"start_eval", "start_export"} {
		// Bad key and unknown suite/dataset: the permission is checked first, then the key.
		bad := map[string]any{"idempotency_key": "/bad", "suite": "nope", "dataset": "nope", "episodes": 1, "format": "csv", "purpose": "x"}
		if tool == "start_eval" {
			delete(bad, "dataset")
			delete(bad, "format")
			delete(bad, "purpose")
		} else {
			delete(bad, "suite")
			delete(bad, "episodes")
		}
		if te := call(tool, reader, bad); te.Code != jobcore.CodeForbidden {
			t.Errorf("%s without jobs:write: %s %q, want forbidden", tool, te.Code, te.Message)
		}
		if te := call(tool, writer, bad); te.Code != jobcore.CodeInvalidArgument || !strings.HasPrefix(te.Message, "idempotency_key") {
			t.Errorf("%s with a bad key: %s %q, want invalid_argument naming idempotency_key", tool, te.Code, te.Message)
		}
	}
}

// TestDefaultKinds: the defaults are every kind the workflows layer registers, in registry
// order; a configured kind replaces the default of its name in place (tools/list order is
// unchanged); a kind of another name is added after the defaults.
func TestDefaultKinds(t *testing.T) {
	names := func(ks []jobcore.KindSpec) string { return strings.Join(specNames(ks), " ") }
	all := strings.Join(workflows.DefaultKindNames(), " ")
	if got := names(jobcore.DefaultKinds()); got != all {
		t.Fatalf("DefaultKinds(): %s, want every workflows kind: %s", got, all)
	}
	ex := jobcore.ExportKind(jobcore.ExportOptions{DownloadTTL: 42})
	got := jobcore.DefaultKinds(ex)
	i := slices.Index(workflows.DefaultKindNames(), "export")
	if names(got) != all || i < 0 || got[i] != ex {
		t.Fatalf("DefaultKinds(export): %s (configured export in place: %v)", names(got), i >= 0 && got[i] == ex)
	}
	if got := jobcore.DefaultKinds(otherKind{}); names(got) != all+" ingest-unregistered" {
		t.Fatalf("DefaultKinds(other): %s", names(got))
	}
}

// evalPlus is the eval kind with a further read and write tool, as a kind may declare.
type evalPlus struct{ jobcore.KindSpec }

func (e evalPlus) Serve(f *jobcore.Core) jobcore.ServedKind {
	sk := e.KindSpec.Serve(f)
	tool := func(name string, a authz.Action) jobcore.ToolDef {
		return jobcore.NewTool(f, a, &mcp.Tool{Name: name}, func(context.Context, authz.Principal, jobcore.HandleIn) (*jobcore.JobSummary, error) {
			return nil, jobcore.ToolErr(jobcore.CodeNotFound, "none")
		})
	}
	sk.Reads = []jobcore.ToolDef{tool("list_episodes", authz.ActionGet)}
	sk.Writes = []jobcore.ToolDef{tool("retry_eval", authz.ActionCancel)}
	return sk
}

// TestKindsFurtherTools: a kind's further tools are listed with the reads or the writes, and
// get their 403 scope entry like every other tool.
func TestKindsFurtherTools(t *testing.T) {
	f, err := kindsFrontend(t, evalPlus{jobcore.EvalKind(jobcore.EvalOptions{})}, jobcore.ExportKind(jobcore.ExportOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	want := "get_eval get_export list_jobs list_approvals describe_job list_episodes start_eval start_export cancel_eval cancel_export resume_eval resume_export retry_eval decide_approval"
	if got := strings.Join(servedToolNames(f), " "); got != want {
		t.Fatalf("tools:\n got %s\nwant %s", got, want)
	}
	if f.actions["list_episodes"] != authz.ActionGet || f.actions["retry_eval"] != authz.ActionCancel {
		t.Fatalf("scope entries: %v", f.actions)
	}
}
