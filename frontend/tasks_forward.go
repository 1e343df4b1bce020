// tasks_forward.go holds the forwarding of a synthesized tools/call through the SDK handler and
// the recorder that captures what it writes.

package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rpcResponse is a JSON-RPC response from the SDK handler.
type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
}

// toolReply is a CallToolResult as the SDK handler wrote it.
type toolReply struct {
	raw               json.RawMessage
	IsError           bool            `json:"isError"`
	ResultType        string          `json:"resultType"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	Content           []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// toolError is the tool error of an isError result (a generic one if the text is not ours).
func (r *toolReply) toolError() *ToolError {
	if !r.IsError {
		return nil
	}
	var te ToolError
	if len(r.Content) == 1 && json.Unmarshal([]byte(r.Content[0].Text), &te) == nil && te.Code != "" {
		return &te
	}
	return &ToolError{Code: "internal", Message: "the tool failed"}
}

// view decodes a successful result's job view.
func (r *toolReply) view() (*JobView, bool) {
	var v JobView
	if len(r.StructuredContent) == 0 || json.Unmarshal(r.StructuredContent, &v) != nil || v.JobID == "" {
		return nil, false
	}
	return &v, true
}

// forwardTool runs tools/call name(args) through the SDK handler as part of request r: the
// same context (token, principal), Host and protocol version, with headers and _meta of a
// 2026-07-28 call that declares no client capabilities (so no MRTR elicitation).
func (f *Frontend) forwardTool(r *http.Request, next http.Handler, name string, args any) (*toolReply, error) {
	version := r.Header.Get(headerProtocolVersion)
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": methodToolsCall, "params": map[string]any{
		"name": name, "arguments": args,
		"_meta": map[string]any{mcp.MetaKeyProtocolVersion: version, mcp.MetaKeyClientCapabilities: map[string]any{}},
	}})
	if err != nil {
		return nil, err
	}
	req := r.Clone(r.Context())
	req.Body, req.ContentLength, req.GetBody = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	for k := range req.Header {
		if strings.HasPrefix(k, headerParamPrefix) {
			req.Header.Del(k)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(headerMethod, methodToolsCall)
	req.Header.Set(headerName, name)
	rec := newRecorder()
	next.ServeHTTP(rec, req)
	resp, reply, ok := rec.toolReply()
	switch {
	case !ok && resp != nil && resp.Error != nil:
		return nil, fmt.Errorf("%s: JSON-RPC error %d: %s", name, resp.Error.Code, resp.Error.Message)
	case !ok:
		return nil, fmt.Errorf("%s: HTTP %d: %s", name, rec.code, truncate(rec.body.String(), 200))
	}
	return reply, nil
}

// recorder captures what the SDK handler writes.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

func (r *recorder) Flush() {}

// toolReply reads a 200 JSON-RPC response carrying a tool result.
func (r *recorder) toolReply() (*rpcResponse, *toolReply, bool) {
	if r.code != http.StatusOK {
		return nil, nil, false
	}
	var resp rpcResponse
	if json.Unmarshal(r.body.Bytes(), &resp) != nil {
		return nil, nil, false
	}
	if resp.Error != nil || len(resp.Result) == 0 {
		return &resp, nil, false
	}
	var reply toolReply
	if json.Unmarshal(resp.Result, &reply) != nil {
		return &resp, nil, false
	}
	reply.raw = resp.Result
	return &resp, &reply, true
}

// copyTo writes the recorded response, with body instead of the recorded one when given.
func (r *recorder) copyTo(w http.ResponseWriter, body []byte) {
	if body == nil {
		body = r.body.Bytes()
	}
	for k, vs := range r.header {
		if k == "Content-Length" {
			continue
		}
		w.Header()[k] = append([]string(nil), vs...)
	}
	code := r.code
	if code == 0 {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
