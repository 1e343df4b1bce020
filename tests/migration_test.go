package tests

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/jobgate/jobgate/workflows"
)

// Seed 004's migration matrix, the rows not proved elsewhere (header/body disagreement:
// TestProtocolVersions; MRTR on another instance: TestMRTRApproval; Tasks: TestTasks*). Every row
// changes the server instance between requests.

func modernCall(tool, args string, version string) string {
	return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args +
		`,"_meta":{"io.modelcontextprotocol/protocolVersion":"` + version + `","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
}

// TestMigrationModernClient: a modern client executes without initialization on a replica that
// never saw it; an unsupported version is rejected clearly and nothing runs; the retry with a
// mutually supported version succeeds; a modern business error is a modern answer, not a sign of
// a legacy server.
func TestMigrationModernClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := uniqueKey(t)
	args := `{"idempotency_key":"` + key + `","suite":"demo","episodes":1,"params":{"episode_ms":0}}`
	auth := "Bearer " + b.token(ana)

	resp, body := postMCPCtx(context.Background(), t, http.DefaultClient, b.url(0), auth, modernCall("start_eval", args, "2099-01-01"),
		"MCP-Protocol-Version", "2099-01-01", "Mcp-Method", "tools/call", "Mcp-Name", "start_eval")
	if resp.StatusCode == http.StatusOK && !strings.Contains(body, `"error"`) {
		t.Fatalf("unsupported version accepted: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(body, "2026-07-28") && !strings.Contains(strings.ToLower(body), "version") {
		t.Fatalf("the rejection does not say what is supported: %d %s", resp.StatusCode, body)
	}
	if _, err := b.temporal.DescribeWorkflowExecution(context.Background(), "acme/eval/ana/"+key, ""); err == nil {
		t.Fatal("a rejected request started a job")
	}
	t.Logf("unsupported version: HTTP %d %s", resp.StatusCode, strings.TrimSpace(body))

	resp, body = postMCPCtx(context.Background(), t, http.DefaultClient, b.url(1), auth, modernCall("start_eval", args, "2026-07-28"),
		"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "start_eval")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"created":true`) {
		t.Fatalf("supported retry: %d %s", resp.StatusCode, body)
	}

	// A modern error answer (a tool error in a 2026 result) from a modern server.
	resp, body = postMCPCtx(context.Background(), t, http.DefaultClient, b.url(0), auth, modernCall("get_eval", `{"handle":"nope"}`, "2026-07-28"),
		"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "get_eval")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `invalid_handle`) || !strings.Contains(body, `"resultType":"complete"`) {
		t.Fatalf("modern tool error: %d %s", resp.StatusCode, body)
	}
	// The same client, falling back to the 2025 era on the other replica, reaches the same job.
	for _, v := range []string{"2025-11-25", "2025-06-18"} {
		o := call(t, b.session(ana, 1, v), "start_eval", startArgs(key, 1, map[string]any{"episode_ms": 0}))
		if mustView(t, o).Created == nil || *o.View.Created || o.View.JobID != "acme/eval/ana/"+key {
			t.Fatalf("%s fallback: %+v", v, o.View)
		}
	}
}

// TestMigrationDuplicateStartWorkerRestartLostResponse: a start whose response is lost, retried on
// another replica while no worker runs, then the worker comes back: one job, one run, finished.
func TestMigrationDuplicateStartWorkerRestartLostResponse(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noWorker: true})
	key := uniqueKey(t)
	args := `{"idempotency_key":"` + key + `","suite":"demo","episodes":3,"params":{"episode_ms":0}}`
	// Lost response: the request is sent, the caller stops reading before the answer.
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url(0), strings.NewReader(modernCall("start_eval", args, "2026-07-28")))
	must(t, err)
	for k, v := range map[string]string{"Authorization": "Bearer " + b.token(ana), "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "start_eval"} {
		req.Header.Set(k, v)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close() // headers arrived; the body (the answer) is never read
	}
	cancel()
	id := "acme/eval/ana/" + key
	eventually(t, 10*time.Second, "the lost start to be durable", func() bool {
		_, err := b.temporal.DescribeWorkflowExecution(context.Background(), id, "")
		return err == nil
	})
	// The caller retries on the other replica, twice, with no worker: same job.
	cs := b.session(ana, 1, "")
	for range 2 {
		v := mustView(t, call(t, cs, "start_eval", startArgs(key, 3, map[string]any{"episode_ms": 0})))
		if v.JobID != id || v.Created == nil || *v.Created || v.Status != workflows.StatusQueued {
			t.Fatalf("retry: %+v", v)
		}
	}
	b.startWorker()
	v := mustView(t, call(t, cs, "start_eval", startArgs(key, 3, map[string]any{"episode_ms": 0})))
	waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 30*time.Second)
	resp, err := b.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: namespace, Query: "WorkflowId = '" + id + "'"})
	must(t, err)
	if n := len(resp.GetExecutions()); n != 1 {
		t.Fatalf("%d runs of %s, want exactly 1", n, id)
	}
}
