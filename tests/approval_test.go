package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// Helpers shared by approval_test.go, cancel_test.go and command_test.go carry an "ac" prefix so
// they cannot collide with other files of the package.

// acOverThreshold is above the demo suite's approval threshold (100 episodes).
const acOverThreshold = 150

// acFast makes demo episodes short and deterministic (no simulated failures).
var acFast = map[string]any{"episode_ms": 10, "fail_rate": 0}

func acStartArgs(key, suite string, episodes, concurrency int, params map[string]any) map[string]any {
	a := map[string]any{"idempotency_key": key, "suite": suite, "episodes": episodes}
	if concurrency > 0 {
		a["concurrency"] = concurrency
	}
	if params != nil {
		a["params"] = params
	}
	return a
}

// acAwaitingOwner sets up a bundle in which ana (replica 0) starts a demo eval over the approval
// threshold that waits for her, its owner: the bundle, her session, the start and waiting views.
func acAwaitingOwner(t *testing.T) (*testBundle, *mcp.ClientSession, *jobcore.JobView, *jobcore.JobView) {
	t.Helper()
	b := setup(t)
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", acStartArgs(uniqueKey(t), "demo", acOverThreshold, 20, acFast)))
	return b, cs, v, acAwaitInput(t, cs, v.Handle, authz.ApproverOwner)
}

// acAwaitInput polls get_eval until the job waits for input and checks the open request is complete.
func acAwaitInput(t *testing.T, cs *mcp.ClientSession, h string, approver authz.Approver) *jobcore.JobView {
	t.Helper()
	v := waitStatus(t, cs, h, workflows.StatusAwaitingInput, 30*time.Second)
	ni := v.NeedsInput
	if ni == nil {
		t.Fatalf("awaiting_input without needs_input: %+v", v)
	}
	if ni.InputID == "" || ni.Prompt == "" || !strings.HasPrefix(ni.ScopeDigest, "sha256:") || ni.AnswerSchema == nil {
		t.Fatalf("incomplete needs_input: %+v", ni)
	}
	if ni.Approver != approver {
		t.Fatalf("needs_input.approver = %q, want %q", ni.Approver, approver)
	}
	if !ni.ExpiresAt.After(time.Now()) {
		t.Fatalf("needs_input.expires_at %s is not in the future", ni.ExpiresAt)
	}
	if v.PollAfterMS <= 0 {
		t.Fatalf("poll_after_ms = %d while awaiting input", v.PollAfterMS)
	}
	return v
}

// acResumeArgs answers v's open input request with decision; mods adjust the arguments.
func acResumeArgs(v *jobcore.JobView, decision string, mods map[string]any) map[string]any {
	a := map[string]any{"handle": v.Handle, "input_id": v.NeedsInput.InputID,
		"scope_digest": v.NeedsInput.ScopeDigest, "decision": decision}
	for k, x := range mods {
		a[k] = x
	}
	return a
}

// acNoSideEffects asserts that nothing ran and no update reached the job's history.
func acNoSideEffects(t *testing.T, b *testBundle, id string) {
	t.Helper()
	evs := acHistory(t, b, id)
	if n := acCount(evs, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED); n != 0 {
		t.Errorf("history has %d ActivityTaskScheduled events, want 0", n)
	}
	if n := acCount(evs, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_REJECTED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED); n != 0 {
		t.Errorf("history has %d update events, want 0 (rejected updates must not reach history)", n)
	}
}

// acResult decodes an eval view's result.
func acResult(t *testing.T, v *jobcore.JobView) workflows.EvalResult {
	t.Helper()
	if v.Result == nil {
		t.Fatalf("job %s (%s) has no result", v.JobID, v.Status)
	}
	raw, err := json.Marshal(v.Result)
	must(t, err)
	var r workflows.EvalResult
	must(t, json.Unmarshal(raw, &r))
	return r
}

func acNear(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestApproval(t *testing.T) {
	t.Parallel()
	// demo (always there) asks its owner; gated asks an approver.
	b := setup(t, setupOpts{suitesJSON: `{"suites":[{"name":"gated","kind":"demo","approval_threshold":1,"approver":"approver"}]}`})
	ana0 := b.session(ana, 0, "")
	ana1 := b.session(ana, 1, "2025-11-25")

	v := mustView(t, call(t, ana0, "start_eval", acStartArgs(uniqueKey(t), "demo", acOverThreshold, 20, acFast)))
	// A second job, on a suite whose input request needs an approver: the steward's to answer.
	v2 := mustView(t, call(t, ana0, "start_eval", acStartArgs(uniqueKey(t)+"-steward", "gated", 2, 0, acFast)))

	w := acAwaitInput(t, ana0, v.Handle, authz.ApproverOwner)
	if !strings.Contains(w.NeedsInput.Prompt, fmt.Sprint(acOverThreshold)) {
		t.Errorf("prompt %q does not say how many episodes", w.NeedsInput.Prompt)
	}
	if w.Progress.Total != acOverThreshold || w.Progress.Done != 0 {
		t.Errorf("progress while awaiting input = %+v", w.Progress)
	}

	unknown := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/nope", Kind: "eval", Expiry: time.Now().Add(time.Hour)})
	unknownView := *w
	unknownView.Handle = unknown

	t.Run("StewardCannotSeeOwnerRequest", func(t *testing.T) {
		// jobs:approve covers only input requests that need an approver; an owner
		// request keeps the job hidden, exactly like an unknown one.
		st := b.session(steward, 1, "")
		for _, c := range []struct {
			tool string
			args func(*jobcore.JobView) map[string]any
		}{
			{"get_eval", func(x *jobcore.JobView) map[string]any { return map[string]any{"handle": x.Handle} }},
			{"resume_eval", func(x *jobcore.JobView) map[string]any { return acResumeArgs(x, "approve", nil) }},
		} {
			got := call(t, st, c.tool, c.args(w))
			mustErr(t, got, jobcore.CodeNotFound)
			want := call(t, st, c.tool, c.args(&unknownView))
			mustErr(t, want, jobcore.CodeNotFound)
			if string(got.Raw) != string(want.Raw) {
				t.Fatalf("%s: not_found differs from an unknown job's:\n got %s\nwant %s", c.tool, got.Raw, want.Raw)
			}
		}
	})

	t.Run("OtherPrincipalNotFound", func(t *testing.T) {
		boS := b.session(bo, 0, "")
		got := call(t, boS, "resume_eval", acResumeArgs(w, "approve", nil))
		mustErr(t, got, jobcore.CodeNotFound)
		want := call(t, boS, "resume_eval", acResumeArgs(&unknownView, "approve", nil))
		mustErr(t, want, jobcore.CodeNotFound)
		if string(got.Raw) != string(want.Raw) {
			t.Fatalf("not_found differs from an unknown job's:\n got %s\nwant %s", got.Raw, want.Raw)
		}
	})

	t.Run("OtherTenantNotFound", func(t *testing.T) {
		gusS := b.session(gus, 1, "")
		got := call(t, gusS, "resume_eval", acResumeArgs(w, "approve", nil))
		mustErr(t, got, jobcore.CodeNotFound)
		want := call(t, b.session(bo, 1, ""), "resume_eval", acResumeArgs(&unknownView, "approve", nil))
		if string(got.Raw) != string(want.Raw) {
			t.Fatalf("not_found differs from an unknown job's:\n got %s\nwant %s", got.Raw, want.Raw)
		}
	})

	t.Run("WrongInputID", func(t *testing.T) {
		mustErr(t, call(t, ana0, "resume_eval", acResumeArgs(w, "approve", map[string]any{"input_id": "approve-000000000000"})),
			jobcore.CodeInputNotExpected)
	})

	t.Run("WrongScopeDigest", func(t *testing.T) {
		other := workflows.Digest(workflows.EvalArgs{Suite: "demo", Episodes: 1, Concurrency: 1})
		mustErr(t, call(t, ana0, "resume_eval", acResumeArgs(w, "approve", map[string]any{"scope_digest": other})),
			jobcore.CodeInputNotExpected)
	})

	t.Run("InvalidDecision", func(t *testing.T) {
		e := mustErr(t, call(t, ana0, "resume_eval", acResumeArgs(w, "maybe", nil)), jobcore.CodeInvalidArgument)
		if !strings.Contains(e.Message, "decision") {
			t.Fatalf("invalid_argument does not name decision: %q", e.Message)
		}
	})

	t.Run("ReadOnlyTokenForbiddenAtHTTP", func(t *testing.T) {
		// The MCP client surfaces the 403 as an error, not a tool result.
		ro := b.session(anaRO, 0, "")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := ro.CallTool(ctx, &mcp.CallToolParams{Name: "resume_eval", Arguments: acResumeArgs(w, "approve", nil)})
		if err == nil {
			t.Fatalf("resume_eval with jobs:read only succeeded at HTTP: isError=%v %v", res.IsError, res.StructuredContent)
		}
		if !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("client error does not report the 403: %v", err)
		}
		// The raw exchange: 403 with an insufficient_scope challenge naming jobs:write.
		args, _ := json.Marshal(acResumeArgs(w, "approve", nil))
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"resume_eval","arguments":` + string(args) + `}}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url(1), strings.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+b.token(anaRO))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", resp.StatusCode)
		}
		ch := resp.Header.Get("WWW-Authenticate")
		if !strings.Contains(ch, `error="insufficient_scope"`) || !strings.Contains(ch, `scope="jobs:write"`) {
			t.Fatalf("WWW-Authenticate = %q", ch)
		}
		// jobs:read still reads the job (on a new session: the client drops one that saw a 403).
		if s := mustView(t, call(t, b.session(anaRO, 1, ""), "get_eval", map[string]any{"handle": v.Handle})).Status; s != workflows.StatusAwaitingInput {
			t.Fatalf("read-only view status %s", s)
		}
	})

	t.Run("RejectionsLeaveNoTrace", func(t *testing.T) {
		acNoSideEffects(t, b, v.JobID)
		if s := mustView(t, call(t, ana1, "get_eval", map[string]any{"handle": v.Handle})).Status; s != workflows.StatusAwaitingInput {
			t.Fatalf("status after rejected resumes = %s, want awaiting_input", s)
		}
	})

	t.Run("OwnerApprovesOnOtherReplica", func(t *testing.T) {
		r := mustView(t, call(t, ana1, "resume_eval", acResumeArgs(w, "approve", map[string]any{"comment": "go"})))
		if r.Status != workflows.StatusRunning && r.Status != workflows.StatusSucceeded {
			t.Fatalf("status right after approval = %s", r.Status)
		}
		if r.NeedsInput != nil {
			t.Fatalf("needs_input still present after approval: %+v", r.NeedsInput)
		}
		done := waitStatus(t, ana0, v.Handle, workflows.StatusSucceeded, 60*time.Second)
		res := acResult(t, done)
		if res.ApprovedBy != "ana" || res.Episodes != acOverThreshold || res.Scored != acOverThreshold || res.Failed != 0 {
			t.Fatalf("result = %+v", res)
		}
		if done.Progress.Done != acOverThreshold {
			t.Errorf("final progress = %+v", done.Progress)
		}
		evs := acHistory(t, b, v.JobID)
		acWantCounts(t, evs, map[enumspb.EventType]int{
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:  1,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED: 1,
			enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:             acOverThreshold + 1, // the episodes and the episode log's write
		})
		// No episode was scheduled before the approval was accepted.
		for _, e := range evs {
			if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED {
				break
			}
			if e.GetEventType() == enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED {
				t.Fatalf("episode scheduled (event %d) before the approval", e.GetEventId())
			}
		}
	})

	t.Run("SecondResumeNotExpected", func(t *testing.T) {
		mustErr(t, call(t, ana1, "resume_eval", acResumeArgs(w, "approve", map[string]any{"comment": "go"})), jobcore.CodeInputNotExpected)
		if n := acCount(acHistory(t, b, v.JobID), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED); n != 1 {
			t.Errorf("history has %d UpdateAccepted events after a repeated resume, want 1", n)
		}
	})

	t.Run("StewardApprovesApproverRequest", func(t *testing.T) {
		w2 := acAwaitInput(t, ana0, v2.Handle, authz.ApproverApprover)
		st := b.session(steward, 1, "")
		sv := mustView(t, call(t, st, "get_eval", map[string]any{"handle": v2.Handle}))
		if sv.Status != workflows.StatusAwaitingInput {
			t.Fatalf("steward's view status %s", sv.Status)
		}
		if sv.NeedsInput == nil || sv.NeedsInput.InputID != w2.NeedsInput.InputID || sv.NeedsInput.ScopeDigest != w2.NeedsInput.ScopeDigest {
			t.Fatalf("steward and owner see different input requests: %+v vs %+v", sv.NeedsInput, w2.NeedsInput)
		}
		mustView(t, call(t, st, "resume_eval", acResumeArgs(sv, "approve", nil)))
		done := waitStatus(t, ana1, v2.Handle, workflows.StatusSucceeded, 60*time.Second)
		if res := acResult(t, done); res.ApprovedBy != "steward" {
			t.Fatalf("approved_by = %q, want steward", res.ApprovedBy)
		}
		// Once nothing waits for an approver, the steward no longer sees the job.
		mustErr(t, call(t, st, "get_eval", map[string]any{"handle": v2.Handle}), jobcore.CodeNotFound)
	})
}

func TestApprovalReject(t *testing.T) {
	t.Parallel()
	b, cs, v, w := acAwaitingOwner(t)

	mustView(t, call(t, b.session(ana, 1, ""), "resume_eval", acResumeArgs(w, "reject", map[string]any{"comment": "too expensive"})))
	done := waitStatus(t, cs, v.Handle, workflows.StatusCancelled, 30*time.Second)
	if done.Error == nil || done.Error.Code != workflows.ErrCodeRejected {
		t.Fatalf("error = %+v, want code rejected", done.Error)
	}
	if !strings.Contains(done.Error.Message, "too expensive") || !strings.Contains(done.Error.Message, "ana") {
		t.Errorf("error message %q does not carry who rejected and why", done.Error.Message)
	}
	if done.NeedsInput != nil || done.Result != nil || done.PollAfterMS != 0 {
		t.Errorf("final view: needs_input=%v result=%v poll_after_ms=%d", done.NeedsInput, done.Result, done.PollAfterMS)
	}
	acWantCounts(t, acHistory(t, b, v.JobID), map[enumspb.EventType]int{
		enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:            0,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: 1,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:        1,
	})
}

func TestApproverOnlySuite(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{suitesJSON: `{"suites":[{"name":"gated","kind":"demo","approval_threshold":1,"approver":"approver"}]}`})
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", acStartArgs(uniqueKey(t), "gated", 2, 0, acFast)))
	w := acAwaitInput(t, cs, v.Handle, authz.ApproverApprover)

	mustErr(t, call(t, cs, "resume_eval", acResumeArgs(w, "approve", nil)), jobcore.CodeForbidden)
	acNoSideEffects(t, b, v.JobID)

	mustView(t, call(t, b.session(steward, 1, ""), "resume_eval", acResumeArgs(w, "approve", nil)))
	done := waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 30*time.Second)
	if res := acResult(t, done); res.ApprovedBy != "steward" || res.Scored != 2 {
		t.Fatalf("result = %+v", res)
	}
}
