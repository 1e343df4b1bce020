// tasks_methods.go holds the tasks/get, tasks/update and tasks/cancel methods of the Tasks
// extension (each mapped onto get_*, resume and cancel_* of the job) and their error mapping.

package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

// taskGet is tasks/get: get_<kind> through the SDK handler (the same access rules, the same
// result), mapped onto the task's status.
func (f *Frontend) taskGet(r *http.Request, next http.Handler, p authz.Principal, taskID string, h handle.Handle) (any, *rpcError) {
	reply, err := f.forwardTool(r, next, "get_"+h.Kind, HandleIn{Handle: taskID})
	if err != nil {
		f.log.Error("task get failed", zap.String("job_id", h.WorkflowID), zap.Error(err))
		return nil, errTaskInternal
	}
	if te := reply.toolError(); te != nil {
		return nil, taskRPCError(te, h.Kind)
	}
	v, ok := reply.view()
	if !ok {
		return nil, errTaskInternal
	}
	t, rerr := f.taskFromView(r.Context(), p, taskID, h.Expiry, v, true)
	if rerr != nil {
		return nil, rerr
	}
	t.ResultType = "complete"
	switch v.Status {
	case workflows.StatusSucceeded:
		t.Result = withCompleteResultType(reply.raw)
	case workflows.StatusFailed:
		t.Result = failedJobResult(v)
	}
	return t, nil
}

// taskUpdate is tasks/update: the answer to the job's open input request, keyed as tasks/get
// offered it, becomes the same resume as resume_* (resolve for resume, then resumeJob).
// Responses to keys that are not outstanding, and declined elicitations, change nothing.
func (f *Frontend) taskUpdate(ctx context.Context, p authz.Principal, taskID string, h handle.Handle, raw json.RawMessage) (any, *rpcError) {
	// Only the outstanding key's value is read: responses to other keys are ignored whatever
	// their shape.
	var resps map[string]json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &resps) != nil {
		return nil, &rpcError{Code: jsonrpc.CodeInvalidParams, Message: "inputResponses is required: an object keyed like tasks/get's inputRequests"}
	}
	j, err := f.resolve(ctx, p, taskID, h.Kind, authz.ActionResume)
	if err != nil {
		return nil, f.taskFault(err, h)
	}
	ok := &ack{ResultType: "complete"}
	if j.needsInput == nil || j.status() != workflows.StatusAwaitingInput {
		return ok, nil // nothing outstanding: ignored
	}
	rawResp, answered := resps[taskInputKey(j.needsInput)]
	if !answered {
		return ok, nil // keys that are not outstanding are ignored
	}
	var resp mcp.ElicitResult
	if json.Unmarshal(rawResp, &resp) != nil {
		return nil, &rpcError{Code: jsonrpc.CodeInvalidParams, Message: "inputResponses: the answer must be an elicitation result {action, content}"}
	}
	decision, comment, accepted, err := elicitAnswer(&resp)
	if err != nil {
		return nil, f.taskFault(err, h)
	}
	if !accepted {
		return ok, nil // declined or dismissed: the job keeps waiting
	}
	if utf8.RuneCountInString(comment) > commentMax { // as resume_* checks it
		return nil, f.taskFault(invalidArg("inputResponses", "content.comment: at most %d characters", commentMax), h)
	}
	_, err = f.resumeJob(ctx, p, j, ResumeIn{InputID: j.needsInput.InputID, ScopeDigest: j.needsInput.ScopeDigest,
		Decision: decision, Comment: comment}, workflows.SurfaceTasks)
	var te *ToolError
	if errors.As(err, &te) && te.Code == CodeInputNotExpected {
		return ok, nil // superseded meanwhile (answered, expired, cancelled): ignored
	}
	if err != nil {
		return nil, f.taskFault(err, h)
	}
	return ok, nil
}

// taskCancel is tasks/cancel: cancel_<kind> through the SDK handler; idempotent.
func (f *Frontend) taskCancel(r *http.Request, next http.Handler, taskID string, h handle.Handle) (any, *rpcError) {
	reply, err := f.forwardTool(r, next, "cancel_"+h.Kind, CancelIn{Handle: taskID})
	if err != nil {
		f.log.Error("task cancel failed", zap.String("job_id", h.WorkflowID), zap.Error(err))
		return nil, errTaskInternal
	}
	if te := reply.toolError(); te != nil {
		return nil, taskRPCError(te, h.Kind)
	}
	return &ack{ResultType: "complete"}, nil
}

// taskFault maps an error of the job core called directly.
func (f *Frontend) taskFault(err error, h handle.Handle) *rpcError {
	if te, ok := asToolError(err); ok {
		return taskRPCError(te, h.Kind)
	}
	f.log.Error("task call failed", zap.String("job_id", h.WorkflowID), zap.Error(err))
	return errTaskInternal
}
