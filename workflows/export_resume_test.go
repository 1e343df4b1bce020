package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobgate/jobgate/authz"
)

func TestExport_ResumeValidation(t *testing.T) {
	ownerApprover := authz.Principal{Tenant: "acme", Subject: "ann",
		Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove}}
	readOnlyOwner := authz.Principal{Tenant: "acme", Subject: "ann", Scopes: []authz.Scope{authz.ScopeRead}}
	readOnlyOther := authz.Principal{Tenant: "acme", Subject: "cy", Scopes: []authz.Scope{authz.ScopeRead}}
	strangerApprover := authz.Principal{Tenant: "globex", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove}}

	cases := []struct {
		name      string
		allowSelf bool
		p         authz.Principal
		edit      func(*ResumeRequest)
		wantType  string // rejection type; "" means accepted
		authz     bool   // the rejection comes from authz.Decide
		wantBy    string
	}{
		{name: "OwnerWithApproveScopeFourEyes", p: ownerApprover, wantType: RejectForbidden, authz: true},
		{name: "OwnerWithoutApproveScope", p: owner, wantType: RejectForbidden, authz: true},
		{name: "OwnerReadOnly", p: readOnlyOwner, wantType: RejectForbidden, authz: true},
		{name: "OtherUserReadOnly", p: readOnlyOther, wantType: RejectNotFound, authz: true},
		{name: "OtherUserWriter", p: bo, wantType: RejectNotFound, authz: true},
		{name: "OtherTenantAllScopes", p: stranger, wantType: RejectNotFound, authz: true},
		{name: "OtherTenantApprover", p: strangerApprover, wantType: RejectNotFound, authz: true},
		{name: "InvalidPrincipal", p: authz.Principal{Subject: "steward", Scopes: steward.Scopes},
			wantType: RejectNotFound, authz: true},
		{name: "AllowSelfOwnerApproves", allowSelf: true, p: ownerApprover, wantBy: "ann"},
		{name: "AllowSelfOwnerStillNeedsApproveScope", allowSelf: true, p: owner, wantType: RejectForbidden, authz: true},
		{name: "AllowSelfOtherTenant", allowSelf: true, p: stranger, wantType: RejectNotFound, authz: true},
		{name: "WrongInputID", p: steward, edit: func(r *ResumeRequest) { r.InputID = "approve-000000000000" },
			wantType: RejectInputNotExpected},
		{name: "EmptyInputID", p: steward, edit: func(r *ResumeRequest) { r.InputID = "" }, wantType: RejectInputNotExpected},
		{name: "WrongScopeDigest", p: steward, edit: func(r *ResumeRequest) {
			r.ScopeDigest = Digest(exportInput(true).Scope(cfg2)) // the same job over another config
		}, wantType: RejectInputNotExpected},
		{name: "ArgsDigestIsNotScopeDigest", p: steward, edit: func(r *ResumeRequest) {
			r.ScopeDigest = Digest(exportInput(true).Args)
		}, wantType: RejectInputNotExpected},
		{name: "UnknownDecision", p: steward, edit: func(r *ResumeRequest) { r.Decision = "maybe" }, wantType: RejectInvalidArgument},
		{name: "Steward", p: steward, wantBy: "steward"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.authz {
				// The expectation is what the policy says; the validator must not decide otherwise.
				job := PolicyJob("acme", "ann", &NeedsInput{Approver: authz.ApproverApprover, AllowSelf: c.allowSelf})
				require.Equal(t, c.wantType, authz.Decide(c.p, authz.ActionResume, job).String())
			}
			h := newExportHarness(t)
			in := exportInput(true)
			in.Approval.AllowSelf = c.allowSelf
			got := h.resumeAt(10*time.Minute, "bad", editedAnswer(c.p, c.edit)(h.jobHarness))
			var fix *resumeOutcome
			var statusesAfterReject []Status
			if c.wantType != "" {
				h.env.RegisterDelayedCallback(func() { statusesAfterReject = h.statusSeq() }, 15*time.Minute)
				// After the rejection the request is still open: a valid answer goes through.
				fix = h.resumeAt(20*time.Minute, "good", h.answer(steward, DecisionApprove))
			}
			h.execute(in)

			if c.wantType == "" {
				require.True(t, got.accepted, "rejected: %v", got.rejectErr)
				assert.Zero(t, got.startedAtDecision)
				res := h.result()
				assert.Equal(t, c.wantBy, res.ApprovedBy)
				assert.Equal(t, c.allowSelf, h.openInput().AllowSelf)
				return
			}
			appErr := requireRefusedThenFixed(t, got, fix, c.wantType)
			if c.name == "OwnerWithApproveScopeFourEyes" {
				assert.Contains(t, appErr.Message(), "four eyes")
			}
			assert.Equal(t, []Status{StatusAwaitingInput}, statusesAfterReject, "a rejected answer leaves the job waiting")
			res := h.result()
			assert.Equal(t, "steward", res.ApprovedBy)
			assert.Len(t, h.askedInputs(), 1, "a rejected answer does not re-open the request")
		})
	}

	t.Run("SecondResumeAfterApproval", func(t *testing.T) {
		h := newExportHarness(t)
		h.partMock.After(time.Minute)
		first := h.resumeAt(10*time.Minute, "u1", h.answer(steward, DecisionApprove))
		second := h.resumeAt(10*time.Minute+time.Second, "u2", h.answer(dora, DecisionReject))
		h.execute(exportInput(true))
		require.True(t, first.accepted)
		assert.False(t, second.accepted)
		requireAppErrType(t, second.rejectErr, RejectNotFound) // no open approver request: dora cannot see the job
		assert.Equal(t, "steward", h.result().ApprovedBy)
	})
}

func TestExport_RejectAndExpiry(t *testing.T) {
	t.Run("Reject", func(t *testing.T) {
		h := newExportHarness(t)
		got := h.resumeAt(5*time.Minute, "u1", func() ResumeRequest {
			r := h.answer(steward, DecisionReject)()
			r.Comment = "purpose does not justify email"
			return r
		})
		h.execute(exportInput(true))

		h.requireRejected(got, "steward", "purpose does not justify email")
		assert.Zero(t, h.count(""), "a rejected export runs no activity at all")
		assert.Empty(t, h.children)
	})

	t.Run("Expiry", func(t *testing.T) {
		h := newExportHarness(t)
		in := exportInput(true)
		in.Approval.Timeout = Duration(2 * time.Hour)
		start := h.env.Now()
		late := h.resumeAt(2*time.Hour+time.Minute, "late", h.answer(steward, DecisionApprove))
		h.execute(in)

		appErr := requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeInputExpired)
		assert.True(t, appErr.NonRetryable())
		assert.Zero(t, h.count(""), "an expired export runs no activity at all")
		assert.True(t, start.Add(2*time.Hour).Equal(h.openInput().ExpiresAt))
		assert.Equal(t, []Status{StatusAwaitingInput, StatusFailed}, h.statusSeq())
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, ErrCodeInputExpired, je.Code)
		}
		assert.False(t, late.accepted, "an answer after expiry is never accepted")
		v, ok := h.lastMemo(MemoNeedsInput)
		require.True(t, ok)
		assert.Nil(t, v)
	})

	t.Run("CancelWhileAwaitingApproval", func(t *testing.T) {
		h := newExportHarness(t)
		h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 10*time.Minute)
		late := h.resumeAt(11*time.Minute, "late", h.answer(steward, DecisionApprove))
		h.execute(exportInput(true))

		requireCanceled(t, h.env.GetWorkflowError())
		assert.Zero(t, h.count(""), "nothing was read, nothing to delete")
		seq := h.statusSeq()
		require.NotEmpty(t, seq)
		assert.Equal(t, StatusAwaitingInput, seq[0])
		assert.Equal(t, StatusCancelled, seq[len(seq)-1], "status sequence %v", seq)
		assert.NotContains(t, seq, StatusRunning)
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, ErrCodeCancelled, je.Code)
		}
		assert.False(t, late.accepted)
	})
}
