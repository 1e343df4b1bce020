package frontend

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
)

// callTool calls tool over HTTP (a 2026-07-28 request without the Tasks extension) and returns
// its tool error, whose JSON text it also returns.
func (fx *taskFixture) toolError(t *testing.T, p authz.Principal, tool string, args map[string]any) (*jobcore.ToolError, string) {
	t.Helper()
	fx.nextN = 0 // the same request ID, so two answers can be compared byte for byte
	rec := fx.post(t, p, "tools/call", tool, map[string]any{"name": tool, "arguments": args,
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{}}}, nil)
	var msg struct{ Result *mcp.CallToolResult }
	if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil || msg.Result == nil {
		t.Fatalf("%s: %d %s (%v)", tool, rec.Code, rec.Body, err)
	}
	te, err := jobcore.ParseResult(msg.Result, &jobcore.JobView{})
	if err != nil || te == nil {
		t.Fatalf("%s: want a tool error, got %v %s", tool, err, rec.Body)
	}
	return te, rec.Body.String()
}

// TestToolErrorKind: errors of a kind's tools carry the kind as a field; a handle of another
// kind names that job's kind (the CLI follows it); not_found carries none, so it stays
// byte-identical for an unknown job and another tenant's, whichever kind's tool is asked.
func TestToolErrorKind(t *testing.T) {
	fx := newTaskFixture(t)
	seal := func(tenant, id, kind string, exp time.Time) string {
		return fx.f.Opts.Keys.SealHandle(handle.Handle{Tenant: tenant, WorkflowID: id, Kind: kind, Expiry: exp})
	}
	later := taskNow.Add(time.Hour)

	te, _ := fx.toolError(t, taskAna, "get_export", map[string]any{"handle": fx.id["running"]})
	if te.Code != jobcore.CodeInvalidArgument || te.Kind != "eval" {
		t.Errorf("get_export of an eval handle: %+v, want invalid_argument with kind eval", te)
	}
	te, _ = fx.toolError(t, taskAna, "cancel_export", map[string]any{"handle": fx.id["running"]})
	if te.Code != jobcore.CodeInvalidArgument || te.Kind != "eval" {
		t.Errorf("cancel_export of an eval handle: %+v, want invalid_argument with kind eval", te)
	}
	te, _ = fx.toolError(t, taskAna, "get_eval", map[string]any{"handle": seal("acme", "acme/eval/k1", "eval", taskNow)})
	if te.Code != jobcore.CodeHandleExpired || te.Kind != "eval" {
		t.Errorf("expired eval handle: %+v, want handle_expired with kind eval", te)
	}
	te, _ = fx.toolError(t, taskAna, "get_eval", map[string]any{"handle": "garbage"})
	if te.Code != jobcore.CodeInvalidHandle || te.Kind != "eval" {
		t.Errorf("garbage handle: %+v, want invalid_handle with kind eval", te)
	}
	te, _ = fx.toolError(t, taskAna, "start_export", map[string]any{"idempotency_key": "k", "dataset": "nope", "format": "jsonl", "purpose": "p"})
	if te.Kind != "export" {
		t.Errorf("start_export refused: %+v, want kind export", te)
	}

	unknown, want := fx.toolError(t, taskAna, "get_export", map[string]any{"handle": seal("acme", "acme/export/purged", "export", later)})
	if unknown.Code != jobcore.CodeNotFound || unknown.Kind != "" {
		t.Errorf("unknown export: %+v, want not_found without a kind", unknown)
	}
	// The same answer from another kind's tool (tests/tsclient compares them too).
	if _, got := fx.toolError(t, taskAna, "get_eval", map[string]any{"handle": seal("acme", "acme/eval/purged", "eval", later)}); got != want {
		t.Errorf("unknown eval:\n%s\nwant the unknown export's answer\n%s", got, want)
	}
	// Another tenant's handle, of another kind: the kind it would name is not told.
	if _, got := fx.toolError(t, taskAna, "get_export", map[string]any{"handle": seal("globex", "globex/eval/k1", "eval", later)}); got != want {
		t.Errorf("another tenant's eval handle:\n%s\nwant the unknown job's answer\n%s", got, want)
	}
}
