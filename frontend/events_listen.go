// events_listen.go serves subscriptions/listen with notifications/tasks (the Tasks extension's
// "Task Status Notifications") for 2026-07-28 clients that declare the extension: the POST is
// answered with an SSE stream of the watched tasks, each notification the task exactly as
// tasks/get returns it then, every event with a resumable id (events/follow.go, events_http.go).
//
// The front door serves it, not the SDK: the SDK's subscriptions/listen (go-sdk v1.8.0
// mcp/server.go:1256) knows only list-changed and resource subscriptions, has no way to send a
// notification of another method, writes no SSE id for 2026-07-28 streams and refuses
// Last-Event-ID on a POST (mcp/streamable.go:1416), so neither resumption nor heartbeats could
// be had through it. Listens that ask for no taskIds still go to the SDK unchanged.

package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/events"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
)

const (
	methodSubscriptionsListen = "subscriptions/listen"
	notificationTasks         = "notifications/tasks"
	notificationSubsAcked     = "notifications/subscriptions/acknowledged"
	headerMethod              = "Mcp-Method"
)

// listenTaskIDs is params.notifications.taskIds of a subscriptions/listen request; ok is false
// when the request asks for no task notifications (then it is the SDK's to answer). A taskIds
// member that is not an array of strings is asked-for but invalid (bad is the reason).
func listenTaskIDs(req *rpcRequest) (ids []string, ok bool, bad string) {
	var n map[string]json.RawMessage
	if json.Unmarshal(req.params["notifications"], &n) != nil {
		return nil, false, ""
	}
	raw, ok := n["taskIds"]
	if !ok {
		return nil, false, ""
	}
	if json.Unmarshal(raw, &ids) != nil || ids == nil {
		return nil, true, "notifications.taskIds: must be an array of task id strings"
	}
	if len(ids) == 0 || len(ids) > handle.MaxEventPosJobs {
		return nil, true, fmt.Sprintf("notifications.taskIds: 1 to %d task ids per stream", handle.MaxEventPosJobs)
	}
	return ids, true, ""
}

// watched is one accepted task of a listen stream.
type watched struct {
	taskID string
	h      handle.Handle
}

// serveListen answers a 2026-07-28 subscriptions/listen that asks for task notifications.
func (f *Frontend) serveListen(w http.ResponseWriter, r *http.Request, req *rpcRequest, p authz.Principal, metaURL string, ids []string, bad string) {
	if !f.listenAllowed(w, r, req, p, metaURL, bad) {
		return
	}
	accepted, wfIDs := f.acceptTasks(r.Context(), p, ids)
	var release func()
	if len(accepted) > 0 {
		var te *jobcore.ToolError
		if release, te = f.acquireStream(p); te != nil {
			status := http.StatusTooManyRequests
			if te.Code == jobcore.CodeUnavailable {
				status = http.StatusServiceUnavailable
			}
			w.Header().Set("Retry-After", fmt.Sprint(max(te.RetryAfterMS/1000, 1)))
			writeRPC(w, status, req.id, nil, &rpcError{Code: jsonrpc.CodeInternalError, Message: te.Message, Data: te})
			return
		}
		defer release()
	}
	subMeta := map[string]any{mcp.MetaKeySubscriptionID: req.id}
	target := events.StreamTarget("tasks", wfIDs)
	pos := f.resumePos(r, p, target, len(accepted))
	ctx, cancel := f.streamContext(r)
	defer cancel()
	sse := events.StartSSE(w)
	defer sse.Close()
	acceptedIDs := make([]string, len(accepted))
	for i, a := range accepted {
		acceptedIDs[i] = a.taskID
	}
	ackID := ""
	if len(accepted) > 0 {
		ackID = f.sealPos(p, target, pos)
	}
	if sse.Event(ackID, rpcNotification(notificationSubsAcked, map[string]any{
		"notifications": map[string]any{"taskIds": acceptedIDs}, "_meta": subMeta})) != nil {
		return
	}
	f.Metrics.StreamOpened("tasks_listen")
	defer f.Metrics.StreamClosed("tasks_listen")
	go sse.Heartbeat(ctx, cancel, f.Opts.StreamHeartbeat)

	updates := make(chan listenUpdate)
	for i, a := range accepted {
		go f.followTask(ctx, p, i, a, pos[i], updates)
	}
	for left := len(accepted); left > 0; {
		select {
		case <-ctx.Done():
			return // the client left, the token expired, or a write failed: no result
		case u := <-updates:
			if u.done {
				left--
				continue
			}
			pos[u.i] = u.next
			params, err := withMeta(u.ev.Payload, subMeta)
			if err != nil {
				return
			}
			if sse.Event(f.sealPos(p, target, pos), rpcNotification(notificationTasks, params)) != nil {
				return
			}
		}
	}
	// Every watched task is terminal (or no longer visible): the listen's result ends it.
	b, err := json.Marshal(rpcMessage{JSONRPC: "2.0", ID: req.id, Result: map[string]any{"_meta": subMeta, "resultType": "complete"}})
	if err == nil {
		_ = sse.Event("", b)
	}
}

// listenAllowed checks the request (Mcp-Method header, declared tasks capability, scope,
// taskIds); when it refuses, it has answered.
func (f *Frontend) listenAllowed(w http.ResponseWriter, r *http.Request, req *rpcRequest, p authz.Principal, metaURL, bad string) bool {
	if m := r.Header.Get(headerMethod); m != req.method {
		writeRPC(w, http.StatusBadRequest, req.id, nil, &rpcError{Code: mcp.CodeHeaderMismatch,
			Message: fmt.Sprintf("header mismatch: Mcp-Method header value %q does not match body value %q", m, req.method)})
		return false
	}
	if !declaresTasks(req.meta()) {
		writeRPC(w, http.StatusBadRequest, req.id, nil, errMissingTasksCapability)
		return false
	}
	if need := authz.ActionScopes(authz.ActionGet); !hasAny(p, need) {
		f.denyScope(r.Context(), w, metaURL, methodSubscriptionsListen, need, p)
		return false
	}
	if bad != "" {
		writeRPC(w, http.StatusBadRequest, req.id, nil, &rpcError{Code: jsonrpc.CodeInvalidParams, Message: bad})
		return false
	}
	return true
}

// acceptTasks is the tasks the caller may see now (tasks/get answers them), each once, and
// their workflow IDs. The rest are left out without a word — unknown, another tenant's, not
// theirs, expired, malformed alike.
func (f *Frontend) acceptTasks(ctx context.Context, p authz.Principal, ids []string) (accepted []watched, wfIDs []string) {
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		h, rerr := f.openTaskID(p, id)
		if rerr != nil {
			continue
		}
		if _, rerr := f.taskGet(ctx, nil, p, id, h); rerr != nil {
			continue
		}
		accepted = append(accepted, watched{taskID: id, h: h})
		wfIDs = append(wfIDs, h.WorkflowID)
	}
	return accepted, wfIDs
}

// listenUpdate is what a task's follower sends the listen stream: a new view of task i and
// the position after it, or done when its notifications end.
type listenUpdate struct {
	i    int
	ev   *events.Rendered
	next handle.JobPos
	done bool
}

// followTask follows accepted task i of a listen stream from pos, sending each new view (as
// tasks/get renders it) to updates, then done.
func (f *Frontend) followTask(ctx context.Context, p authz.Principal, i int, a watched, pos handle.JobPos, updates chan<- listenUpdate) {
	render := func(ctx context.Context) (events.Rendered, error) {
		t, rerr := f.taskGet(ctx, nil, p, a.taskID, a.h)
		if rerr != nil {
			return events.Rendered{}, rerr.wire()
		}
		b, err := json.Marshal(t)
		if err != nil {
			return events.Rendered{}, err
		}
		return events.Rendered{Payload: b, Digest: events.ViewDigest(b), Terminal: taskTerminal(t.Status)}, nil
	}
	err := f.follow.FollowJob(ctx, a.h.WorkflowID, pos, render, func(ev events.Rendered, next handle.JobPos) error {
		select {
		case updates <- listenUpdate{i: i, ev: &ev, next: next}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil && ctx.Err() == nil {
		// Access lost, the job gone, or Temporal failing for good: this task's
		// notifications end; the stream goes on for the others.
		f.Logger(ctx).Info("subscriptions/listen: task follow ended", zap.String("job_id", a.h.WorkflowID), zap.Error(err))
	}
	select {
	case updates <- listenUpdate{i: i, done: true}:
	case <-ctx.Done():
	}
}

// taskTerminal: a task status no notification follows.
func taskTerminal(status string) bool {
	return status == taskCompleted || status == taskFailed || status == taskCancelled
}

// rpcNotification is a JSON-RPC notification of method with params.
func rpcNotification(method string, params any) []byte {
	b, _ := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}{"2.0", method, params})
	return b
}

// withMeta is the JSON object obj with meta merged into its _meta.
func withMeta(obj json.RawMessage, meta map[string]any) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	cur := map[string]any{}
	if raw, ok := m["_meta"]; ok {
		_ = json.Unmarshal(raw, &cur)
	}
	for k, v := range meta {
		cur[k] = v
	}
	b, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	m["_meta"] = b
	return json.Marshal(m)
}
