package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/jobcore"
)

var tkID atomic.Int64

// tkReply is one HTTP answer of /mcp.
type tkReply struct {
	status int
	header http.Header
	body   []byte
	msg    struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
}

// tkTask is a task as CreateTaskResult and GetTaskResult carry it.
type tkTask struct {
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          *int64          `json:"ttlMs"`
	PollIntervalMs int             `json:"pollIntervalMs"`
	InputRequests  json.RawMessage `json:"inputRequests"`
	Result         json.RawMessage `json:"result"`
}

// tkCaps are per-request client capabilities declaring the extension.
func tkCaps() map[string]any {
	return map[string]any{"extensions": map[string]any{frontend.TasksExtension: map[string]any{}}}
}

// tkPost sends one 2026-07-28 request as p to url. name is the Mcp-Name header (the tool or the
// taskId); caps the request's client capabilities; hdr overrides headers ("" deletes one).
func (b *testBundle) tkPost(t testing.TB, url string, p principal, method, name string, params map[string]any, caps map[string]any, hdr map[string]string) *tkReply {
	t.Helper()
	return b.tkPostToken(t, url, b.token(p), method, name, params, caps, hdr)
}

func (b *testBundle) tkPostToken(t testing.TB, url, tok, method, name string, params map[string]any, caps map[string]any, hdr map[string]string) *tkReply {
	t.Helper()
	ps := map[string]any{}
	for k, v := range params {
		ps[k] = v
	}
	ps["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "tasks-test", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": tkID.Add(1), "method": method, "params": ps})
	must(t, err)
	return tkDo(t, url, tok, body, method, name, hdr)
}

func tkDo(t testing.TB, url, tok string, body []byte, method, name string, hdr map[string]string) *tkReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	r := &tkReply{status: resp.StatusCode, header: resp.Header}
	r.body, err = io.ReadAll(resp.Body)
	must(t, err)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(r.body, &r.msg)
	}
	return r
}

// task decodes a successful answer as a task.
func (r *tkReply) task(t testing.TB) *tkTask {
	t.Helper()
	if r.status != http.StatusOK || r.msg.Error != nil || len(r.msg.Result) == 0 {
		t.Fatalf("want a result, got HTTP %d %s", r.status, r.body)
	}
	var tk tkTask
	must(t, json.Unmarshal(r.msg.Result, &tk))
	return &tk
}

// rpcErr checks a JSON-RPC error answer and returns its message.
func (r *tkReply) rpcErr(t testing.TB, status, code int) string {
	t.Helper()
	if r.status != status || r.msg.Error == nil || r.msg.Error.Code != code {
		t.Fatalf("want HTTP %d with JSON-RPC error %d, got HTTP %d %s", status, code, r.status, r.body)
	}
	return r.msg.Error.Message
}

// errData decodes a JSON-RPC error's data as a tool error.
func (r *tkReply) errData(t testing.TB) *jobcore.ToolError {
	t.Helper()
	var te jobcore.ToolError
	if r.msg.Error == nil || json.Unmarshal(r.msg.Error.Data, &te) != nil {
		t.Fatalf("no tool error in data: %s", r.body)
	}
	return &te
}

// tkStart calls a start tool declaring the extension and returns the created task.
func (b *testBundle) tkStart(t testing.TB, i int, p principal, tool string, args map[string]any) *tkTask {
	t.Helper()
	tk := b.tkPost(t, b.url(i), p, "tools/call", tool, map[string]any{"name": tool, "arguments": args}, tkCaps(), nil).task(t)
	if tk.ResultType != "task" || tk.TaskID == "" || tk.TTLMs == nil || *tk.TTLMs <= 0 || tk.CreatedAt == "" || tk.LastUpdatedAt == "" {
		t.Fatalf("want a CreateTaskResult, got %+v", tk)
	}
	return tk
}

func (b *testBundle) tkGet(t testing.TB, i int, p principal, taskID string) *tkReply {
	t.Helper()
	return b.tkPost(t, b.url(i), p, "tasks/get", taskID, map[string]any{"taskId": taskID}, tkCaps(), nil)
}

// tkWait polls tasks/get (alternating replicas) until the task reaches status.
func (b *testBundle) tkWait(t testing.TB, p principal, taskID, status string, within time.Duration) *tkTask {
	t.Helper()
	var tk *tkTask
	n := 0
	eventually(t, within, "task status "+status, func() bool {
		n++
		tk = b.tkGet(t, n%2, p, taskID).task(t)
		if tk.ResultType != "complete" || tk.TaskID != taskID {
			t.Fatalf("tasks/get answer: %+v", tk)
		}
		if tk.Status != status && (tk.Status == "completed" || tk.Status == "cancelled" || tk.Status == "failed") {
			t.Fatalf("task ended %s (%s), want %s", tk.Status, tk.StatusMessage, status)
		}
		return tk.Status == status
	})
	return tk
}

// tkResult decodes a completed task's inline tool result.
func tkResult(t testing.TB, tk *tkTask) (isError bool, view *jobcore.JobView, te *jobcore.ToolError) {
	t.Helper()
	var res struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	must(t, json.Unmarshal(tk.Result, &res))
	if len(res.Content) != 1 || res.Content[0].Type != "text" {
		t.Fatalf("result content: %s", tk.Result)
	}
	if res.IsError {
		if len(res.StructuredContent) != 0 {
			t.Fatalf("error result with structuredContent: %s", tk.Result)
		}
		te = &jobcore.ToolError{}
		must(t, json.Unmarshal([]byte(res.Content[0].Text), te))
		return true, nil, te
	}
	if !jsonEqual(res.Content[0].Text, string(res.StructuredContent)) {
		t.Fatalf("text differs from structuredContent: %s", tk.Result)
	}
	view = &jobcore.JobView{}
	must(t, json.Unmarshal(res.StructuredContent, view))
	return false, view, nil
}

// tkInput is the one approval elicitation of an input_required task.
func tkInput(t testing.TB, tk *tkTask) (key, message string) {
	t.Helper()
	var reqs map[string]struct {
		Method string `json:"method"`
		Params struct {
			Mode            string         `json:"mode"`
			Message         string         `json:"message"`
			RequestedSchema map[string]any `json:"requestedSchema"`
		} `json:"params"`
	}
	must(t, json.Unmarshal(tk.InputRequests, &reqs))
	if len(reqs) != 1 {
		t.Fatalf("want one input request, got %s", tk.InputRequests)
	}
	for k, r := range reqs {
		if r.Method != "elicitation/create" || r.Params.Mode != "form" || r.Params.RequestedSchema["type"] != "object" {
			t.Fatalf("input request %s: %+v", k, r)
		}
		return k, r.Params.Message
	}
	return "", ""
}

func tkAnswer(key, action, decision string) map[string]any {
	r := map[string]any{"action": action}
	if decision != "" {
		r["content"] = map[string]any{"decision": decision, "comment": "via tasks/update"}
	}
	return map[string]any{key: r}
}

func (b *testBundle) tkUpdate(t testing.TB, i int, p principal, taskID string, responses map[string]any) *tkReply {
	t.Helper()
	return b.tkPost(t, b.url(i), p, "tasks/update", taskID, map[string]any{"taskId": taskID, "inputResponses": responses}, tkCaps(), nil)
}

func tkAck(t testing.TB, r *tkReply) {
	t.Helper()
	if tk := r.task(t); tk.ResultType != "complete" || tk.TaskID != "" || tk.Status != "" {
		t.Fatalf("want an empty acknowledgement, got %s", r.body)
	}
}

// tkSameAnswer: two answers are byte-identical once their (different) request ids are aligned.
func tkSameAnswer(t testing.TB, a, b *tkReply) {
	t.Helper()
	norm := func(r *tkReply) string {
		return strings.Replace(string(r.body), `"id":`+string(r.msg.ID), `"id":0`, 1)
	}
	if a.status != b.status || norm(a) != norm(b) {
		t.Fatalf("answers differ:\n%d %s\n%d %s", a.status, a.body, b.status, b.body)
	}
}
