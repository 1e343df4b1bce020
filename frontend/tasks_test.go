package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/mcpbody"
	"github.com/jobgate/jobgate/workflows"
)

var updateTaskSeeds = flag.Bool("update-task-seeds", false, "rewrite testdata/fuzz/FuzzTaskID")

// ---------------------------------------------------------------- pure parts

func taskMeta(t testing.TB, js string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTaskDeclaresTasks(t *testing.T) {
	for js, want := range map[string]bool{
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`:                            true,
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{"future":1}},"elicitation":{}}}`: true,
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":null}}}`:                          false,
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":true}}}`:                          false,
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/Tasks":{}}}}`:                            false,
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":["io.modelcontextprotocol/tasks"]}}`:                               false,
		`{"io.modelcontextprotocol/clientCapabilities":{"tasks":{}}}`:                                                                   false,
		`{"io.modelcontextprotocol/clientCapabilities":{}}`:                                                                             false,
		`{"extensions":{"io.modelcontextprotocol/tasks":{}}}`:                                                                           false,
		`{}`: false,
	} {
		if got := declaresTasks(taskMeta(t, js)); got != want {
			t.Errorf("%s: declaresTasks = %v, want %v", js, got, want)
		}
	}
	if declaresTasks(nil) {
		t.Error("nil meta declares tasks")
	}
}

func TestTaskParseRPCRequest(t *testing.T) {
	for body, ok := range map[string]bool{
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x"}}`:   true,
		`{"jsonrpc":"2.0","id":"a","method":"tasks/get","params":{"taskId":"x"}}`: true,
		`{"jsonrpc":"2.0","id":-3,"method":"tasks/get"}`:                          true,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":[1]}`:              true, // params unusable, request still ours
		`{"jsonrpc":"2.0","method":"tasks/get","params":{"taskId":"x"}}`:          false,
		`{"jsonrpc":"2.0","id":null,"method":"tasks/get"}`:                        false,
		`{"jsonrpc":"2.0","id":{},"method":"tasks/get"}`:                          false,
		`{"jsonrpc":"1.0","id":1,"method":"tasks/get"}`:                           false,
		`{"jsonrpc":"2.0","id":1,"Method":"tasks/get"}`:                           false,
		`[{"jsonrpc":"2.0","id":1,"method":"tasks/get"}]`:                         false,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get"`:                            false,
		``: false,
	} {
		req, got := rpcRequestOf(mcpbody.Parse([]byte(body)))
		if got != ok {
			t.Errorf("%s: ok = %v, want %v", body, got, ok)
		}
		if got && req.method != "tasks/get" {
			t.Errorf("%s: method %q", body, req.method)
		}
	}
	req, _ := rpcRequestOf(mcpbody.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x","TaskId":"y"}}`)))
	if id, ok := req.taskID(); !ok || id != "x" {
		t.Errorf("taskId keys must match exactly: %q %v", id, ok)
	}
	req, _ = rpcRequestOf(mcpbody.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":7}}`)))
	if _, ok := req.taskID(); ok {
		t.Error("a numeric taskId was read as a string")
	}
}

// TestTaskCheckHeaders: the 2026-07-28 header rules hold for tasks/* through the whole handler —
// MCP-Protocol-Version equals _meta's version and Mcp-Method the method (the SDK's transport
// checks these), Mcp-Name equals params.taskId (checkTaskName, in the front door) — and a
// request that breaks one is 400 before anything runs.
func TestTaskCheckHeaders(t *testing.T) {
	fx := newTaskFixture(t)
	tid := fx.id["running"]
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`
	body := `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"` + tid + `",` + meta + `}}`
	post := func(body string, h http.Header) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "http://localhost/mcp", strings.NewReader(body))
		req.Header = h
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+fx.token(t, taskAna))
		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, req)
		return rec
	}
	good := http.Header{}
	good.Set("MCP-Protocol-Version", "2026-07-28")
	good.Set("Mcp-Method", "tasks/cancel")
	good.Set("Mcp-Name", tid)
	for name, c := range map[string]struct {
		key, val, body string
		code           int // 0: not a JSON-RPC answer (the SDK's plain refusal of an unknown method)
	}{
		"other name":         {"Mcp-Name", "other", "", -32020},
		"name case":          {"Mcp-Name", strings.ToUpper(tid), "", -32020},
		"no name":            {"Mcp-Name", "", "", -32020},
		"other method":       {"Mcp-Method", "tasks/get", "", -32020},
		"no method":          {"Mcp-Method", "", "", -32020},
		"other version":      {"MCP-Protocol-Version", "2025-11-25", "", 0},
		"no version":         {"MCP-Protocol-Version", "", "", 0},
		"no taskId":          {"", "", `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{` + meta + `}}`, -32020},
		"numeric taskId":     {"", "", `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":1,` + meta + `}}`, -32020},
		"no _meta version":   {"", "", `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"` + tid + `"}}`, -32602},
		"_meta not object":   {"", "", `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"` + tid + `","_meta":"2026-07-28"}}`, -32602},
		"body names another": {"", "", `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"` + fx.id["awaiting"] + `",` + meta + `}}`, -32020},
	} {
		h := good.Clone()
		if c.key != "" {
			if c.val == "" {
				h.Del(c.key)
			} else {
				h.Set(c.key, c.val)
			}
		}
		b := body
		if c.body != "" {
			b = c.body
		}
		rec := post(b, h)
		var msg struct{ Error *rpcError }
		isRPC := json.Unmarshal(rec.Body.Bytes(), &msg) == nil && msg.Error != nil
		if rec.Code != http.StatusBadRequest || (c.code == 0) == isRPC || (isRPC && msg.Error.Code != c.code) {
			t.Errorf("%s: %d %s, want 400 with code %d", name, rec.Code, rec.Body, c.code)
		}
	}
	if len(fx.tc.Cancels) != 0 {
		t.Fatalf("a refused tasks/cancel ran: %v", fx.tc.Cancels)
	}
	if rec := post(body, good); rec.Code != http.StatusOK || len(fx.tc.Cancels) != 1 {
		t.Fatalf("matching headers refused: %d %s", rec.Code, rec.Body)
	}
}

func TestTaskStatusMapping(t *testing.T) {
	owner := &jobcore.NeedsInputView{Prompt: "approve?", Approver: authz.ApproverOwner}
	approver := &jobcore.NeedsInputView{Prompt: "approve?", Approver: authz.ApproverApprover}
	for _, c := range []struct {
		v         jobcore.JobView
		mayAnswer bool
		want, msg string
	}{
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusQueued}}, false, taskWorking, "queued"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusRunning, Progress: workflows.Progress{Done: 3, Failed: 1, Total: 9, Unit: "episodes", Message: "scoring"}}}, false, taskWorking, "scoring (3/9 episodes done, 1 failed)"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusCancelling}}, true, taskWorking, "cancellation requested"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusAwaitingInput, NeedsInput: owner}}, true, taskInputRequired, "approve?"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusAwaitingInput, NeedsInput: owner}}, false, taskWorking, "owner"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusAwaitingInput, NeedsInput: approver}}, false, taskWorking, "approver"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusAwaitingInput}}, true, taskWorking, "owner"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusSucceeded}}, false, taskCompleted, "succeeded"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusFailed, Error: &workflows.JobError{Code: "input_expired", Message: "nobody answered"}}}, false, taskCompleted, "input_expired"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusCancelled, Error: &workflows.JobError{Code: "cancelled", Message: "cancelled by ana"}}}, false, taskCancelled, "cancelled by ana"},
		{jobcore.JobView{JobSummary: jobcore.JobSummary{Status: "bogus"}}, false, taskWorking, "bogus"},
	} {
		got, msg := taskStatus(&c.v, c.mayAnswer)
		if got != c.want || !strings.Contains(msg, c.msg) {
			t.Errorf("%s (may answer %v): %s %q, want %s containing %q", c.v.Status, c.mayAnswer, got, msg, c.want, c.msg)
		}
		if got == taskFailed {
			t.Errorf("%s: the task status failed is reserved for JSON-RPC errors", c.v.Status)
		}
	}
	// Only a fault while executing (error code internal, the protocol_error_job fixture's) is failed.
	if got, msg := taskStatus(&jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusFailed,
		Error: &workflows.JobError{Code: workflows.ErrCodeInternal, Message: "boom"}}}, false); got != taskFailed || !strings.Contains(msg, "boom") {
		t.Errorf("internal failure: %s %q, want failed", got, msg)
	}
	res := failedJobResult(&jobcore.JobView{JobSummary: jobcore.JobSummary{Status: workflows.StatusFailed, Error: &workflows.JobError{Code: "all_episodes_failed", Message: "all 2 episodes failed"}}})
	if string(res) != `{"content":[{"type":"text","text":"{\"code\":\"all_episodes_failed\",\"message\":\"all 2 episodes failed\",\"retryable\":false}"}],"isError":true,"resultType":"complete"}` {
		t.Errorf("failed job result: %s", res)
	}
}

func TestTaskInputKey(t *testing.T) {
	a := &workflows.NeedsInput{InputID: "approve-0123456789ab", ScopeDigest: "sha256:" + strings.Repeat("a", 64)}
	b := &workflows.NeedsInput{InputID: a.InputID, ScopeDigest: "sha256:" + strings.Repeat("b", 64)}
	c := &workflows.NeedsInput{InputID: "approve-ba9876543210", ScopeDigest: a.ScopeDigest}
	ka, kb, kc := jobcore.TaskInputKey(a), jobcore.TaskInputKey(b), jobcore.TaskInputKey(c)
	if ka != jobcore.TaskInputKey(&workflows.NeedsInput{InputID: a.InputID, ScopeDigest: a.ScopeDigest}) {
		t.Error("key not stable across polls")
	}
	if ka == kb || ka == kc || kb == kc {
		t.Errorf("keys collide: %s %s %s", ka, kb, kc)
	}
	if !strings.HasPrefix(ka, jobcore.InputKeyApproval+"."+a.InputID+".") {
		t.Errorf("key %s", ka)
	}
}

// TestTaskAddCapability: the middleware adds the extension to server/discover's capabilities,
// keeps the others, leaves the server's own capabilities alone, and passes errors and other
// methods through.
func TestTaskAddCapability(t *testing.T) {
	f := newTaskFrontend(t, memstore.New())
	for _, c := range []struct {
		caps *mcp.ServerCapabilities
		want string
	}{
		{&mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}, `{"extensions":{"io.modelcontextprotocol/tasks":{}},"tools":{}}`},
		{&mcp.ServerCapabilities{Extensions: map[string]any{"io.example/x": map[string]any{"a": 1}}}, `{"extensions":{"io.example/x":{"a":1},"io.modelcontextprotocol/tasks":{}}}`},
		{nil, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`},
	} {
		var before []byte
		if c.caps != nil {
			before, _ = json.Marshal(c.caps)
		}
		in := &mcp.DiscoverResult{SupportedVersions: []string{"2026-07-28"}, Capabilities: c.caps}
		res, err := f.tasksMiddleware(func(context.Context, string, mcp.Request) (mcp.Result, error) { return in, nil })(context.Background(), methodDiscover, nil)
		d, ok := res.(*mcp.DiscoverResult)
		if err != nil || !ok {
			t.Fatalf("%v: %T %v", c.caps, res, err)
		}
		got, _ := json.Marshal(d.Capabilities)
		if string(got) != c.want || len(d.SupportedVersions) != 1 {
			t.Errorf("got %s, want %s", got, c.want)
		}
		if after, _ := json.Marshal(c.caps); c.caps != nil && string(after) != string(before) {
			t.Errorf("the server's capabilities changed: %s, was %s", after, before)
		}
	}
	boom := errors.New("boom")
	for _, method := range []string{methodDiscover, "tools/list"} {
		if res, err := f.tasksMiddleware(func(context.Context, string, mcp.Request) (mcp.Result, error) { return nil, boom })(context.Background(), method, nil); err != boom || res != nil {
			t.Errorf("%s: %v %v", method, res, err)
		}
	}
}

// ---------------------------------------------------------------- taskIds

var (
	taskNow = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	taskAna = authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
)

func taskKeys(t testing.TB) *handle.Keyring {
	t.Helper()
	k, err := handle.NewKeyring("k1", map[string][]byte{
		"k0": bytes.Repeat([]byte{0x3d}, handle.MinKeyLen),
		"k1": bytes.Repeat([]byte{0x4e}, handle.MinKeyLen),
	})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// taskSeeds are FuzzTaskID's named seeds (fixed keys and clock); the name's prefix says what
// openTaskID answers taskAna: ok, expired or notfound.
func taskSeeds(t testing.TB) map[string]string {
	k := taskKeys(t)
	old, _ := handle.NewKeyring("k0", map[string][]byte{"k0": bytes.Repeat([]byte{0x3d}, handle.MinKeyLen)})
	h := func(tenant, id, kind string, exp time.Time) handle.Handle {
		return handle.Handle{Tenant: tenant, WorkflowID: id, Kind: kind, Expiry: exp}
	}
	later := taskNow.Add(time.Hour)
	valid := k.SealHandle(h("acme", "acme/eval/k1", "eval", later))
	return map[string]string{
		"ok_eval":                     valid,
		"ok_export_old_kid":           old.SealHandle(h("acme", "acme/export/k2", "export", later)),
		"expired_eval":                k.SealHandle(h("acme", "acme/eval/k1", "eval", taskNow)),
		"notfound_other_tenant":       k.SealHandle(h("globex", "globex/eval/k1", "eval", later)),
		"notfound_expired_other":      k.SealHandle(h("globex", "globex/eval/k1", "eval", taskNow.Add(-time.Hour))),
		"notfound_foreign_workflow":   k.SealHandle(h("acme", "globex/eval/k1", "eval", later)),
		"notfound_unknown_kind":       k.SealHandle(h("acme", "acme/report/k1", "report", later)),
		"notfound_other_service_keys": otherRing(t).SealHandle(h("acme", "acme/eval/k1", "eval", later)),
		"notfound_tampered":           flipByte(valid, len("jgh1.k1.")+10),
		"notfound_truncated":          valid[:len(valid)-3],
		"notfound_cursor": k.SealCursor(handle.Cursor{Tenant: "acme", Subject: "ana", Tool: "list_jobs", Filter: "f",
			PageToken: []byte("p"), Expiry: later}),
		"notfound_garbage": "jgh1.k1.!!.x",
		"notfound_empty":   "",
	}
}

func newTaskFrontend(t testing.TB, store jobstore.Store) *Frontend {
	t.Helper()
	return newStoreFrontend(t, store, jobcore.Options{Keys: taskKeys(t), Now: func() time.Time { return taskNow }})
}

func TestTaskOpenTaskID(t *testing.T) {
	f := newTaskFrontend(t, memstore.New())
	for name, s := range taskSeeds(t) {
		h, rerr := f.openTaskID(taskAna, s)
		switch {
		case strings.HasPrefix(name, "ok_"):
			if rerr != nil || h.Tenant != "acme" || !strings.HasPrefix(h.WorkflowID, "acme/") {
				t.Errorf("%s: %+v %+v", name, h, rerr)
			}
		case strings.HasPrefix(name, "expired_"):
			if rerr == nil || rerr.Message != "Failed to retrieve task: Task has expired" || rerr.Data.(*jobcore.ToolError).Code != jobcore.CodeHandleExpired {
				t.Errorf("%s: %+v", name, rerr)
			}
		default:
			if rerr != errTaskNotFound || h != (handle.Handle{}) {
				t.Errorf("%s: want the unknown task, got %+v %+v", name, h, rerr)
			}
		}
	}
}

// TestTaskIDSeedCorpus keeps testdata/fuzz/FuzzTaskID in step with taskSeeds.
// Rewrite with: go test ./frontend -run TestTaskIDSeedCorpus -update-task-seeds
func TestTaskIDSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzTaskID")
	testenv.SeedCorpus(t, dir, taskSeeds(t), *updateTaskSeeds, false)
}

// FuzzTaskID: whatever the string, openTaskID opens only a handle this service sealed for the
// caller's tenant and a kind it serves, and otherwise answers exactly the unknown task (the
// same value for every cause) or, for the caller's own tenant, the expired task; never panics.
func FuzzTaskID(f *testing.F) {
	fe := newTaskFrontend(f, memstore.New())
	f.Fuzz(func(t *testing.T, s string) {
		h, rerr := fe.openTaskID(taskAna, s)
		oh, oerr := fe.Opts.Keys.OpenHandle(s, taskNow)
		mine := (oerr == nil || isExpired(oerr)) && oh.Tenant == "acme" && strings.HasPrefix(oh.WorkflowID, "acme/") &&
			(oh.Kind == "eval" || oh.Kind == "export")
		switch {
		case rerr == nil:
			if !mine || oerr != nil || h != oh {
				t.Fatalf("opened %q as %+v (handle %+v, %v)", s, h, oh, oerr)
			}
		case rerr == errTaskNotFound:
			if mine || h != (handle.Handle{}) {
				t.Fatalf("%q: unknown task for a handle of ours (%+v, %v)", s, oh, oerr)
			}
		case rerr.Message == "Failed to retrieve task: Task has expired":
			if !mine || !isExpired(oerr) {
				t.Fatalf("%q: expired for %+v, %v", s, oh, oerr)
			}
		default:
			t.Fatalf("%q: %+v", s, rerr)
		}
	})
}

func isExpired(err error) bool {
	return err != nil && strings.Contains(err.Error(), handle.ErrExpired.Error())
}

// FuzzTaskRequest: parsing a request, its headers and capabilities never panics, and a request
// passes the header check only when Mcp-Name is its taskId.
func FuzzTaskRequest(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}`), "x")
	f.Add([]byte(`{"jsonrpc":"2.0","id":"7","method":"tasks/update","params":{"taskId":"x\u0000","inputResponses":{"a":{"action":"accept"}},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`), "x")
	f.Add([]byte(`{"jsonrpc":"2.0","id":1e400,"method":"tasks/cancel","params":{"taskId":{"a":1}}}`), "")
	f.Add([]byte(`[{"jsonrpc":"2.0"}]`), "y")
	f.Fuzz(func(t *testing.T, body []byte, name string) {
		req, ok := rpcRequestOf(mcpbody.Parse(body))
		if !ok {
			return
		}
		_ = declaresTasks(req.meta())
		_ = req.name
		h := http.Header{}
		h.Set("MCP-Protocol-Version", "2026-07-28")
		h.Set("Mcp-Method", req.method)
		h.Set("Mcp-Name", name)
		if checkTaskName(h, req) == nil {
			if id, ok := req.taskID(); !ok || id != h.Get("Mcp-Name") {
				t.Fatalf("headers accepted for taskId %q, Mcp-Name %q", id, h.Get("Mcp-Name"))
			}
		}
	})
}

// ---------------------------------------------------------------- the layer, against a fake
