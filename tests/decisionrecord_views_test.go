package tests

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// TestDecisionRecordInViews: the sealed record of an answer is shown by get_* beyond an
// approved export's result: an approver-only eval that was approved shows it as
// result.decision, and an export rejected with a comment shows the rejecting answer's record
// as the job's decision, next to its error.
func TestDecisionRecordInViews(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil)),
		suitesJSON: `{"suites":[{"name":"gated","kind":"demo","approval_threshold":1,"approver":"approver"}]}`})
	csAna, csSteward := b.session(ana, 0, ""), b.session(steward, 1, "")

	ev := mustView(t, call(t, csAna, "start_eval", acStartArgs(uniqueKey(t)+"-eval", "gated", 2, 0, acFast)))
	ex := mustView(t, exStart(t, csAna, uniqueKey(t)+"-export", "csv", []string{"id", "email"}))

	// The eval: approved by the steward through resume_eval.
	w := acAwaitInput(t, csAna, ev.Handle, authz.ApproverApprover)
	mustView(t, call(t, csSteward, "resume_eval", acResumeArgs(w, "approve", map[string]any{"comment": "budget ok"})))
	done := waitStatus(t, csAna, ev.Handle, workflows.StatusSucceeded, 30*time.Second)
	res := acResult(t, done)
	if res.ApprovedBy != "steward" {
		t.Errorf("approved_by = %q", res.ApprovedBy)
	}
	raw, err := json.Marshal(done.Result)
	must(t, err)
	var view jobcore.EvalResultView
	must(t, json.Unmarshal(raw, &view))
	d := view.Decision
	if d == nil || d.Decision != "approve" || d.By != "steward" || d.Surface != workflows.SurfaceTool || !d.Sealed ||
		d.Comment != "budget ok" || d.ScopeDigest != w.NeedsInput.ScopeDigest || d.Meaning != w.NeedsInput.Prompt {
		t.Errorf("get_eval result.decision = %+v", d)
	}
	if done.Decision != nil {
		t.Errorf("a succeeded job has no rejection record on its view: %+v", done.Decision)
	}

	// The export: rejected with a comment.
	x := exWait(t, csAna, ex.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	mustView(t, call(t, csSteward, "resume_export", map[string]any{"handle": x.Handle, "input_id": x.NeedsInput.InputID,
		"scope_digest": x.NeedsInput.ScopeDigest, "decision": "reject", "comment": "email is not needed for churn"}))
	rej := exWait(t, csAna, ex.Handle, workflows.StatusCancelled, 30*time.Second)
	if rej.Error == nil || rej.Error.Code != workflows.ErrCodeRejected {
		t.Fatalf("error = %+v, want code rejected", rej.Error)
	}
	r := rej.Decision
	if r == nil || r.Decision != "reject" || r.By != "steward" || r.Comment != "email is not needed for churn" || !r.Sealed ||
		r.Surface != workflows.SurfaceTool || r.ScopeDigest != x.NeedsInput.ScopeDigest ||
		!strings.HasPrefix(r.Meaning, "Allow ana@acme to export id and **email** of customers") {
		t.Errorf("get_export decision of a rejected export = %+v", r)
	}
}
