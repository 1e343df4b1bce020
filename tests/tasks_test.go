package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// The Tasks extension (io.modelcontextprotocol/tasks) driven as raw JSON-RPC over HTTP, the way
// a 2026-07-28 client sends it (the go-sdk client has no Tasks): per-request capabilities in
// _meta, MCP-Protocol-Version / Mcp-Method / Mcp-Name headers, both replicas.

// TestTasksLifecycle: task creation only for a client that declares the extension in that
// request; tasks/get working → completed with the result inline on either replica; duplicate
// start; the unknown-task answer for every "may not know"; expiry; headers; scopes; discover.
func TestTasksLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := uniqueKey(t)
	args := startArgs(key, 4, map[string]any{"episode_ms": 300, "fail_rate": 0})
	tk := b.tkStart(t, 0, ana, "start_eval", args)
	h, err := b.keys.OpenHandle(tk.TaskID, time.Now())
	must(t, err)
	jobID := "acme/eval/ana/" + key
	if h.WorkflowID != jobID || h.Tenant != "acme" || tk.Status != "working" || tk.PollIntervalMs <= 0 {
		t.Fatalf("created task %+v names %+v", tk, h)
	}
	created, err := time.Parse(time.RFC3339, tk.CreatedAt)
	must(t, err)
	if d := time.Until(created.Add(time.Duration(*tk.TTLMs) * time.Millisecond)); d < 6*24*time.Hour || d > 8*24*time.Hour {
		t.Fatalf("ttlMs %d: the task lives as long as its handle (7 days), not %s", *tk.TTLMs, d)
	}

	t.Run("WithoutExtensionAJobView", func(t *testing.T) {
		for _, caps := range []map[string]any{{}, {"extensions": map[string]any{"io.example/other": map[string]any{}}}} {
			r := b.tkPost(t, b.url(1), ana, "tools/call", "start_eval", map[string]any{"name": "start_eval", "arguments": args}, caps, nil)
			var res struct {
				ResultType        string          `json:"resultType"`
				StructuredContent jobcore.JobView `json:"structuredContent"`
			}
			if r.status != http.StatusOK || json.Unmarshal(r.msg.Result, &res) != nil || res.ResultType == "task" ||
				res.StructuredContent.JobID != jobID || res.StructuredContent.Created == nil || *res.StructuredContent.Created {
				t.Fatalf("caps %v: want the plain job view, got %d %s", caps, r.status, r.body)
			}
		}
	})
	t.Run("DuplicateStartSameJob", func(t *testing.T) {
		again := b.tkStart(t, 1, ana, "start_eval", args)
		h2, err := b.keys.OpenHandle(again.TaskID, time.Now())
		must(t, err)
		if h2.WorkflowID != jobID || !strings.Contains(again.StatusMessage, "existing job") || again.CreatedAt != tk.CreatedAt {
			t.Fatalf("duplicate start: %+v", again)
		}
		// Other arguments under the same key stay a tool error.
		r := b.tkPost(t, b.url(0), ana, "tools/call", "start_eval", map[string]any{"name": "start_eval",
			"arguments": startArgs(key, 5, nil)}, tkCaps(), nil)
		var res struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if json.Unmarshal(r.msg.Result, &res) != nil || !res.IsError || len(res.Content) != 1 ||
			!strings.Contains(res.Content[0].Text, jobcore.CodeIdempotencyKeyReused) || strings.Contains(string(r.body), `"task"`) {
			t.Fatalf("reused key: %s", r.body)
		}
	})
	t.Run("UnknownTaskIsOneAnswer", func(t *testing.T) {
		unknown := b.tkGet(t, 0, ana, "jgh1.t1.bm9wZQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
		if msg := unknown.rpcErr(t, http.StatusBadRequest, -32602); msg != "Failed to retrieve task: Task not found" {
			t.Fatalf("unknown task: %s", unknown.body)
		}
		forged := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/never-started", Kind: "eval", Expiry: time.Now().Add(time.Hour)})
		otherKeys, err := handle.NewKeyring("t1", map[string][]byte{"t1": handle.GenerateKey()})
		must(t, err)
		foreignSig := otherKeys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: jobID, Kind: "eval", Expiry: time.Now().Add(time.Hour)})
		for name, r := range map[string]*tkReply{
			"never started":      b.tkGet(t, 1, ana, forged),
			"other signing key":  b.tkGet(t, 0, ana, foreignSig),
			"other principal":    b.tkGet(t, 1, bo, tk.TaskID),
			"other tenant":       b.tkGet(t, 0, gus, tk.TaskID),
			"garbage":            b.tkGet(t, 1, ana, "not a task"),
			"cancel, not yours":  b.tkPost(t, b.url(0), bo, "tasks/cancel", tk.TaskID, map[string]any{"taskId": tk.TaskID}, tkCaps(), nil),
			"update, not yours":  b.tkUpdate(t, 1, bo, tk.TaskID, map[string]any{}),
			"update, other tnt":  b.tkUpdate(t, 0, gus, tk.TaskID, map[string]any{}),
			"cancel, other tnt":  b.tkPost(t, b.url(1), gus, "tasks/cancel", tk.TaskID, map[string]any{"taskId": tk.TaskID}, tkCaps(), nil),
			"a handle of a kind": b.tkGet(t, 0, ana, b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: jobID, Kind: "nokind", Expiry: time.Now().Add(time.Hour)})),
		} {
			t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) { tkSameAnswer(t, unknown, r) })
		}
	})
	t.Run("Expired", func(t *testing.T) {
		old := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: jobID, Kind: "eval", Expiry: time.Now().Add(-time.Minute)})
		r := b.tkGet(t, 1, ana, old)
		if msg := r.rpcErr(t, http.StatusBadRequest, -32602); msg != "Failed to retrieve task: Task has expired" || r.errData(t).Code != jobcore.CodeHandleExpired {
			t.Fatalf("expired: %s", r.body)
		}
		// Another tenant cannot tell an expired task from an unknown one.
		tkSameAnswer(t, b.tkGet(t, 0, gus, "nope"), b.tkGet(t, 0, gus, old))
	})
	t.Run("HeadersMustMatchBody", func(t *testing.T) {
		other := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: jobID, Kind: "eval", Expiry: time.Now().Add(2 * time.Hour)})
		for name, hdr := range map[string]map[string]string{
			"name":            {"Mcp-Name": other},
			"no name":         {"Mcp-Name": ""},
			"method":          {"Mcp-Method": "tasks/get"},
			"no method":       {"Mcp-Method": ""},
			"version in body": {"MCP-Protocol-Version": ""},
		} {
			t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
				r := b.tkPost(t, b.url(1), ana, "tasks/cancel", tk.TaskID, map[string]any{"taskId": tk.TaskID}, tkCaps(), hdr)
				if r.status != http.StatusBadRequest {
					t.Fatalf("want 400, got %d %s", r.status, r.body)
				}
			})
		}
		r := b.tkPost(t, b.url(0), ana, "tasks/get", other, map[string]any{"taskId": tk.TaskID}, tkCaps(), nil)
		if r.rpcErr(t, http.StatusBadRequest, -32020); strings.Contains(string(r.body), jobID) {
			t.Fatalf("mismatch answered with the job: %s", r.body)
		}
		// Nothing ran: the job was not cancelled by any of the rejected requests.
		if st := b.tkGet(t, 0, ana, tk.TaskID).task(t); st.Status == "cancelled" || strings.Contains(st.StatusMessage, "cancel") {
			t.Fatalf("a rejected tasks/cancel ran: %+v", st)
		}
	})
	t.Run("MissingCapability", func(t *testing.T) {
		r := b.tkPost(t, b.url(1), ana, "tasks/get", tk.TaskID, map[string]any{"taskId": tk.TaskID}, map[string]any{}, nil)
		r.rpcErr(t, http.StatusBadRequest, -32021)
		if !strings.Contains(string(r.msg.Error.Data), frontend.TasksExtension) {
			t.Fatalf("missing capability: %s", r.body)
		}
	})
	t.Run("ScopesAre403", func(t *testing.T) {
		writeOnly := principal{"acme", "ana", []authz.Scope{authz.ScopeWrite}}
		for _, c := range []struct {
			p            principal
			method, want string
		}{
			{writeOnly, "tasks/get", "jobs:read"},
			{steward, "tasks/cancel", "jobs:write"},
			{anaRO, "tasks/update", "jobs:write"},
			{anaRO, "tasks/cancel", "jobs:write"},
		} {
			params := map[string]any{"taskId": tk.TaskID, "inputResponses": map[string]any{}}
			r := b.tkPost(t, b.url(0), c.p, c.method, tk.TaskID, params, tkCaps(), nil)
			ch := r.header.Get("WWW-Authenticate")
			if r.status != http.StatusForbidden || !strings.Contains(ch, `error="insufficient_scope"`) ||
				!strings.Contains(ch, fmt.Sprintf("scope=%q", c.want)) || !strings.Contains(ch, "resource_metadata=") {
				t.Fatalf("%s as %v: %d %q %s", c.method, c.p.scopes, r.status, ch, r.body)
			}
		}
		// No token at all: 401 as everywhere.
		r := tkDo(t, b.url(1), "", []byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x"}}`), "tasks/get", "x",
			map[string]string{"Authorization": ""})
		if r.status != http.StatusUnauthorized {
			t.Fatalf("no token: %d", r.status)
		}
	})
	t.Run("DiscoverAdvertises", func(t *testing.T) {
		r := b.tkPost(t, b.url(1), ana, "server/discover", "", map[string]any{}, map[string]any{}, nil)
		var res struct {
			Capabilities struct {
				Extensions map[string]json.RawMessage `json:"extensions"`
				Tools      json.RawMessage            `json:"tools"`
			} `json:"capabilities"`
			SupportedVersions []string `json:"supportedVersions"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.msg.Result, &res) != nil || string(res.Capabilities.Extensions[frontend.TasksExtension]) != "{}" ||
			len(res.Capabilities.Tools) == 0 || len(res.SupportedVersions) == 0 {
			t.Fatalf("server/discover: %d %s", r.status, r.body)
		}
	})

	done := b.tkWait(t, ana, tk.TaskID, "completed", 60*time.Second)
	isErr, v, _ := tkResult(t, done)
	if isErr || v.Status != workflows.StatusSucceeded || v.JobID != jobID || v.Result == nil || done.PollIntervalMs != 0 {
		t.Fatalf("completed task: %+v / %+v", done, v)
	}
	if *done.TTLMs <= 0 {
		t.Fatalf("ttlMs %d", *done.TTLMs)
	}
	// A finished job's task is still there, on either replica, and cancel is an idempotent no-op.
	tkAck(t, b.tkPost(t, b.url(1), ana, "tasks/cancel", tk.TaskID, map[string]any{"taskId": tk.TaskID}, tkCaps(), nil))
	if again := b.tkGet(t, 1, ana, tk.TaskID).task(t); again.Status != "completed" {
		t.Fatalf("after cancel of a finished task: %+v", again)
	}
	// An admin of the tenant may read it; the approver may not (no open request for approvers).
	if a := b.tkGet(t, 0, ops, tk.TaskID).task(t); a.Status != "completed" {
		t.Fatalf("admin: %+v", a)
	}
	tkSameAnswer(t, b.tkGet(t, 0, steward, "nope"), b.tkGet(t, 0, steward, tk.TaskID))
}

// TestTasksFailedJobIsAToolError: a failed job is a completed task whose result is an isError
// tool result (the job's error), never the task status failed.
func TestTasksFailedJobIsAToolError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tk := b.tkStart(t, 1, ana, "start_eval", startArgs(uniqueKey(t), 2, map[string]any{"episode_ms": 0, "fail_rate": 1}))
	done := b.tkWait(t, ana, tk.TaskID, "completed", 60*time.Second)
	isErr, _, te := tkResult(t, done)
	if !isErr || te.Code != workflows.ErrCodeAllEpisodesFailed || te.Message == "" || !strings.Contains(done.StatusMessage, te.Code) {
		t.Fatalf("failed job: %+v %s", done, done.Result)
	}
}

// TestTasksCancel: tasks/cancel on the other replica is the cancel_* path; the task ends
// cancelled; repeating it is acknowledged.
func TestTasksCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tk := b.tkStart(t, 0, ana, "start_eval", startArgs(uniqueKey(t), 40, map[string]any{"episode_ms": 1000, "fail_rate": 0}))
	b.tkWait(t, ana, tk.TaskID, "working", 10*time.Second)
	tkAck(t, b.tkPost(t, b.url(1), ana, "tasks/cancel", tk.TaskID, map[string]any{"taskId": tk.TaskID}, tkCaps(), nil))
	done := b.tkWait(t, ana, tk.TaskID, "cancelled", 60*time.Second)
	if done.StatusMessage == "" || len(done.Result) != 0 || len(done.InputRequests) != 0 {
		t.Fatalf("cancelled task: %+v", done)
	}
	tkAck(t, b.tkPost(t, b.url(0), ana, "tasks/cancel", tk.TaskID, map[string]any{"taskId": tk.TaskID}, tkCaps(), nil))
}

// TestTasksOwnerApproval: the demo suite asks its owner above 100 episodes. The owner's tasks/get
// is input_required with one elicitation; a reader who may not answer sees working; a declined
// answer changes nothing; the answer on the other replica is the one resume update.
func TestTasksOwnerApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := uniqueKey(t)
	tk := b.tkStart(t, 0, ana, "start_eval", startArgs(key, 150, map[string]any{"episode_ms": 0, "fail_rate": 0}))
	jobID := "acme/eval/ana/" + key
	asked := b.tkWait(t, ana, tk.TaskID, "input_required", 30*time.Second)
	k, msg := tkInput(t, asked)
	if !strings.Contains(msg, "150") || asked.StatusMessage == "" || asked.PollIntervalMs <= 0 {
		t.Fatalf("input request %s: %q / %+v", k, msg, asked)
	}
	if again := b.tkGet(t, 1, ana, tk.TaskID).task(t); string(again.InputRequests) != string(asked.InputRequests) {
		t.Fatalf("the key of an outstanding request changed between polls: %s vs %s", again.InputRequests, asked.InputRequests)
	}
	// A reader without jobs:write may see the job but not answer: no input requests for it.
	if ro := b.tkGet(t, 1, anaRO, tk.TaskID).task(t); ro.Status != "working" || len(ro.InputRequests) != 0 || !strings.Contains(ro.StatusMessage, "owner") {
		t.Fatalf("read-only view: %+v", ro)
	}
	tkSameAnswer(t, b.tkUpdate(t, 0, bo, "nope", tkAnswer(k, "accept", "approve")), b.tkUpdate(t, 0, bo, tk.TaskID, tkAnswer(k, "accept", "approve")))

	tkAck(t, b.tkUpdate(t, 1, ana, tk.TaskID, tkAnswer(k, "decline", "")))
	tkAck(t, b.tkUpdate(t, 0, ana, tk.TaskID, tkAnswer("approval.some-other-request", "accept", "approve")))
	tkAck(t, b.tkUpdate(t, 1, ana, tk.TaskID, map[string]any{"unknown-key": map[string]any{"ignored": true}}))
	bad := b.tkUpdate(t, 1, ana, tk.TaskID, tkAnswer(k, "accept", "maybe"))
	if bad.rpcErr(t, http.StatusBadRequest, -32602); bad.errData(t).Code != jobcore.CodeInvalidArgument {
		t.Fatalf("bad decision: %s", bad.body)
	}
	missing := b.tkPost(t, b.url(0), ana, "tasks/update", tk.TaskID, map[string]any{"taskId": tk.TaskID}, tkCaps(), nil)
	missing.rpcErr(t, http.StatusBadRequest, -32602)
	b.tkUpdate(t, 1, ana, tk.TaskID, map[string]any{k: "approve"}).rpcErr(t, http.StatusBadRequest, -32602)
	if still := b.tkGet(t, 0, ana, tk.TaskID).task(t); still.Status != "input_required" {
		t.Fatalf("declined or ignored answers changed the task: %+v", still)
	}
	if n := b.acceptedUpdates(t, jobID); n != 0 {
		t.Fatalf("%d updates in history before the answer", n)
	}

	tkAck(t, b.tkUpdate(t, 1, ana, tk.TaskID, tkAnswer(k, "accept", "approve")))
	if n := b.acceptedUpdates(t, jobID); n != 1 {
		t.Fatalf("%d accepted updates, want 1", n)
	}
	// The same answer again (a lost acknowledgement) is acknowledged and changes nothing.
	tkAck(t, b.tkUpdate(t, 0, ana, tk.TaskID, tkAnswer(k, "accept", "approve")))
	done := b.tkWait(t, ana, tk.TaskID, "completed", 60*time.Second)
	if isErr, v, _ := tkResult(t, done); isErr || v.Status != workflows.StatusSucceeded {
		t.Fatalf("completed: %s", done.Result)
	}
	if n := b.acceptedUpdates(t, jobID); n != 1 {
		t.Fatalf("%d accepted updates after the repeat, want 1", n)
	}
}

// TestTasksExportFourEyes: an export whose email column needs a steward. The steward's tasks/get
// of the owner's task is input_required; the owner sees working and may not answer; the
// steward's answer on the other replica lets the export run; then the steward loses the task.
func TestTasksExportFourEyes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	tk := b.tkStart(t, 0, ana, "start_export", map[string]any{"idempotency_key": uniqueKey(t), "dataset": "customers",
		"format": "csv", "columns": []string{"id", "email"}, "purpose": "quarterly churn analysis"})
	// The steward can see the job only once it waits for an approver; the owner sees it wait.
	eventually(t, 30*time.Second, "the export to wait for an approver", func() bool {
		owner := b.tkGet(t, 1, ana, tk.TaskID).task(t)
		if owner.Status != "working" || len(owner.InputRequests) != 0 {
			t.Fatalf("owner's view: %+v", owner)
		}
		return strings.Contains(owner.StatusMessage, "approver")
	})
	asked := b.tkGet(t, 0, steward, tk.TaskID).task(t)
	if asked.Status != "input_required" {
		t.Fatalf("steward's view: %+v", asked)
	}
	k, msg := tkInput(t, asked)
	if !strings.Contains(msg, "quarterly churn analysis") || !strings.Contains(msg, "email") {
		t.Fatalf("elicitation: %q", msg)
	}
	refused := b.tkUpdate(t, 0, ana, tk.TaskID, tkAnswer(k, "accept", "approve"))
	if refused.rpcErr(t, http.StatusBadRequest, -32602); refused.errData(t).Code != jobcore.CodeForbidden {
		t.Fatalf("owner's approval: %s", refused.body)
	}
	if n := b.queries.count("customers"); n != 0 {
		t.Fatalf("%d statements reached the dataset before approval", n)
	}
	tkAck(t, b.tkUpdate(t, 1, steward, tk.TaskID, tkAnswer(k, "accept", "approve")))
	done := b.tkWait(t, ana, tk.TaskID, "completed", 60*time.Second)
	isErr, v, _ := tkResult(t, done)
	if isErr || v.Status != workflows.StatusSucceeded || v.Result == nil {
		t.Fatalf("export: %s", done.Result)
	}
	if r := acceptedResume(t, b, v.JobID); r.Seal == "" || r.Surface != workflows.SurfaceTasks || r.Principal.Subject != "steward" {
		t.Fatalf("accepted resume: %+v", r)
	}
	// Access ends with the open request: the steward now gets the unknown-task answer.
	tkSameAnswer(t, b.tkGet(t, 1, steward, "nope"), b.tkGet(t, 1, steward, tk.TaskID))
}

// TestTasksExpireWithTheirHandle: a task lives exactly as long as the handle that is its id;
// ttlMs says so, and after it the caller's tenant gets "Task has expired" (the contract's
// handle_expired), another tenant the unknown-task answer.
func TestTasksExpireWithTheirHandle(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{handleTTL: 2 * time.Second})
	before := b.clock.Now()
	tk := b.tkStart(t, 0, ana, "start_eval", startArgs(uniqueKey(t), 1, map[string]any{"episode_ms": 0}))
	after := b.clock.Now()
	created, err := time.Parse(time.RFC3339, tk.CreatedAt)
	must(t, err)
	// created_at + ttlMs is the handle's expiry: 2 s after the handle was sealed (during the
	// call), truncated to the second. A start that crosses a second boundary seals its handle
	// after created_at, so ttlMs may exceed 2000 by the length of the call, never more.
	if end := created.Add(time.Duration(*tk.TTLMs) * time.Millisecond); *tk.TTLMs <= 0 ||
		end.After(after.Add(2*time.Second)) || !end.After(before.Add(time.Second)) {
		t.Fatalf("ttlMs %d for a 2s handle (created %s, call from %s to %s)", *tk.TTLMs, created, before, after)
	}
	b.clock.advanceTo(created.Add(time.Duration(*tk.TTLMs)*time.Millisecond + 100*time.Millisecond))
	r := b.tkGet(t, 1, ana, tk.TaskID)
	if msg := r.rpcErr(t, http.StatusBadRequest, -32602); msg != "Failed to retrieve task: Task has expired" || r.errData(t).Code != jobcore.CodeHandleExpired {
		t.Fatalf("expired: %s", r.body)
	}
	tkSameAnswer(t, b.tkGet(t, 0, gus, "nope"), b.tkGet(t, 0, gus, tk.TaskID))
}
