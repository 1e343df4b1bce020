// tasks_rpc.go holds the JSON-RPC plumbing of the Tasks extension: request parsing, the tasks/*
// Mcp-Name check, the SDK transport check and response writing.

package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/jobgate/jobgate/frontend/mcpbody"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ---------------------------------------------------------------- JSON-RPC plumbing

// rpcRequest is one JSON-RPC request, keys matched exactly (as the SDK's decoder does).
type rpcRequest struct {
	id     json.RawMessage // a string or a number
	method string
	params map[string]json.RawMessage // nil when absent or not an object
	name   string                     // params.name when a JSON string, else ""
}

// rpcRequestOf is the body's single JSON-RPC request (not a notification, not a batch).
func rpcRequestOf(pb *mcpbody.Body) (*rpcRequest, bool) {
	if pb.Batch || len(pb.Msgs) != 1 {
		return nil, false
	}
	pm := &pb.Msgs[0]
	pm.Decode()
	if !isVersion2(pm.M["jsonrpc"]) || !pm.MethodOK {
		return nil, false
	}
	id := bytes.TrimSpace(pm.M["id"])
	if !validRPCID(id) {
		return nil, false
	}
	return &rpcRequest{id: id, method: pm.Method, params: pm.Params, name: pm.Name}, true
}

// isVersion2: raw is the JSON string "2.0" (in any spelling).
func isVersion2(raw json.RawMessage) bool {
	if string(raw) == `"2.0"` {
		return true
	}
	v, ok := wire.JSONString(raw)
	return ok && v == "2.0"
}

// validRPCID: id is a JSON string or number. (A valid JSON value that starts with a quote is
// a string; one that starts with a minus or a digit is a number.)
func validRPCID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return json.Valid(id)
	}
	return false
}

func (r *rpcRequest) str(key string) (string, bool) {
	return wire.JSONString(r.params[key])
}

func (r *rpcRequest) taskID() (string, bool) { return r.str("taskId") }

func (r *rpcRequest) meta() map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(r.params["_meta"], &m) != nil {
		return nil
	}
	return m
}

// declaresTasks: the request's own capabilities (params._meta) declare the extension with an
// object (an empty one means support; nothing else is defined).
func declaresTasks(meta map[string]json.RawMessage) bool {
	var caps, ext, settings map[string]json.RawMessage
	if json.Unmarshal(meta[mcp.MetaKeyClientCapabilities], &caps) != nil ||
		json.Unmarshal(caps["extensions"], &ext) != nil {
		return false
	}
	raw, ok := ext[TasksExtension]
	return ok && json.Unmarshal(raw, &settings) == nil && settings != nil
}

// checkTaskName is the one 2026-07-28 header rule the SDK does not apply to tasks/*: Mcp-Name
// equals params.taskId (SEP-2663 "Routing Headers"). The SDK checks MCP-Protocol-Version
// against _meta and Mcp-Method against the method for every request, but Mcp-Name only for
// tools/call, resources/read and prompts/get (go-sdk v1.8.0 mcp/streamable_headers.go:373).
// The body is authoritative; a disagreeing or missing header is 400 before anything runs.
func checkTaskName(h http.Header, req *rpcRequest) *rpcError {
	mismatch := func(msg string) *rpcError { return &rpcError{Code: mcp.CodeHeaderMismatch, Message: msg} }
	id, ok := req.taskID()
	switch n := h.Get(headerName); {
	case n == "":
		return mismatch(fmt.Sprintf("missing required Mcp-Name header for method %q", req.method))
	case !ok:
		return mismatch(fmt.Sprintf("failed to extract params.taskId for method %q", req.method))
	case n != id:
		return mismatch("header mismatch: Mcp-Name header does not match params.taskId")
	}
	return nil
}

// frontRequest is the front door's parse of this request's body (frontDoor puts it in the
// request context, which the SDK hands on to every handler of the request): its single
// JSON-RPC request.
func frontRequest(ctx context.Context) (*rpcRequest, bool) {
	pb, _ := ctx.Value(mcpbody.ContextKey{}).(*mcpbody.Body)
	if pb == nil {
		return nil, false
	}
	return rpcRequestOf(pb)
}

// sdkTransportOK: the SDK's stateless transport would take this POST (DNS-rebinding Host
// check, Content-Type, Accept). When not, the layer lets the SDK give its own answer.
func sdkTransportOK(r *http.Request) bool {
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && isLoopback(la.String()) && !isLoopback(r.Host) {
		return false
	}
	ct := strings.ToLower(strings.TrimSpace(strings.SplitN(r.Header.Get("Content-Type"), ";", 2)[0]))
	if ct != "application/json" {
		return false
	}
	var jsonOK, streamOK bool
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK && streamOK
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

func writeRPC(w http.ResponseWriter, status int, id json.RawMessage, result any, rerr *rpcError) {
	b, err := json.Marshal(rpcMessage{JSONRPC: "2.0", ID: id, Result: result, Error: rerr})
	if err != nil {
		http.Error(w, "cannot encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
