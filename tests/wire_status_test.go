package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// TestWireStatus2026: the HTTP status and JSON-RPC error code of every 2026-07-28 rule
// (SEP-2575 and the Streamable HTTP transport text of that revision): missing required _meta
// → 400 -32602, a header that disagrees with the body → 400 -32020, a missing capability → 400
// -32021, an unsupported version → 400 -32022, an unknown method → 404 -32601, and the Tasks
// extension's protocol errors (unknown or expired taskId, a refused update: -32602) → 400.
// Earlier revisions keep their rules: an unknown method is a plain 400, and a method's error
// answer is 200.
func TestWireStatus2026(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url := b.url(0)
	v := mustView(t, call(t, b.session(ana, 0, ""), "start_eval", startArgs(uniqueKey(t), 1, map[string]any{"episode_ms": 0})))
	getArgs := map[string]any{"name": "get_eval", "arguments": map[string]any{"handle": v.Handle}}
	caps := map[string]any{}

	// A modern request with every header right, then each rule broken in turn.
	t.Run("Good", func(t *testing.T) {
		r := b.tkPost(t, url, ana, "tools/call", "get_eval", getArgs, caps, nil)
		if r.status != http.StatusOK || r.msg.Error != nil || !strings.Contains(string(r.body), v.JobID) {
			t.Fatalf("HTTP %d %s", r.status, r.body)
		}
	})
	raw := func(t *testing.T, meta map[string]any, hdr map[string]string) *tkReply {
		t.Helper()
		params := map[string]any{"name": "get_eval", "arguments": map[string]any{"handle": v.Handle}}
		if meta != nil {
			params["_meta"] = meta
		}
		body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": params})
		must(t, err)
		return tkDo(t, url, b.token(ana), body, "tools/call", "get_eval", hdr)
	}
	for name, c := range map[string]struct {
		meta   map[string]any
		hdr    map[string]string
		status int
		code   int
	}{
		"MissingMeta":            {nil, nil, http.StatusBadRequest, -32602},
		"MissingMetaVersion":     {map[string]any{"io.modelcontextprotocol/clientCapabilities": caps}, nil, http.StatusBadRequest, -32602},
		"MissingMetaCaps":        {map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28"}, nil, http.StatusBadRequest, -32602},
		"VersionHeaderMismatch":  {modernMeta("2026-07-28"), map[string]string{"MCP-Protocol-Version": "2025-11-25"}, http.StatusBadRequest, -32020},
		"NameHeaderMismatch":     {modernMeta("2026-07-28"), map[string]string{"Mcp-Name": "cancel_eval"}, http.StatusBadRequest, -32020},
		"NameHeaderMissing":      {modernMeta("2026-07-28"), map[string]string{"Mcp-Name": ""}, http.StatusBadRequest, -32020},
		"MethodHeaderMismatch":   {modernMeta("2026-07-28"), map[string]string{"Mcp-Method": "tools/list"}, http.StatusBadRequest, -32020},
		"MethodHeaderMissing":    {modernMeta("2026-07-28"), map[string]string{"Mcp-Method": ""}, http.StatusBadRequest, -32020},
		"UnsupportedVersion":     {modernMeta("2099-01-01"), map[string]string{"MCP-Protocol-Version": "2099-01-01"}, http.StatusBadRequest, -32022},
		"UnsupportedVersionMeta": {modernMeta("2099-01-01"), map[string]string{"MCP-Protocol-Version": "2099-01-01", "Mcp-Name": "get_eval"}, http.StatusBadRequest, -32022},
	} {
		t.Run(name, func(t *testing.T) {
			r := raw(t, c.meta, c.hdr)
			r.rpcErr(t, c.status, c.code)
			if strings.Contains(string(r.body), v.JobID) {
				t.Fatalf("refused request answered with the job: %s", r.body)
			}
		})
	}
	t.Run("UnsupportedVersionListsSupported", func(t *testing.T) {
		r := raw(t, modernMeta("2099-01-01"), map[string]string{"MCP-Protocol-Version": "2099-01-01"})
		r.rpcErr(t, http.StatusBadRequest, -32022)
		var d struct {
			Supported []string `json:"supported"`
			Requested string   `json:"requested"`
		}
		if json.Unmarshal(r.msg.Error.Data, &d) != nil || d.Requested != "2099-01-01" || !strings.Contains(strings.Join(d.Supported, ","), "2026-07-28") {
			t.Fatalf("data: %s", r.msg.Error.Data)
		}
	})
	t.Run("UnknownMethod", func(t *testing.T) {
		r := b.tkPost(t, url, ana, "jobs/explode", "", map[string]any{}, caps, nil)
		r.rpcErr(t, http.StatusNotFound, -32601)
	})
	t.Run("MissingCapability", func(t *testing.T) {
		// tasks/get from a request whose own capabilities lack the Tasks extension.
		tk := b.tkStart(t, 0, ana, "start_eval", startArgs(uniqueKey(t), 1, map[string]any{"episode_ms": 0}))
		r := b.tkPost(t, url, ana, "tasks/get", tk.TaskID, map[string]any{"taskId": tk.TaskID}, caps, nil)
		r.rpcErr(t, http.StatusBadRequest, -32021)
		// subscriptions/listen for task notifications, likewise.
		l := b.tkPost(t, url, ana, "subscriptions/listen", "", map[string]any{"notifications": map[string]any{"taskIds": []string{tk.TaskID}}}, caps, nil)
		if l.status != http.StatusBadRequest || (l.msg.Error != nil && l.msg.Error.Code != -32021) {
			t.Fatalf("listen without the extension: HTTP %d %s", l.status, l.body)
		}
	})
	t.Run("TaskErrors", func(t *testing.T) {
		unknown := b.keys.SealHandle(handleFor("acme/eval/no-such-job"))
		r := b.tkPost(t, url, ana, "tasks/get", unknown, map[string]any{"taskId": unknown}, tkCaps(), nil)
		if msg := r.rpcErr(t, http.StatusBadRequest, -32602); msg != "Failed to retrieve task: Task not found" {
			t.Fatalf("message %q", msg)
		}
		for _, m := range []string{"tasks/update", "tasks/cancel"} {
			r := b.tkPost(t, url, ana, m, "nope", map[string]any{"taskId": "nope", "inputResponses": map[string]any{}}, tkCaps(), nil)
			r.rpcErr(t, http.StatusBadRequest, -32602)
		}
	})
	t.Run("ToolErrorStays200", func(t *testing.T) {
		r := b.tkPost(t, url, ana, "tools/call", "get_eval", map[string]any{"name": "get_eval", "arguments": map[string]any{"handle": "garbage"}}, caps, nil)
		if r.status != http.StatusOK || r.msg.Error != nil || !strings.Contains(string(r.msg.Result), `"isError":true`) ||
			!strings.Contains(string(r.msg.Result), jobcore.CodeInvalidHandle) {
			t.Fatalf("HTTP %d %s", r.status, r.body)
		}
	})

	// Earlier revisions keep their rules.
	legacy := func(t *testing.T, version, body string) *tkReply {
		t.Helper()
		return tkDo(t, url, b.token(ana), []byte(body), "", "", map[string]string{"MCP-Protocol-Version": version, "Mcp-Method": ""})
	}
	for _, version := range []string{"2025-11-25", "2025-06-18"} {
		t.Run("Legacy"+version, func(t *testing.T) {
			r := legacy(t, version, `{"jsonrpc":"2.0","id":1,"method":"jobs/explode","params":{}}`)
			if r.status != http.StatusBadRequest || r.msg.Error != nil {
				t.Fatalf("unknown method: HTTP %d %s, want a plain 400", r.status, r.body)
			}
			r = legacy(t, version, `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"x"}}`)
			if r.status != http.StatusBadRequest || r.msg.Error != nil {
				t.Fatalf("tasks/get: HTTP %d %s, want a plain 400", r.status, r.body)
			}
			r = legacy(t, version, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`)
			if r.status != http.StatusOK || r.msg.Error == nil || r.msg.Error.Code != -32602 {
				t.Fatalf("unknown tool: HTTP %d %s, want 200 with -32602", r.status, r.body)
			}
		})
	}
}

// TestWireInputRequiredShape: an MRTR answer to tools/call is an InputRequiredResult as the
// 2026-07-28 schema defines it — resultType, inputRequests, requestState — with no content
// (never "content": null, which is neither that nor a CallToolResult).
func TestWireInputRequiredShape(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.session(ana, 0, "")
	// Above 100 episodes the demo suite asks its owner first.
	v := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 101, map[string]any{"episode_ms": 0})))
	waitStatus(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	elicit := map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}
	r := b.tkPost(t, b.url(1), ana, "tools/call", "get_eval", map[string]any{"name": "get_eval", "arguments": map[string]any{"handle": v.Handle}}, elicit, nil)
	if r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("HTTP %d %s", r.status, r.body)
	}
	var res map[string]json.RawMessage
	must(t, json.Unmarshal(r.msg.Result, &res))
	if string(res["resultType"]) != `"input_required"` || len(res["inputRequests"]) == 0 || len(res["requestState"]) < 3 {
		t.Fatalf("not an input_required result: %s", r.msg.Result)
	}
	for _, k := range []string{"content", "structuredContent", "isError"} {
		if _, ok := res[k]; ok {
			t.Fatalf("input_required result carries %q: %s", k, r.msg.Result)
		}
	}
	var reqs map[string]struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(res["inputRequests"], &reqs) != nil || reqs[jobcore.InputKeyApproval].Method != "elicitation/create" {
		t.Fatalf("inputRequests: %s", res["inputRequests"])
	}
	// A 2025 client asking the same sees the plain job view.
	o := call(t, cs, "get_eval", map[string]any{"handle": v.Handle})
	if mustView(t, o).Status != workflows.StatusAwaitingInput {
		t.Fatalf("2025 view: %+v", o)
	}
}

// modernMeta is a request's required 2026-07-28 _meta for version.
func modernMeta(version string) map[string]any {
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    version,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "wire-test", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}
}
