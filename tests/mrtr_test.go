package tests

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// mrtrSession connects a 2026-07-28 go-sdk client as p to replica i. With elicit set it
// declares elicitation (per request, as 2026 clients do); manual turns off the SDK's automatic
// retry loop so the test sees input_required results and retries wherever it likes.
func (b *testBundle) mrtrSession(p principal, i int, elicit func(*mcp.ElicitRequest) (*mcp.ElicitResult, error), manual bool) *mcp.ClientSession {
	b.t.Helper()
	opts := &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: manual}}
	if elicit != nil {
		opts.ElicitationHandler = func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return elicit(r) }
	}
	hc := &http.Client{Transport: bearerRT{token: b.token(p), base: http.DefaultTransport}, Timeout: 30 * time.Second}
	c := mcp.NewClient(&mcp.Implementation{Name: "jobgate-mrtr-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url(i), HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	must(b.t, err)
	b.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func rawCall(t testing.TB, cs *mcp.ClientSession, params *mcp.CallToolParams) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	must(t, err)
	return res
}

func neverCalled(*mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	panic("elicitation handler called in manual mode")
}

// acceptedUpdates counts resume updates that reached the job's history.
func (b *testBundle) acceptedUpdates(t testing.TB, jobID string) int {
	t.Helper()
	return acCount(acHistory(t, b, jobID), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
}

// TestMRTRApproval: seed 004's MRTR rows. The steward's 2026 client gets the export's approval as
// an elicitation from get_export on one replica and answers on the other; altered, foreign,
// expired or tampered state is refused and nothing reaches history before a valid answer.
func TestMRTRApproval(t *testing.T) {
	t.Parallel()
	b, csAna, v, w := exAwaiting(t, "csv", "id", "email")
	args := map[string]any{"handle": w.Handle}

	asked := rawCall(t, b.mrtrSession(steward, 0, neverCalled, true), &mcp.CallToolParams{Name: "get_export", Arguments: args})
	el, ok := asked.InputRequests[jobcore.InputKeyApproval].(*mcp.ElicitParams)
	if !asked.NeedsInput() || !ok || asked.RequestState == "" || asked.StructuredContent != nil || len(asked.Content) != 0 {
		t.Fatalf("want one elicitation and a request state, got %+v", asked)
	}
	if el.Mode != "form" || !strings.Contains(el.Message, "quarterly churn analysis") || !strings.Contains(el.Message, "email") {
		t.Fatalf("elicitation: %+v", el)
	}
	if n := b.acceptedUpdates(t, v.JobID); n != 0 {
		t.Fatalf("%d updates in history before any answer", n)
	}
	answer := func(action, decision string) mcp.InputResponseMap {
		r := &mcp.ElicitResult{Action: action}
		if decision != "" {
			r.Content = map[string]any{"decision": decision, "comment": "checked"}
		}
		return mcp.InputResponseMap{jobcore.InputKeyApproval: r}
	}
	retry := func(cs *mcp.ClientSession, state string, resp mcp.InputResponseMap, a map[string]any) outcome {
		t.Helper()
		return parseOutcome(t, "get_export", rawCall(t, cs, &mcp.CallToolParams{Name: "get_export", Arguments: a,
			InputResponses: resp, RequestState: state}))
	}
	other := b.mrtrSession(steward, 1, neverCalled, true)

	t.Run("TamperedState", func(t *testing.T) {
		s := asked.RequestState
		mustErr(t, retry(other, s[:len(s)-2]+"AA", answer("accept", "approve"), args), jobcore.CodeInvalidArgument)
	})
	t.Run("OtherPrincipal", func(t *testing.T) {
		steward2 := principal{"acme", "steward2", steward.scopes}
		mustErr(t, retry(b.mrtrSession(steward2, 1, neverCalled, true), asked.RequestState, answer("accept", "approve"), args), jobcore.CodeNotFound)
	})
	t.Run("AlteredScope", func(t *testing.T) {
		st, err := b.keys.OpenState(asked.RequestState, time.Now())
		must(t, err)
		st.ScopeDigest = "sha256:" + strings.Repeat("1", 64)
		mustErr(t, retry(other, b.keys.SealState(st), answer("accept", "approve"), args), jobcore.CodeInputNotExpected)
	})
	t.Run("Expired", func(t *testing.T) {
		st, err := b.keys.OpenState(asked.RequestState, time.Now())
		must(t, err)
		st.Expiry = time.Now().Add(-time.Minute)
		mustErr(t, retry(other, b.keys.SealState(st), answer("accept", "approve"), args), jobcore.CodeInputNotExpected)
	})
	t.Run("OtherCall", func(t *testing.T) {
		// Another valid handle of the same job is another call's arguments.
		h2 := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: v.JobID, Kind: "export", Expiry: time.Now().Add(2 * time.Hour)})
		mustErr(t, retry(other, asked.RequestState, answer("accept", "approve"), map[string]any{"handle": h2}), jobcore.CodeInvalidArgument)
	})
	t.Run("Declined", func(t *testing.T) {
		o := retry(other, asked.RequestState, answer("decline", ""), args)
		if o.View == nil || o.View.Status != workflows.StatusAwaitingInput || !strings.Contains(o.View.Note, "nothing changed") {
			t.Fatalf("declined: %+v", o)
		}
	})
	if n := b.acceptedUpdates(t, v.JobID); n != 0 {
		t.Fatalf("%d updates in history after refused answers", n)
	}
	t.Run("AnsweredOnOtherReplica", func(t *testing.T) {
		o := retry(other, asked.RequestState, answer("accept", "approve"), args)
		if o.View == nil || o.View.Status == workflows.StatusAwaitingInput || !strings.Contains(o.View.Note, "approve") {
			t.Fatalf("answer: %+v", o)
		}
		if n := b.acceptedUpdates(t, v.JobID); n != 1 {
			t.Fatalf("%d accepted updates, want 1", n)
		}
		// The same retry again (a lost response) is the same update, deduplicated.
		again := retry(b.mrtrSession(steward, 0, neverCalled, true), asked.RequestState, answer("accept", "approve"), args)
		if again.Err != nil && again.Err.Code != jobcore.CodeInputNotExpected && again.Err.Code != jobcore.CodeNotFound {
			t.Fatalf("repeated answer: %+v", again.Err)
		}
		if n := b.acceptedUpdates(t, v.JobID); n != 1 {
			t.Fatalf("%d accepted updates after a repeated answer, want 1", n)
		}
	})
	done := exResult(t, exWait(t, csAna, v.Handle, workflows.StatusSucceeded, 60*time.Second))
	if done.ApprovedBy != "steward" {
		t.Fatalf("approved_by %q", done.ApprovedBy)
	}
	// The accepted answer was sealed by the frontend and records its surface.
	if r := acceptedResume(t, b, v.JobID); r.Seal == "" || r.Surface != workflows.SurfaceMRTR || r.Comment != "checked" {
		t.Fatalf("accepted resume: %+v", r)
	}
}

// TestMRTRWhoIsAsked: only a 2026 caller who may answer and declared elicitation is asked.
func TestMRTRWhoIsAsked(t *testing.T) {
	t.Parallel()
	b, _, _, w := exAwaiting(t, "csv", "id", "email")
	args := map[string]any{"handle": w.Handle}
	for name, cs := range map[string]*mcp.ClientSession{
		"OwnerUnderFourEyes":      b.mrtrSession(ana, 0, neverCalled, true),
		"NoElicitationCapability": b.mrtrSession(steward, 0, nil, true),
		"OlderClient2025_06_18":   b.session(steward, 1, "2025-06-18"),
		"OlderClient2025_11_25":   b.session(steward, 1, "2025-11-25"),
		"AdminCannotAnswerEither": b.mrtrSession(ops, 1, neverCalled, true),
	} {
		t.Run(name, func(t *testing.T) {
			res := rawCall(t, cs, &mcp.CallToolParams{Name: "get_export", Arguments: args})
			if res.NeedsInput() {
				t.Fatalf("%s was asked: %+v", name, res.InputRequests)
			}
			o := parseOutcome(t, "get_export", res)
			if o.View == nil || o.View.Status != workflows.StatusAwaitingInput || o.View.NeedsInput == nil {
				t.Fatalf("%s: %+v", name, o)
			}
		})
	}
}

// TestMRTRAutomaticClient: the go-sdk client's own MRTR loop (as shipped) answers the owner's
// approval of a big eval through its elicitation handler, within one start_eval call.
func TestMRTRAutomaticClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var asked atomic.Int32
	cs := b.mrtrSession(ana, 0, func(r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked.Add(1)
		if !strings.Contains(r.Params.Message, "150 episodes") {
			t.Errorf("elicitation message: %q", r.Params.Message)
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}, nil
	}, false)
	o := call(t, cs, "start_eval", startArgs(uniqueKey(t), 150, map[string]any{"episode_ms": 0}))
	v := mustView(t, o)
	if asked.Load() != 1 || v.Status == workflows.StatusAwaitingInput || !strings.Contains(v.Note, "approve") || v.Created == nil {
		t.Fatalf("start with automatic MRTR: asked %d, view %+v", asked.Load(), v)
	}
	waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second)
}
