package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/telemetry"
)

// The Tasks extension (io.modelcontextprotocol/tasks, SEP-2663) for 2026-07-28 clients: a
// tools/call of a start_* tool from a client that declares the extension in that request's own
// capabilities is answered with resultType "task" once the job is durably started, and
// tasks/get, tasks/update and tasks/cancel map onto get_*, resume and cancel_* of the same job.
//
// All of it runs inside the SDK: tasks/* are methods registered with mcp.AddReceivingCustomMethod
// (so the SDK's transport, session, per-request _meta and header checks and middleware handle
// them like any method), and the task answer of start_* and the extension in server/discover's
// capabilities come from a receiving middleware. What the SDK cannot do stays in the front door
// (frontDoor in http.go): the 403 insufficient_scope answer and the Mcp-Name check of tasks/*.
// Nothing keeps state: a taskId is the job's signed handle (tenant-bound, unforgeable, expiring),
// and every task request runs the same tool code as get_*, resume_* and cancel_*.

const (
	// TasksExtension names the extension in client and server capabilities.
	TasksExtension = "io.modelcontextprotocol/tasks"

	methodTasksGet    = "tasks/get"
	methodTasksUpdate = "tasks/update"
	methodTasksCancel = "tasks/cancel"
	methodToolsCall   = "tools/call"
	methodDiscover    = "server/discover"

	headerProtocolVersion = "Mcp-Protocol-Version"
	headerName            = "Mcp-Name"

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

// wire is the error as the SDK sends it (a handler's *jsonrpc.Error goes out unchanged).
func (e *rpcError) wire() *jsonrpc.Error {
	we := &jsonrpc.Error{Code: int64(e.Code), Message: e.Message}
	if e.Data != nil {
		if b, err := json.Marshal(e.Data); err == nil {
			we.Data = b
		}
	}
	return we
}

// errTaskNotFound is the one answer for an unknown, malformed, foreign-tenant or not-yours
// taskId (and a job past retention), byte-identical for every cause.
var errTaskNotFound = &rpcError{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}

// errTaskExpired is handle_expired for a well-formed taskId of the caller's tenant.
func errTaskExpired(kind string) *rpcError {
	return &rpcError{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task has expired",
		Data: jobcore.ToolErr(jobcore.CodeHandleExpired, "the task id (a job handle) has expired; call start_%s again with the same idempotency_key and arguments (or list_jobs) to reach the job", kind)}
}

var errTaskInternal = &rpcError{Code: jsonrpc.CodeInternalError, Message: "Internal error"}

// errMissingTasksCapability: a tasks/* request whose own capabilities lack the extension.
var errMissingTasksCapability = &rpcError{Code: mcp.CodeMissingRequiredClientCapabilities, Message: "Missing required client capability",
	Data: map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}}

// taskRPCError maps a tool error of the job core to the tasks/* answer: every "may not know"
// and bad-handle outcome is the unknown task; the rest keep the tool error as data.
func taskRPCError(te *jobcore.ToolError, kind string) *rpcError {
	switch te.Code {
	case jobcore.CodeNotFound, jobcore.CodeInvalidHandle:
		return errTaskNotFound
	case jobcore.CodeHandleExpired:
		return errTaskExpired(kind)
	case jobcore.CodeUnavailable:
		return &rpcError{Code: jsonrpc.CodeInternalError, Message: te.Message, Data: te}
	}
	return &rpcError{Code: jsonrpc.CodeInvalidParams, Message: te.Message, Data: te}
}

// taskFault is the tasks/* answer to an error of the job core or of a tool it ran (what names
// the step in the log: "call", "get", "cancel"): a tool error as taskRPCError maps it, anything
// else logged and the bare internal error.
func (f *Frontend) taskFault(ctx context.Context, what string, err error, h handle.Handle) *rpcError {
	if te, ok := jobcore.AsToolError(err); ok {
		return taskRPCError(te, h.Kind)
	}
	f.Logger(ctx).Error("task "+what+" failed", zap.String("job_id", h.WorkflowID), zap.Error(err))
	return errTaskInternal
}

// task is a Task (SEP-2663) with the fields of CreateTaskResult and GetTaskResult.
type task struct {
	mcp.ResultBase
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
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// SetMeta keeps the SDK from adding _meta (it sets io.modelcontextprotocol/serverInfo on every
// 2026-07-28 result, go-sdk v1.8.0 mcp/server.go:2042-2066): a task and an ack are answered
// as they always were, without _meta. (Drop these two methods to send it, as SEP-2575 suggests.)
func (*task) SetMeta(map[string]any) {}

// SetMeta: see task.SetMeta.
func (*ack) SetMeta(map[string]any) {}

// taskParams are the params of a tasks/* request as the SDK hands them over. The handler reads
// the front door's parse of the body instead (exact keys, the one parse every check saw), so
// the SDK's decode is a no-op: whatever the params' shape, the answer is the handler's to give
// (a numeric taskId is the unknown task, not a decoding error of the SDK).
type taskParams struct {
	mcp.ParamsBase
}

// UnmarshalJSON: see taskParams.
func (p *taskParams) UnmarshalJSON([]byte) error { return nil }

// ---------------------------------------------------------------- registration

// registerTasks adds tasks/* to the SDK server and the middleware that turns a task-creating
// start_* call's job view into a task and advertises the extension in server/discover.
func (f *Frontend) registerTasks() error {
	get := func(ctx context.Context, ss *mcp.ServerSession, _ *taskParams) (*task, error) {
		res, err := f.serveTask(ctx, ss, methodTasksGet)
		if err != nil {
			return nil, err
		}
		return res.(*task), nil
	}
	answer := func(method string) func(context.Context, *mcp.ServerSession, *taskParams) (*ack, error) {
		return func(ctx context.Context, ss *mcp.ServerSession, _ *taskParams) (*ack, error) {
			res, err := f.serveTask(ctx, ss, method)
			if err != nil {
				return nil, err
			}
			return res.(*ack), nil
		}
	}
	if err := mcp.AddReceivingCustomMethod(f.server, methodTasksGet, get); err != nil {
		return err
	}
	for _, m := range []string{methodTasksUpdate, methodTasksCancel} {
		if err := mcp.AddReceivingCustomMethod(f.server, m, answer(m)); err != nil {
			return err
		}
	}
	f.server.AddReceivingMiddleware(f.tasksMiddleware)
	return nil
}

// tasksMiddleware answers a task-creating start_* call with the task and adds the extension to
// server/discover's capabilities; everything else passes unchanged.
func (f *Frontend) tasksMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case methodDiscover:
			res, err := next(ctx, method, req)
			if d, ok := res.(*mcp.DiscoverResult); ok && err == nil {
				d2 := *d // the capabilities may be the server's own: copy before adding
				caps := &mcp.ServerCapabilities{}
				if d.Capabilities != nil {
					*caps = *d.Capabilities
				}
				caps.Extensions = maps.Clone(caps.Extensions)
				caps.AddExtension(TasksExtension, map[string]any{})
				d2.Capabilities = caps
				return &d2, nil
			}
			return res, err
		case methodToolsCall:
			ctr, ok := req.(*mcp.CallToolRequest)
			if !ok {
				break
			}
			if f.requestCreatesTask(ctx, ctr) {
				res, err := next(ctx, method, req)
				return f.startTask(ctx, ctr, res, err)
			}
			if ctr.Params != nil && f.actions[ctr.Params.Name] == authz.ActionStart && f.taskSupport[ctr.Params.Name] == jobcore.TaskRequired {
				// The tool can only answer with a task, and this request cannot take one.
				return nil, errMissingTasksCapability.wire()
			}
		}
		return next(ctx, method, req)
	}
}

// requestCreatesTask: a 2026-07-28 tools/call of a start_* tool that may answer with a task, whose
// own capabilities declare the extension (older eras have no per-request capabilities).
func (f *Frontend) requestCreatesTask(ctx context.Context, req *mcp.CallToolRequest) bool {
	if req.Params == nil || f.actions[req.Params.Name] != authz.ActionStart || f.taskSupport[req.Params.Name] == jobcore.TaskForbidden ||
		req.Extra == nil || req.Extra.Header.Get(headerProtocolVersion) != jobcore.ProtocolMRTR {
		return false
	}
	r, ok := frontRequest(ctx)
	return ok && declaresTasks(r.meta())
}

// ---------------------------------------------------------------- tasks/*

// taskGate is the front door's mark, in the request context, on a tasks/* request it checked
// (scope, Mcp-Name): the handler answers only such requests, so a request that reached the SDK
// another way (a batch of an older era, or a transport check of sdkTransportOK that drifted from
// the SDK's) is not served unchecked. An answer about the task (not found, expired, a refused
// update: -32602) goes out as the SDK sends every -32602 of a 2026-07-28 request, with HTTP 400
// (SEP-2575; go-sdk v1.8.0 mcp/streamable.go:1046-1064, 1926); -32603 keeps 200.
type taskGate struct{}

type taskGateKey struct{}

// serveTask answers one tasks/* request: the era and the capability check, then the taskId,
// then the method. The 403 scope check and the Mcp-Name check ran in the front door, the
// version and Mcp-Method checks in the SDK's transport.
func (f *Frontend) serveTask(ctx context.Context, ss *mcp.ServerSession, method string) (mcp.Result, error) {
	start := time.Now()
	_, checked := ctx.Value(taskGateKey{}).(*taskGate)
	req, ok := frontRequest(ctx)
	if ip := ss.InitializeParams(); !checked || !ok || req.method != method || ip == nil || ip.ProtocolVersion != jobcore.ProtocolMRTR {
		// Not checked by the front door, or of an older era (2025-11-25 had other tasks/*):
		// not ours to answer.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("%q is not offered here", method)}
	}
	p, ok := jobcore.PrincipalFromContext(ctx)
	if !ok {
		return nil, jobcore.ErrNoPrincipal
	}
	if !declaresTasks(req.meta()) {
		return nil, errMissingTasksCapability.wire()
	}
	taskID, _ := req.taskID()
	var (
		res  mcp.Result
		rerr *rpcError
	)
	h, rerr := f.openTaskID(p, taskID)
	if rerr == nil {
		switch method {
		case methodTasksGet:
			res, rerr = f.taskGet(ctx, ss, p, taskID, h)
		case methodTasksUpdate:
			res, rerr = f.taskUpdate(ctx, p, taskID, h, req.params["inputResponses"])
		case methodTasksCancel:
			res, rerr = f.taskCancel(ctx, ss, taskID, h)
		}
	}
	fields := []zap.Field{zap.String("method", method), zap.String("tenant", p.Tenant), zap.String("sub", p.Subject),
		zap.Duration("latency", time.Since(start))}
	fields = append(fields, telemetry.LogTrace(ctx)...)
	if h.WorkflowID != "" {
		fields = append(fields, zap.String("job_id", h.WorkflowID)) // signature verified: safe to log
	}
	if rerr != nil {
		code := fmt.Sprint(rerr.Code)
		if te, ok := rerr.Data.(*jobcore.ToolError); ok {
			code = te.Code
		} else if rerr == errTaskNotFound {
			code = jobcore.CodeNotFound
		}
		f.Log.Info("task call", append(fields, zap.String("code", code))...)
		return nil, rerr.wire()
	}
	f.Log.Info("task call", append(fields, zap.String("code", "ok"))...)
	return res, nil
}

// openTaskID opens a taskId (a job handle) for caller p. Malformed, badly signed, another
// tenant's, or of a kind this server has no tools for: the unknown task. Well-formed and of
// the caller's tenant but past expiry: the expired task (the contract's handle_expired).
func (f *Frontend) openTaskID(p authz.Principal, id string) (handle.Handle, *rpcError) {
	h, err := f.Opts.Keys.OpenHandle(id, f.Opts.Now())
	if (err != nil && !errors.Is(err, handle.ErrExpired)) || h.Tenant != p.Tenant ||
		!strings.HasPrefix(h.WorkflowID, p.Tenant+"/") || f.actions["get_"+h.Kind] != authz.ActionGet {
		return handle.Handle{}, errTaskNotFound
	}
	if err != nil {
		return h, errTaskExpired(h.Kind)
	}
	return h, nil
}

// startTask turns the job view of a start_* call (the workflow is durably started by then)
// into the task. Tool errors, JSON-RPC errors, MRTR input_required results and anything
// unexpected pass through as they are.
func (f *Frontend) startTask(ctx context.Context, req *mcp.CallToolRequest, res mcp.Result, err error) (mcp.Result, error) {
	ctr, ok := res.(*mcp.CallToolResult)
	if err != nil || !ok || ctr.IsError || ctr.NeedsInput() {
		return res, err
	}
	v, ok := resultView(ctr)
	p, okp := jobcore.PrincipalFrom(req.Extra.TokenInfo)
	if !ok || !okp || v.Handle == "" {
		return res, nil
	}
	h, herr := f.Opts.Keys.OpenHandle(v.Handle, f.Opts.Now())
	if herr != nil {
		return res, nil
	}
	t, rerr := f.taskFromView(ctx, p, v.Handle, h.Expiry, v, false)
	if rerr != nil {
		return res, nil // the job view still names the durable job
	}
	t.ResultType = "task"
	if v.Created != nil && !*v.Created {
		t.StatusMessage = "existing job for this idempotency_key: " + t.StatusMessage
	}
	f.Logger(ctx).Info("task created", zap.String("job_id", v.JobID), zap.String("tenant", p.Tenant), zap.String("sub", p.Subject),
		zap.String("status", t.Status))
	return t, nil
}
