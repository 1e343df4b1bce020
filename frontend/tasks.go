package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
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
