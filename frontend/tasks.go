package frontend

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/workflowservice/v1"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

// The Tasks extension (io.modelcontextprotocol/tasks, SEP-2663) for 2026-07-28 clients: a
// tools/call of a start_* tool from a client that declares the extension in that request's own
// capabilities is answered with resultType "task" once the job is durably started, and
// tasks/get, tasks/update and tasks/cancel map onto get_*, resume and cancel_* of the same job.
//
// The go-sdk rejects methods it does not know (tasks/*) before any middleware runs, and its MRTR
// middleware overwrites a tool result's resultType; so this is a thin JSON-RPC layer in front of
// the SDK's HTTP handler, inside the bearer and requireToolScope wrappers. It passes everything
// else through untouched and keeps no state: a taskId is the job's signed handle (tenant-bound,
// unforgeable, expiring), and every task request re-runs the same tool code, mostly by
// forwarding a synthesized tools/call through the SDK handler.

const (
	// TasksExtension names the extension in client and server capabilities.
	TasksExtension = "io.modelcontextprotocol/tasks"

	methodTasksGet    = "tasks/get"
	methodTasksUpdate = "tasks/update"
	methodTasksCancel = "tasks/cancel"
	methodToolsCall   = "tools/call"
	methodDiscover    = "server/discover"

	headerProtocolVersion = "Mcp-Protocol-Version"
	headerMethod          = "Mcp-Method"
	headerName            = "Mcp-Name"
	headerParamPrefix     = "Mcp-Param-"

	// Task statuses (SEP-2663).
	taskWorking       = "working"
	taskInputRequired = "input_required"
	taskCompleted     = "completed"
	taskFailed        = "failed"
	taskCancelled     = "cancelled"
)

// taskActions: the policy action (and so the scopes) of each tasks/* method — what get_*,
// resume_* and cancel_* need.
var taskActions = map[string]authz.Action{
	methodTasksGet:    authz.ActionGet,
	methodTasksUpdate: authz.ActionResume,
	methodTasksCancel: authz.ActionCancel,
}

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// errTaskNotFound is the one answer for an unknown, malformed, foreign-tenant or not-yours
// taskId (and a job past retention), byte-identical for every cause.
var errTaskNotFound = &rpcError{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}

// errTaskExpired is handle_expired for a well-formed taskId of the caller's tenant.
func errTaskExpired(kind string) *rpcError {
	return &rpcError{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task has expired",
		Data: toolErr(CodeHandleExpired, "the task id (a job handle) has expired; call start_%s again with the same idempotency_key and arguments (or list_jobs) to reach the job", kind)}
}

var errTaskInternal = &rpcError{Code: jsonrpc.CodeInternalError, Message: "Internal error"}

// errMissingTasksCapability: a tasks/* request whose own capabilities lack the extension.
var errMissingTasksCapability = &rpcError{Code: mcp.CodeMissingRequiredClientCapabilities, Message: "Missing required client capability",
	Data: map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}}

// taskRPCError maps a tool error of the job core to the tasks/* answer: every "may not know"
// and bad-handle outcome is the unknown task; the rest keep the tool error as data.
func taskRPCError(te *ToolError, kind string) *rpcError {
	switch te.Code {
	case CodeNotFound, CodeInvalidHandle:
		return errTaskNotFound
	case CodeHandleExpired:
		return errTaskExpired(kind)
	case CodeUnavailable:
		return &rpcError{Code: jsonrpc.CodeInternalError, Message: te.Message, Data: te}
	}
	return &rpcError{Code: jsonrpc.CodeInvalidParams, Message: te.Message, Data: te}
}

// task is a Task (SEP-2663) with the fields of CreateTaskResult and GetTaskResult.
type task struct {
	ResultType     string              `json:"resultType"`
	TaskID         string              `json:"taskId"`
	Status         string              `json:"status"`
	StatusMessage  string              `json:"statusMessage,omitempty"`
	CreatedAt      string              `json:"createdAt"`
	LastUpdatedAt  string              `json:"lastUpdatedAt"`
	TTLMs          int64               `json:"ttlMs"`
	PollIntervalMs int                 `json:"pollIntervalMs,omitempty"`
	InputRequests  mcp.InputRequestMap `json:"inputRequests,omitempty"`
	Result         json.RawMessage     `json:"result,omitempty"`
	Error          *rpcError           `json:"error,omitempty"`
}

// ack is the empty acknowledgement of tasks/update and tasks/cancel.
type ack struct {
	ResultType string `json:"resultType"`
}

// ---------------------------------------------------------------- the layer

// tasksLayer answers tasks/*, turns a task-creating start_* call's job view into a task and
// advertises the extension in server/discover; everything else goes to next unchanged.
func (f *Frontend) tasksLayer(metaURL string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		pb, _ := r.Context().Value(parsedBodyKey{}).(*parsedBody)
		if pb == nil { // not behind requireToolScope
			body, ok := bufferBody(w, r)
			if !ok {
				return
			}
			pb = parseBody(body)
			if pb.err != nil {
				refuseBody(w, pb.err)
				return
			}
		}
		req, ok := pb.request()
		// Whatever the SDK's transport would refuse (Host, Content-Type, Accept), it refuses.
		if !ok || !sdkTransportOK(r) {
			next.ServeHTTP(w, r)
			return
		}
		version := r.Header.Get(headerProtocolVersion)
		_, isTask := taskActions[req.method]
		switch {
		case req.method == methodDiscover:
			f.discoverWithTasks(w, r, next)
		case version != protocolMRTR:
			// Older eras have no per-request capabilities (and 2025-11-25 had other tasks/*).
			next.ServeHTTP(w, r)
		case isTask:
			f.serveTask(w, r, metaURL, req, next)
		case req.method == methodToolsCall && f.actions[req.toolName()] == authz.ActionStart && declaresTasks(req.meta()):
			f.startTask(w, r, next)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// serveTask answers one tasks/* request: principal, the 403 scope check of the tool it maps
// to, the header/body check, the capability check, then the method.
func (f *Frontend) serveTask(w http.ResponseWriter, r *http.Request, metaURL string, req *rpcRequest, next http.Handler) {
	start := time.Now()
	p, ok := principalFrom(auth.TokenInfoFromContext(r.Context()))
	if !ok {
		http.Error(w, "no principal", http.StatusUnauthorized)
		return
	}
	if need := authz.ActionScopes(taskActions[req.method]); !hasAny(p, need) {
		f.denyScope(w, metaURL, req.method, need, p)
		return
	}
	if rerr := checkTaskHeaders(r.Header, req); rerr != nil {
		writeRPC(w, http.StatusBadRequest, req.id, nil, rerr)
		return
	}
	if !declaresTasks(req.meta()) {
		writeRPC(w, http.StatusBadRequest, req.id, nil, errMissingTasksCapability)
		return
	}
	taskID, _ := req.taskID()
	var (
		res  any
		rerr *rpcError
	)
	h, rerr := f.openTaskID(p, taskID)
	if rerr == nil {
		switch req.method {
		case methodTasksGet:
			res, rerr = f.taskGet(r, next, p, taskID, h)
		case methodTasksUpdate:
			res, rerr = f.taskUpdate(r.Context(), p, taskID, h, req.params["inputResponses"])
		case methodTasksCancel:
			res, rerr = f.taskCancel(r, next, taskID, h)
		}
	}
	fields := []zap.Field{zap.String("method", req.method), zap.String("tenant", p.Tenant), zap.String("sub", p.Subject),
		zap.Duration("latency", time.Since(start))}
	if h.WorkflowID != "" {
		fields = append(fields, zap.String("job_id", h.WorkflowID)) // signature verified: safe to log
	}
	if rerr != nil {
		code := fmt.Sprint(rerr.Code)
		if te, ok := rerr.Data.(*ToolError); ok {
			code = te.Code
		} else if rerr == errTaskNotFound {
			code = CodeNotFound
		}
		f.log.Info("task call", append(fields, zap.String("code", code))...)
		writeRPC(w, http.StatusOK, req.id, nil, rerr)
		return
	}
	f.log.Info("task call", append(fields, zap.String("code", "ok"))...)
	writeRPC(w, http.StatusOK, req.id, res, nil)
}

// denyScope answers 403 with the same insufficient_scope challenge requireToolScope sends;
// what is the tool or tasks/* method that needed one of need.

// openTaskID opens a taskId (a job handle) for caller p. Malformed, badly signed, another
// tenant's, or of a kind this server has no tools for: the unknown task. Well-formed and of
// the caller's tenant but past expiry: the expired task (the contract's handle_expired).
func (f *Frontend) openTaskID(p authz.Principal, id string) (handle.Handle, *rpcError) {
	h, err := f.opts.Keys.OpenHandle(id, f.opts.Now())
	if (err != nil && !errors.Is(err, handle.ErrExpired)) || h.Tenant != p.Tenant ||
		!strings.HasPrefix(h.WorkflowID, p.Tenant+"/") || f.actions["get_"+h.Kind] != authz.ActionGet {
		return handle.Handle{}, errTaskNotFound
	}
	if err != nil {
		return h, errTaskExpired(h.Kind)
	}
	return h, nil
}

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

// startTask runs a start_* call unchanged through the SDK handler and, when it answers a job
// view (the workflow is durably started by then), answers the task instead. Tool errors,
// JSON-RPC errors, MRTR input_required results and anything unexpected pass through as they are.
func (f *Frontend) startTask(w http.ResponseWriter, r *http.Request, next http.Handler) {
	rec := newRecorder()
	next.ServeHTTP(rec, r)
	resp, reply, ok := rec.toolReply()
	if !ok || reply.toolError() != nil || (reply.ResultType != "" && reply.ResultType != "complete") {
		rec.copyTo(w, nil)
		return
	}
	v, ok := reply.view()
	p, okp := principalFrom(auth.TokenInfoFromContext(r.Context()))
	if !ok || !okp || v.Handle == "" {
		rec.copyTo(w, nil)
		return
	}
	h, err := f.opts.Keys.OpenHandle(v.Handle, f.opts.Now())
	if err != nil {
		rec.copyTo(w, nil)
		return
	}
	t, rerr := f.taskFromView(r.Context(), p, v.Handle, h.Expiry, v, false)
	if rerr != nil {
		rec.copyTo(w, nil) // the job view still names the durable job
		return
	}
	t.ResultType = "task"
	if v.Created != nil && !*v.Created {
		t.StatusMessage = "existing job for this idempotency_key: " + t.StatusMessage
	}
	b, err := json.Marshal(rpcMessage{JSONRPC: "2.0", ID: resp.ID, Result: t})
	if err != nil {
		rec.copyTo(w, nil)
		return
	}
	f.log.Info("task created", zap.String("job_id", v.JobID), zap.String("tenant", p.Tenant), zap.String("sub", p.Subject),
		zap.String("status", t.Status))
	rec.copyTo(w, b)
}

// discoverWithTasks advertises the extension in server/discover's capabilities.extensions.
func (f *Frontend) discoverWithTasks(w http.ResponseWriter, r *http.Request, next http.Handler) {
	rec := newRecorder()
	next.ServeHTTP(rec, r)
	if rec.code != http.StatusOK {
		rec.copyTo(w, nil)
		return
	}
	b, ok := addTasksCapability(rec.body.Bytes())
	if !ok {
		rec.copyTo(w, nil)
		return
	}
	rec.copyTo(w, b)
}

// ---------------------------------------------------------------- job view → task

// taskFromView maps a job view onto a task. detailed (tasks/get) adds inputRequests; a
// job waiting for input is input_required only for a caller who may answer it, otherwise
// working with a message saying for whom it waits. v is the view the job's get_* or start_*
// rendered for p (so of p's tenant): its open request carries everything the policy and the
// elicitation need, and the task says what that one read of the job saw (no second Describe).
func (f *Frontend) taskFromView(ctx context.Context, p authz.Principal, taskID string, expiry time.Time, v *JobView, detailed bool) (*task, *rpcError) {
	t := &task{TaskID: taskID, CreatedAt: isoTime(v.CreatedAt), LastUpdatedAt: isoTime(v.UpdatedAt), PollIntervalMs: v.PollAfterMS}
	var ni *workflows.NeedsInput
	if v.Status == workflows.StatusAwaitingInput && v.NeedsInput != nil {
		open := needsInputOf(v.NeedsInput)
		if authz.Decide(p, authz.ActionResume, workflows.PolicyJob(p.Tenant, v.Owner, open)) == authz.Allow {
			ni = open
		}
	}
	t.Status, t.StatusMessage = taskStatus(v, ni != nil)
	if ni != nil && detailed {
		t.InputRequests = mcp.InputRequestMap{taskInputKey(ni): approvalElicitation(ni)}
	}
	end := expiry
	if v.Status.Terminal() {
		t.PollIntervalMs = 0
		if ret, ok := f.retention(ctx); ok && v.UpdatedAt.Add(ret).Before(end) {
			end = v.UpdatedAt.Add(ret) // a closed job is purged after the namespace's retention
		}
	}
	t.TTLMs = max(end.Sub(v.CreatedAt).Milliseconds(), 0)
	return t, nil
}

// needsInputOf is the open request a NeedsInputView shows (needsInputViewOf reversed: the view
// carries every field of the request).
func needsInputOf(v *NeedsInputView) *workflows.NeedsInput {
	return &workflows.NeedsInput{InputID: v.InputID, Prompt: v.Prompt, AnswerSchema: v.AnswerSchema,
		ScopeDigest: v.ScopeDigest, Scope: v.Scope, Approver: v.Approver, AllowSelf: v.SelfApproval,
		RequestedBy: v.RequestedBy, ExpiresAt: v.ExpiresAt}
}

// taskStatus maps a job's status onto a task's: queued, running and cancelling are working;
// awaiting_input is input_required for whoever may answer (mayAnswer), else working; a
// succeeded or failed job is completed (its tool result says which); cancelled is cancelled.
// failed is never produced: every job outcome is a tool result, and a fault while reading one
// is a JSON-RPC error of that tasks/get (retryable), not a terminal state of the task.
func taskStatus(v *JobView, mayAnswer bool) (status, message string) {
	switch v.Status {
	case workflows.StatusQueued, workflows.StatusRunning:
		return taskWorking, progressMessage(v)
	case workflows.StatusCancelling:
		return taskWorking, "cancellation requested; " + progressMessage(v)
	case workflows.StatusAwaitingInput:
		if mayAnswer && v.NeedsInput != nil {
			return taskInputRequired, v.NeedsInput.Prompt
		}
		if v.NeedsInput != nil && v.NeedsInput.Approver == authz.ApproverApprover {
			return taskWorking, "waiting for an approver (jobs:approve, not the job's owner) to answer the job's input request"
		}
		return taskWorking, "waiting for the job's owner to answer the job's input request"
	case workflows.StatusSucceeded:
		return taskCompleted, "succeeded"
	case workflows.StatusFailed:
		if v.Error != nil {
			return taskCompleted, "the job failed (" + v.Error.Code + "): " + v.Error.Message
		}
		return taskCompleted, "the job failed"
	case workflows.StatusCancelled:
		if v.Error != nil {
			return taskCancelled, v.Error.Message
		}
		return taskCancelled, "cancelled"
	}
	return taskWorking, string(v.Status)
}

func progressMessage(v *JobView) string {
	pr := v.Progress
	msg := string(v.Status)
	if pr.Message != "" {
		msg = pr.Message
	}
	if pr.Total > 0 {
		msg += fmt.Sprintf(" (%d/%d %s done", pr.Done, pr.Total, pr.Unit)
		if pr.Failed > 0 {
			msg += fmt.Sprintf(", %d failed", pr.Failed)
		}
		msg += ")"
	}
	return msg
}

// failedJobResult is a failed job as the tool result of the call that started it: isError,
// the job's error as the contract's tool error JSON (text only: it does not validate against
// the tool's output schema, so no structuredContent).
func failedJobResult(v *JobView) json.RawMessage {
	je := v.Error
	if je == nil {
		je = &workflows.JobError{Code: "failed", Message: "the job failed"}
	}
	b, err := json.Marshal(errorResult(&ToolError{Code: je.Code, Message: je.Message}))
	if err != nil {
		return nil
	}
	return withCompleteResultType(b)
}

// withCompleteResultType sets resultType "complete" on a tool result object, as a 2026-07-28
// tools/call answers it.
func withCompleteResultType(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return raw
	}
	m["resultType"] = json.RawMessage(`"complete"`)
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

// taskInputKey names an open input request in inputRequests/inputResponses. It is unique over
// the task's lifetime (a re-asked request with another scope gets another key) and binds an
// answer to exactly the input_id and scope_digest that were shown.
func taskInputKey(ni *workflows.NeedsInput) string {
	sum := sha256.Sum256([]byte(ni.ScopeDigest))
	return InputKeyApproval + "." + ni.InputID + "." + hex.EncodeToString(sum[:8])
}

// retention is the namespace's retention of closed workflows, when Temporal says.
func (f *Frontend) retention(ctx context.Context) (time.Duration, bool) {
	if f.opts.Temporal == nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
	defer cancel()
	resp, err := f.opts.Temporal.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: f.opts.Namespace})
	if err != nil || resp.GetConfig().GetWorkflowExecutionRetentionTtl() == nil {
		return 0, false
	}
	return resp.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(), true
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// ---------------------------------------------------------------- JSON-RPC plumbing

// rpcRequest is one JSON-RPC request, keys matched exactly (as the SDK's decoder does).
type rpcRequest struct {
	id     json.RawMessage // a string or a number
	method string
	params map[string]json.RawMessage // nil when absent or not an object
	name   string                     // params.name when a JSON string, else ""
}

// parseRPCRequest reads a single JSON-RPC request (not a notification, not a batch).
func parseRPCRequest(body []byte) (*rpcRequest, bool) {
	return parseBody(body).request()
}

// request is the body's single JSON-RPC request (not a notification, not a batch).
func (pb *parsedBody) request() (*rpcRequest, bool) {
	if pb.batch || len(pb.msgs) != 1 {
		return nil, false
	}
	pm := &pb.msgs[0]
	pm.decode()
	if !isVersion2(pm.m["jsonrpc"]) || !pm.methodOK {
		return nil, false
	}
	id := bytes.TrimSpace(pm.m["id"])
	if !validRPCID(id) {
		return nil, false
	}
	return &rpcRequest{id: id, method: pm.method, params: pm.params, name: pm.name}, true
}

// isVersion2: raw is the JSON string "2.0" (in any spelling).
func isVersion2(raw json.RawMessage) bool {
	if string(raw) == `"2.0"` {
		return true
	}
	v, ok := jsonString(raw)
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
	return jsonString(r.params[key])
}

func (r *rpcRequest) toolName() string { return r.name }

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

// checkTaskHeaders applies the 2026-07-28 header rules the SDK applies to tools/call to a
// tasks/* request: MCP-Protocol-Version equals _meta's protocol version, Mcp-Method the method,
// and Mcp-Name params.taskId (SEP-2663 "Routing Headers"). The body is authoritative; a
// disagreeing or missing header is 400 before anything runs.
func checkTaskHeaders(h http.Header, req *rpcRequest) *rpcError {
	mismatch := func(msg string) *rpcError { return &rpcError{Code: mcp.CodeHeaderMismatch, Message: msg} }
	var metaVersion string
	if json.Unmarshal(req.meta()[mcp.MetaKeyProtocolVersion], &metaVersion) != nil || metaVersion == "" {
		return &rpcError{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("missing or invalid _meta field %q", mcp.MetaKeyProtocolVersion)}
	}
	if h.Get(headerProtocolVersion) != metaVersion {
		return mismatch("header mismatch: MCP-Protocol-Version header does not match _meta " + mcp.MetaKeyProtocolVersion)
	}
	switch m := h.Get(headerMethod); {
	case m == "":
		return mismatch("missing required Mcp-Method header")
	case m != req.method:
		return mismatch("header mismatch: Mcp-Method header does not match the request's method")
	}
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

// addTasksCapability adds the extension to a server/discover response's capabilities.
func addTasksCapability(body []byte) ([]byte, bool) {
	var msg, res, caps, ext map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil || json.Unmarshal(msg["result"], &res) != nil || res == nil {
		return nil, false
	}
	if raw, ok := res["capabilities"]; ok && json.Unmarshal(raw, &caps) != nil {
		return nil, false
	}
	if caps == nil {
		caps = map[string]json.RawMessage{}
	}
	if raw, ok := caps["extensions"]; ok && json.Unmarshal(raw, &ext) != nil {
		return nil, false
	}
	if ext == nil {
		ext = map[string]json.RawMessage{}
	}
	ext[TasksExtension] = json.RawMessage(`{}`)
	var err error
	if caps["extensions"], err = json.Marshal(ext); err != nil {
		return nil, false
	}
	if res["capabilities"], err = json.Marshal(caps); err != nil {
		return nil, false
	}
	if msg["result"], err = json.Marshal(res); err != nil {
		return nil, false
	}
	b, err := json.Marshal(msg)
	return b, err == nil
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
