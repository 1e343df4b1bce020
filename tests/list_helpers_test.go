package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Each test uses its own tenant so visibility counts are exact on the shared Temporal server.
func listTenant() string { return "t-" + randHex(3) }

// listCall calls list_jobs and decodes a page or a tool error (never both).
func listCall(t *testing.T, cs *mcp.ClientSession, args map[string]any) (*jobcore.ListJobsOut, *jobcore.ToolError) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_jobs", Arguments: args})
	must(t, err)
	if len(res.Content) != 1 {
		t.Fatalf("list_jobs: want one text content, got %d", len(res.Content))
	}
	if res.IsError && res.StructuredContent != nil {
		t.Fatalf("list_jobs: error result carries structuredContent")
	}
	var out jobcore.ListJobsOut
	te, err := jobcore.ParseResult(res, &out)
	must(t, err)
	if te != nil {
		return nil, te
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !jsonEqual(tc.Text, string(raw)) {
		t.Fatalf("list_jobs: text content differs from structuredContent")
	}
	if out.Jobs == nil {
		t.Fatalf("list_jobs: jobs must be an array, got %s", raw)
	}
	return &out, nil
}

func listMustPage(t *testing.T, cs *mcp.ClientSession, args map[string]any) *jobcore.ListJobsOut {
	t.Helper()
	out, te := listCall(t, cs, args)
	if te != nil {
		t.Fatalf("list_jobs %v: %s: %s", args, te.Code, te.Message)
	}
	return out
}

func mustListErr(t *testing.T, cs *mcp.ClientSession, args map[string]any, code string) *jobcore.ToolError {
	t.Helper()
	out, te := listCall(t, cs, args)
	if te == nil {
		t.Fatalf("list_jobs: want %s, got a page of %d rows", code, len(out.Jobs))
	}
	if te.Code != code {
		t.Fatalf("list_jobs: want %s, got %s: %s", code, te.Code, te.Message)
	}
	return te
}

// listEverything pages through a listing (alternating replicas) and returns every row.
func listEverything(t *testing.T, css []*mcp.ClientSession, args map[string]any) []jobcore.JobSummary {
	t.Helper()
	var rows []jobcore.JobSummary
	a := listArgs(args)
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("list_jobs: more than 1000 pages")
		}
		page := listMustPage(t, css[i%len(css)], a)
		rows = append(rows, page.Jobs...)
		if page.NextCursor == "" {
			return rows
		}
		a = listArgs(args)
		a["cursor"] = page.NextCursor
	}
}

func listArgs(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func listIDs(rows []jobcore.JobSummary) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.JobID
	}
	return out
}

func listSortedIDs(rows []jobcore.JobSummary) []string {
	out := listIDs(rows)
	slices.Sort(out)
	return out
}

func listStart(t *testing.T, cs *mcp.ClientSession, key string, episodes int, params map[string]any) *jobcore.JobView {
	t.Helper()
	return mustView(t, call(t, cs, "start_eval", startArgs(key, episodes, params)))
}

// startJobAsync is startJob for goroutines: it reports instead of failing the test.
func listStartAsync(cs *mcp.ClientSession, key string, episodes int, params map[string]any) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "start_eval", Arguments: startArgs(key, episodes, params)})
	if err != nil {
		return "", err
	}
	var v jobcore.JobView
	te, err := jobcore.ParseResult(res, &v)
	if err != nil {
		return "", err
	}
	if te != nil {
		return "", fmt.Errorf("start_eval: %s", te)
	}
	return v.JobID, nil
}

// waitListed polls list_jobs (page_size 100, all pages) until it shows exactly want.
func waitListed(t *testing.T, cs *mcp.ClientSession, args map[string]any, want []string) []jobcore.JobSummary {
	t.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	var rows []jobcore.JobSummary
	a := listArgs(args)
	a["page_size"] = 100
	eventually(t, 30*time.Second, fmt.Sprintf("list_jobs %v to show %d jobs", args, len(want)), func() bool {
		rows = listEverything(t, []*mcp.ClientSession{cs}, a)
		return slices.Equal(listSortedIDs(rows), want)
	})
	return rows
}
