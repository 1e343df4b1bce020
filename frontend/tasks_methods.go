// tasks_methods.go holds the tasks/get, tasks/update and tasks/cancel methods of the Tasks
// extension (each mapped onto get_*, resume and cancel_* of the job), their error mapping, and
// the in-process run of a tool's handler they use.

package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// taskGet is tasks/get: get_<kind>'s own handler (the same access rules, the same result),
// mapped onto the task's status. The call declares no client capabilities, so MRTR asks nothing.
func (f *Frontend) taskGet(ctx context.Context, ss *mcp.ServerSession, p authz.Principal, taskID string, h handle.Handle) (*task, *rpcError) {
	res, rerr := f.runJobTool(ctx, ss, "get", jobcore.HandleIn{Handle: taskID}, h)
	if rerr != nil {
		return nil, rerr
	}
	v, ok := resultView(res)
	if !ok {
		return nil, errTaskInternal
	}
	t, rerr := f.taskFromView(ctx, p, taskID, h.Expiry, v, true)
	if rerr != nil {
		return nil, rerr
	}
	t.ResultType = "complete"
	switch v.Status {
	case workflows.StatusSucceeded:
		raw, err := json.Marshal(res)
		if err != nil {
			return nil, errTaskInternal
		}
		t.Result = withServerInfo(withCompleteResultType(raw), f.impl)
	case workflows.StatusFailed:
		if t.Status == taskFailed {
			// A fault, not an outcome: the JSON-RPC error, and no result (SEP-2663).
			t.Error = &rpcError{Code: jsonrpc.CodeInternalError, Message: v.Error.Message}
			break
		}
		t.Result = failedJobResult(v)
	}
	return t, nil
}

// taskUpdate is tasks/update: the answer to the job's open input request, keyed as tasks/get
// offered it, becomes the same resume as resume_* (resolve for resume, then resumeJob).
// Responses to keys that are not outstanding, and declined elicitations, change nothing.
func (f *Frontend) taskUpdate(ctx context.Context, p authz.Principal, taskID string, h handle.Handle, raw json.RawMessage) (*ack, *rpcError) {
	// Only the outstanding key's value is read: responses to other keys are ignored whatever
	// their shape.
	var resps map[string]json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &resps) != nil {
		return nil, &rpcError{Code: jsonrpc.CodeInvalidParams, Message: "inputResponses is required: an object keyed like tasks/get's inputRequests"}
	}
	j, err := f.Resolve(ctx, p, taskID, h.Kind, authz.ActionResume)
	if err != nil {
		return nil, f.taskFault(ctx, "call", err, h)
	}
	ok := &ack{ResultType: "complete"}
	if j.NeedsInput == nil || j.Status() != workflows.StatusAwaitingInput {
		return ok, nil // nothing outstanding: ignored
	}
	in := f.TaskInputOf(h.Kind)
	answered := map[string]*mcp.ElicitResult{}
	for key := range in.Requests(j.NeedsInput) {
		rawResp, found := resps[key]
		if !found {
			continue // an outstanding key left unanswered (a partial answer)
		}
		var resp mcp.ElicitResult
		if json.Unmarshal(rawResp, &resp) != nil {
			return nil, &rpcError{Code: jsonrpc.CodeInvalidParams, Message: "inputResponses: the answer must be an elicitation result {action, content}"}
		}
		answered[key] = &resp
	}
	if len(answered) == 0 {
		return ok, nil // keys that are not outstanding are ignored
	}
	resume, accepted, err := in.Answer(j.NeedsInput, answered)
	if err != nil {
		return nil, f.taskFault(ctx, "call", err, h)
	}
	if !accepted {
		return ok, nil // declined or dismissed: the job keeps waiting
	}
	_, err = f.ResumeJob(ctx, p, j, resume, jobcore.TokenAnswerer(ctx, workflows.SurfaceTasks), jobcore.ShownPrompt(j, j.NeedsInput.InputID))
	var te *jobcore.ToolError
	if errors.As(err, &te) && te.Code == jobcore.CodeInputNotExpected {
		return ok, nil // superseded meanwhile (answered, expired, cancelled): ignored
	}
	if err != nil {
		return nil, f.taskFault(ctx, "call", err, h)
	}
	return ok, nil
}

// taskCancel is tasks/cancel: cancel_<kind>'s own handler; idempotent.
func (f *Frontend) taskCancel(ctx context.Context, ss *mcp.ServerSession, taskID string, h handle.Handle) (*ack, *rpcError) {
	if _, rerr := f.runJobTool(ctx, ss, "cancel", jobcore.CancelIn{Handle: taskID}, h); rerr != nil {
		return nil, rerr
	}
	return &ack{ResultType: "complete"}, nil
}

// withServerInfo is a tool result (raw) with the server's identity in its _meta, as the SDK
// sends every 2026-07-28 result (go-sdk v1.8.0 mcp/server.go annotateServerInfo): a succeeded
// task's result is get_*'s as a tools/call of the task's era answers it (the result runTool
// returns has not been through the SDK's sending). A result with one there, or whose _meta is
// not an object, stays as it is.
func withServerInfo(raw json.RawMessage, impl *mcp.Implementation) json.RawMessage {
	var m, meta map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return raw
	}
	if rm, ok := m["_meta"]; ok && (json.Unmarshal(rm, &meta) != nil || meta == nil) {
		return raw
	}
	if _, ok := meta[mcp.MetaKeyServerInfo]; ok {
		return raw
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	var err error
	if meta[mcp.MetaKeyServerInfo], err = json.Marshal(impl); err != nil {
		return raw
	}
	if m["_meta"], err = json.Marshal(meta); err != nil {
		return raw
	}
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

// runTool runs tool name with args as the handler the SDK calls for a tools/call (principal,
// arguments, log line and metrics as for any call), in this request's context and session.
func (f *Frontend) runTool(ctx context.Context, ss *mcp.ServerSession, name string, args any) (*mcp.CallToolResult, error) {
	h, ok := f.handlers[name]
	if !ok {
		return nil, fmt.Errorf("%s: no such tool", name)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	res, err := h(ctx, &mcp.CallToolRequest{Session: ss, Params: &mcp.CallToolParamsRaw{Name: name, Arguments: raw},
		Extra: &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(ctx)}})
	if err == nil && res == nil {
		err = fmt.Errorf("%s: no result", name)
	}
	return res, err
}

// runJobTool runs the job's <verb>_<kind> tool for a tasks/* method (runTool); a run that
// fails, or a tool error, is the method's JSON-RPC error.
func (f *Frontend) runJobTool(ctx context.Context, ss *mcp.ServerSession, verb string, args any, h handle.Handle) (*mcp.CallToolResult, *rpcError) {
	res, err := f.runTool(ctx, ss, verb+"_"+h.Kind, args)
	if err != nil {
		return nil, f.taskFault(ctx, verb, err, h)
	}
	if te := resultToolError(res); te != nil {
		return nil, taskRPCError(te, h.Kind)
	}
	return res, nil
}

// resultToolError is the tool error of an isError result (a generic one if the text is not ours).
func resultToolError(res *mcp.CallToolResult) *jobcore.ToolError {
	if !res.IsError {
		return nil
	}
	var te jobcore.ToolError
	if len(res.Content) == 1 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok && json.Unmarshal([]byte(tc.Text), &te) == nil && te.Code != "" {
			return &te
		}
	}
	return &jobcore.ToolError{Code: "internal", Message: "the tool failed"}
}

// resultView is a successful result's job view.
func resultView(res *mcp.CallToolResult) (*jobcore.JobView, bool) {
	var v jobcore.JobView
	raw, ok := res.StructuredContent.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, false
		}
		raw = b
	}
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v.JobID == "" {
		return nil, false
	}
	return &v, true
}
