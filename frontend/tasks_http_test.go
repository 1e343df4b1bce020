package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/mcpbody"
	"github.com/jobgate/jobgate/workflows"
)

// taskFixture is a frontend over the in-memory job store holding one job per state.
type taskFixture struct {
	f     *Frontend
	tc    *memstore.Store
	h     http.Handler
	id    map[string]string // state → taskId
	nextN int
}

func newTaskFixture(t *testing.T) *taskFixture {
	t.Helper()
	tc := memstore.New()
	tc.RetentionAnswer = time.Hour
	fx := &taskFixture{tc: tc, id: map[string]string{}}
	fx.f = newTaskFrontend(t, tc)
	fx.h = fx.f.Handler()
	add := func(state string, st enumspb.WorkflowExecutionStatus, sa workflows.Status, memo map[string]any) {
		id := "acme/eval/" + state
		info := memstore.ExecInfo(t, id, "acme", "ana", "eval", st, sa)
		for k, v := range memo {
			info.Memo.Fields[k] = memstore.Payload(t, v)
		}
		tc.Put(info)
		fx.id[state] = fx.f.Opts.Keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: id, Kind: "eval", Expiry: taskNow.Add(7 * 24 * time.Hour)})
	}
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	add("running", running, workflows.StatusRunning, nil)
	ni := &workflows.NeedsInput{InputID: "approve-0123456789ab", Prompt: "Approve 150 episodes?", ScopeDigest: "sha256:" + strings.Repeat("c", 64),
		Approver: authz.ApproverOwner, RequestedBy: "ana", ExpiresAt: taskNow.Add(time.Hour)}
	add("awaiting", running, workflows.StatusAwaitingInput, map[string]any{workflows.MemoNeedsInput: ni})
	add("failed", enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, workflows.StatusRunning,
		map[string]any{workflows.MemoError: &workflows.JobError{Code: "all_episodes_failed", Message: "all 10 episodes failed"}})
	add("cancelled", enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, workflows.StatusRunning,
		map[string]any{workflows.MemoError: &workflows.JobError{Code: "cancelled", Message: "cancelled by ana"}})
	return fx
}

func (fx *taskFixture) token(t *testing.T, p authz.Principal) string {
	t.Helper()
	tok, err := authz.MintHS256(bytes.Repeat([]byte{1}, 32), authz.MintOptions{Issuer: "iss", Audience: "http://localhost/mcp",
		Tenant: p.Tenant, Subject: p.Subject, Scopes: p.Scopes, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// post sends a tasks/* (or any) request; caps nil declares the extension.
func (fx *taskFixture) post(t *testing.T, p authz.Principal, method, name string, params map[string]any, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	if _, ok := params["_meta"]; !ok {
		params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}
	}
	fx.nextN++
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": fx.nextN, "method": method, "params": params})
	req := httptest.NewRequest(http.MethodPost, "http://localhost/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+fx.token(t, p))
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", name)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	fx.h.ServeHTTP(rec, req)
	return rec
}

func (fx *taskFixture) get(t *testing.T, p authz.Principal, state string) (*task, *rpcError, *httptest.ResponseRecorder) {
	t.Helper()
	id := fx.id[state]
	if id == "" {
		id = state
	}
	rec := fx.post(t, p, methodTasksGet, id, map[string]any{"taskId": id}, nil)
	var msg struct {
		Result *task
		Error  *rpcError
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil {
		t.Fatalf("tasks/get %s: %d %s", state, rec.Code, rec.Body)
	}
	return msg.Result, msg.Error, rec
}

func TestTasksOverMemStore(t *testing.T) {
	fx := newTaskFixture(t)
	anaRO := authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}}
	bo := authz.Principal{Tenant: "acme", Subject: "bo", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}

	t.Run("Working", func(t *testing.T) {
		tk, rerr, _ := fx.get(t, taskAna, "running")
		if rerr != nil || tk.ResultType != "complete" || tk.Status != taskWorking || tk.TaskID != fx.id["running"] ||
			tk.CreatedAt != "2030-01-01T11:00:00.000Z" || tk.LastUpdatedAt != "2030-01-01T11:01:00.000Z" ||
			tk.TTLMs != (7*24*time.Hour+time.Hour).Milliseconds() || tk.PollIntervalMs != 2000 || tk.Result != nil {
			t.Fatalf("%+v %+v", tk, rerr)
		}
	})
	t.Run("InputRequiredOnlyForWhoMayAnswer", func(t *testing.T) {
		tk, rerr, _ := fx.get(t, taskAna, "awaiting")
		if rerr != nil || tk.Status != taskInputRequired || len(tk.InputRequests) != 1 || tk.StatusMessage != "Approve 150 episodes?" {
			t.Fatalf("owner: %+v %+v", tk, rerr)
		}
		ni := &workflows.NeedsInput{InputID: "approve-0123456789ab", ScopeDigest: "sha256:" + strings.Repeat("c", 64)}
		if _, ok := tk.InputRequests[jobcore.TaskInputKey(ni)]; !ok {
			t.Fatalf("input requests keyed %v", tk.InputRequests)
		}
		ro, rerr, _ := fx.get(t, anaRO, "awaiting")
		if rerr != nil || ro.Status != taskWorking || len(ro.InputRequests) != 0 || !strings.Contains(ro.StatusMessage, "owner") {
			t.Fatalf("reader: %+v %+v", ro, rerr)
		}
	})
	t.Run("FailedJobIsACompletedToolError", func(t *testing.T) {
		tk, rerr, _ := fx.get(t, taskAna, "failed")
		if rerr != nil || tk.Status != taskCompleted || tk.PollIntervalMs != 0 ||
			!strings.Contains(string(tk.Result), `"isError":true`) || !strings.Contains(string(tk.Result), `all_episodes_failed`) {
			t.Fatalf("%+v %+v %s", tk, rerr, tk.Result)
		}
		// Closed at 11:02 with one hour of retention: the task lives until 12:02, not 7 days.
		if tk.TTLMs != (62 * time.Minute).Milliseconds() {
			t.Fatalf("ttlMs %d, want retention-bound %d", tk.TTLMs, (62 * time.Minute).Milliseconds())
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		tk, rerr, _ := fx.get(t, taskAna, "cancelled")
		if rerr != nil || tk.Status != taskCancelled || tk.StatusMessage != "cancelled by ana" || tk.Result != nil {
			t.Fatalf("%+v %+v", tk, rerr)
		}
	})
	t.Run("UnknownIsOneAnswer", func(t *testing.T) {
		_, _, want := fx.get(t, taskAna, "no-such-task")
		gone := fx.f.Opts.Keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/purged", Kind: "eval", Expiry: taskNow.Add(time.Hour)})
		for name, p := range map[string]authz.Principal{"other owner": bo, "other tenant": {Tenant: "globex", Subject: "ana", Scopes: taskAna.Scopes}} {
			fx.nextN = 0
			_, _, want = fx.get(t, taskAna, "no-such-task")
			fx.nextN = 0
			_, _, got := fx.get(t, p, "running")
			if got.Code != want.Code || got.Body.String() != want.Body.String() {
				t.Errorf("%s: %s, want %s", name, got.Body, want.Body)
			}
		}
		fx.nextN = 0
		_, _, got := fx.get(t, taskAna, gone)
		if got.Body.String() != want.Body.String() {
			t.Errorf("purged job: %s, want %s", got.Body, want.Body)
		}
	})
	t.Run("UpdateIgnoresKeysNotOutstanding", func(t *testing.T) {
		for _, resps := range []map[string]any{
			{"unknown-key": map[string]any{"ignored": true}},
			{"approval.approve-0123456789ab.0000000000000000": map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}},
		} {
			rec := fx.post(t, taskAna, methodTasksUpdate, fx.id["awaiting"], map[string]any{"taskId": fx.id["awaiting"], "inputResponses": resps}, nil)
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"result":{"resultType":"complete"}`) {
				t.Fatalf("%v: %d %s", resps, rec.Code, rec.Body)
			}
		}
		key := jobcore.TaskInputKey(&workflows.NeedsInput{InputID: "approve-0123456789ab", ScopeDigest: "sha256:" + strings.Repeat("c", 64)})
		long := map[string]any{"action": "accept", "content": map[string]any{"decision": "approve", "comment": strings.Repeat("x", jobcore.CommentMax+1)}}
		for _, bad := range []any{"approve", map[string]any{"action": "accept"}, map[string]any{"action": "maybe"}, nil, long} {
			rec := fx.post(t, taskAna, methodTasksUpdate, fx.id["awaiting"], map[string]any{"taskId": fx.id["awaiting"], "inputResponses": map[string]any{key: bad}}, nil)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"code":-32602`) {
				t.Fatalf("%v: %d %s", bad, rec.Code, rec.Body)
			}
		}
		for _, bad := range []any{nil, "x", []any{}} {
			rec := fx.post(t, taskAna, methodTasksUpdate, fx.id["awaiting"], map[string]any{"taskId": fx.id["awaiting"], "inputResponses": bad}, nil)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"code":-32602`) {
				t.Fatalf("inputResponses %v: %d %s", bad, rec.Code, rec.Body)
			}
		}
	})
	t.Run("UpdateAndCancelNeedTheirScopes", func(t *testing.T) {
		rec := fx.post(t, anaRO, methodTasksCancel, fx.id["running"], map[string]any{"taskId": fx.id["running"]}, nil)
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Header().Get("WWW-Authenticate"), `scope="jobs:write"`) ||
			!strings.Contains(rec.Header().Get("WWW-Authenticate"), "tasks/cancel needs one of: jobs:write jobs:admin") {
			t.Fatalf("%d %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
		if len(fx.tc.Cancels) != 0 {
			t.Fatal("a refused cancel reached Temporal")
		}
	})
	t.Run("Cancel", func(t *testing.T) {
		rec := fx.post(t, taskAna, methodTasksCancel, fx.id["running"], map[string]any{"taskId": fx.id["running"]}, nil)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"result":{"resultType":"complete"}`) ||
			len(fx.tc.Cancels) != 1 || fx.tc.Cancels[0] != "acme/eval/running" {
			t.Fatalf("%d %s %v", rec.Code, rec.Body, fx.tc.Cancels)
		}
	})
	t.Run("MismatchRunsNothing", func(t *testing.T) {
		before := len(fx.tc.Cancels)
		rec := fx.post(t, taskAna, methodTasksCancel, fx.id["awaiting"], map[string]any{"taskId": fx.id["running"]}, nil)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "-32020") || len(fx.tc.Cancels) != before {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	})
	t.Run("OlderProtocolIsNotOurs", func(t *testing.T) {
		rec := fx.post(t, taskAna, methodTasksGet, fx.id["running"], map[string]any{"taskId": fx.id["running"], "_meta": map[string]any{}},
			map[string]string{"MCP-Protocol-Version": "2025-11-25"})
		if rec.Code == http.StatusOK && strings.Contains(rec.Body.String(), `"taskId"`) {
			t.Fatalf("a 2025-11-25 tasks/get was answered as a 2026 task: %s", rec.Body)
		}
		// tasks/* of another protocol version is answered as the SDK answers a method it does
		// not know (here one nobody registered), whatever the version.
		for _, version := range []string{"2025-11-25", "2025-06-18", "2027-01-01"} {
			for _, m := range []string{methodTasksGet, methodTasksUpdate, methodTasksCancel} {
				hdr := map[string]string{"MCP-Protocol-Version": version}
				params := func() map[string]any {
					return map[string]any{"taskId": fx.id["running"], "_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": version,
						"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}}
				}
				fx.nextN = 0
				got := fx.post(t, taskAna, m, fx.id["running"], params(), hdr)
				fx.nextN = 0
				want := fx.post(t, taskAna, "tasks/nope", fx.id["running"], params(), hdr)
				if got.Code != want.Code || got.Body.String() != strings.ReplaceAll(want.Body.String(), "tasks/nope", m) {
					t.Errorf("%s %s: %d %s, want %d %s", version, m, got.Code, got.Body, want.Code, want.Body)
				}
			}
		}
		if len(fx.tc.Cancels) != 1 {
			t.Fatalf("a tasks/cancel of another version ran: %v", fx.tc.Cancels)
		}
	})
}

// postRaw sends body as it is, with the headers of a tools/call of the given protocol version.
func (fx *taskFixture) postRaw(t *testing.T, p authz.Principal, body, version string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://localhost/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+fx.token(t, p))
	req.Header.Set("MCP-Protocol-Version", version)
	if version == "2026-07-28" {
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "start_eval")
	}
	rec := httptest.NewRecorder()
	fx.h.ServeHTTP(rec, req)
	return rec
}

// TestTaskNotServedUnchecked: a tasks/* request that reaches the SDK without the front door's
// checks (scope, Mcp-Name) is not answered, and nothing runs: here the SDK's handler behind the
// bearer middleware alone, and behind one that hands on the body's parse but checks nothing,
// with a token that lacks the scope tasks/cancel needs and with one that has it.
func TestTaskNotServedUnchecked(t *testing.T) {
	fx := newTaskFixture(t)
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return fx.f.server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	bearer := auth.RequireBearerToken(fx.f.verifyToken, nil)
	parseOnly := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := bufferBody(w, r)
		if !ok {
			return
		}
		sdk.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), mcpbody.ContextKey{}, mcpbody.Parse(body))))
	})
	anaRO := authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}}
	for i, p := range []authz.Principal{anaRO, taskAna, anaRO, taskAna} {
		saved := fx.h
		fx.h = bearer(sdk)
		if i >= 2 {
			fx.h = bearer(parseOnly)
		}
		rec := fx.post(t, p, methodTasksCancel, fx.id["running"], map[string]any{"taskId": fx.id["running"]}, nil)
		fx.h = saved
		var msg struct{ Error *rpcError }
		if json.Unmarshal(rec.Body.Bytes(), &msg) != nil || msg.Error == nil || msg.Error.Code != jsonrpc.CodeMethodNotFound {
			t.Errorf("%v: %d %s", p.Scopes, rec.Code, rec.Body)
		}
	}
	if len(fx.tc.Cancels) != 0 {
		t.Fatalf("an unchecked tasks/cancel ran: %v", fx.tc.Cancels)
	}
	// Through the front door the same cancel runs.
	if rec := fx.post(t, taskAna, methodTasksCancel, fx.id["running"], map[string]any{"taskId": fx.id["running"]}, nil); rec.Code != http.StatusOK || len(fx.tc.Cancels) != 1 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// TestTaskGetSucceededIsGetResult: a succeeded task's result is get_eval's result as a
// 2026-07-28 tools/call answers it, byte for byte after decoding — the SDK's resultType and its
// server identity in _meta included (the handler's own result has not been through the SDK).
func TestTaskGetSucceededIsGetResult(t *testing.T) {
	fx := newTaskFixture(t)
	id := "acme/eval/succeeded"
	j := fx.tc.Put(memstore.ExecInfo(t, id, "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, workflows.StatusSucceeded))
	fx.tc.Results[j.RunID] = workflows.EvalResult{EvalSummary: workflows.EvalSummary{Episodes: 3, Scored: 3, Passed: 2}}
	taskID := fx.f.Opts.Keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: id, Kind: "eval", Expiry: taskNow.Add(time.Hour)})

	tk, rerr, _ := fx.get(t, taskAna, taskID)
	if rerr != nil || tk.Status != taskCompleted || tk.Result == nil {
		t.Fatalf("tasks/get: %+v %+v", tk, rerr)
	}
	rec := fx.post(t, taskAna, "tools/call", "get_eval", map[string]any{"name": "get_eval", "arguments": map[string]any{"handle": taskID}}, nil)
	var msg struct{ Result json.RawMessage }
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &msg) != nil || msg.Result == nil {
		t.Fatalf("get_eval: %d %s", rec.Code, rec.Body)
	}
	var got, want any
	if json.Unmarshal(tk.Result, &got) != nil || json.Unmarshal(msg.Result, &want) != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("tasks/get result\n %s\nwant get_eval's\n %s", tk.Result, msg.Result)
	}
}
