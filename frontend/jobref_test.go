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

// TestJobIDInPlaceOfHandle (issue 35): a job ID works wherever a handle does, for whoever may see
// the job; an unknown job ID, another tenant's and another owner's (the caller may not see) are
// all the one not_found, byte for byte, the same answer an unknown handle gets; a job ID of
// another kind names that kind (the caller's own words) as a handle of another kind does.
func TestJobIDInPlaceOfHandle(t *testing.T) {
	fx := newTaskFixture(t)
	res := fx.call(t, taskAna, "get_eval", map[string]any{"handle": "acme/eval/running"})
	if res.JobID != "acme/eval/running" || res.Handle == "" {
		t.Fatalf("get_eval by job ID: %+v", res)
	}
	_, unknownHandle := fx.toolError(t, taskAna, "get_eval", map[string]any{"handle": fx.f.Opts.Keys.SealHandle(handleOf("acme", "acme/eval/purged", "eval"))})
	bo := authz.Principal{Tenant: "acme", Subject: "bo", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	gus := authz.Principal{Tenant: "globex", Subject: "gus", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}}
	for _, c := range []struct {
		who authz.Principal
		ref string
	}{
		{taskAna, "acme/eval/purged"},    // unknown
		{bo, "acme/eval/running"},        // ana's: bo may not see it
		{gus, "acme/eval/running"},       // another tenant's, even for its admin
		{taskAna, "globex/eval/running"}, // names another tenant
		{taskAna, "acme/nokind/running"}, // names no kind
		{taskAna, "acme/eval/\x00"},      // control characters
	} {
		te, got := fx.toolError(t, c.who, "get_eval", map[string]any{"handle": c.ref})
		if te.Code != jobcore.CodeNotFound || got != unknownHandle {
			t.Errorf("%s asking get_eval %q:\n%s\nwant the unknown handle's answer\n%s", c.who.Subject, c.ref, got, unknownHandle)
		}
	}
	te, _ := fx.toolError(t, taskAna, "get_export", map[string]any{"handle": "acme/eval/running"})
	if te.Code != jobcore.CodeInvalidArgument || te.Kind != "eval" {
		t.Errorf("get_export of an eval's job ID: %+v, want invalid_argument with kind eval", te)
	}
	// cancel by job ID is the same cancel.
	if v := fx.call(t, taskAna, "cancel_eval", map[string]any{"handle": "acme/eval/running"}); v.JobID != "acme/eval/running" {
		t.Errorf("cancel_eval by job ID: %+v", v)
	}
}

func handleOf(tenant, id, kind string) handle.Handle {
	return handle.Handle{Tenant: tenant, WorkflowID: id, Kind: kind, Expiry: taskNow.Add(time.Hour)}
}

// call calls tool as p (a 2026-07-28 request without the Tasks extension) and returns its job
// view; a tool error fails the test.
func (fx *taskFixture) call(t *testing.T, p authz.Principal, tool string, args map[string]any) *jobcore.JobView {
	t.Helper()
	rec := fx.post(t, p, "tools/call", tool, map[string]any{"name": tool, "arguments": args,
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{}}}, nil)
	var msg struct{ Result *mcp.CallToolResult }
	if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil || msg.Result == nil {
		t.Fatalf("%s: %d %s (%v)", tool, rec.Code, rec.Body, err)
	}
	var v jobcore.JobView
	te, err := jobcore.ParseResult(msg.Result, &v)
	if err != nil || te != nil {
		t.Fatalf("%s: %v %+v", tool, err, te)
	}
	return &v
}
