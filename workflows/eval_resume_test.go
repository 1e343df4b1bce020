package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

func TestEval_ResumeValidation(t *testing.T) {
	type tc struct {
		name     string
		approver authz.Approver
		req      func(h *jobHarness) func() ResumeRequest
		wantType string // rejection type; "" means accepted
		wantBy   string
	}
	cases := []tc{
		{name: "WrongInputID", approver: authz.ApproverOwner,
			req: editedAnswer(owner, func(r *ResumeRequest) { r.InputID = "approve-000000000000" }), wantType: RejectInputNotExpected},
		{name: "EmptyInputID", approver: authz.ApproverOwner,
			req: editedAnswer(owner, func(r *ResumeRequest) { r.InputID = "" }), wantType: RejectInputNotExpected},
		{name: "WrongScopeDigest", approver: authz.ApproverOwner,
			req: editedAnswer(owner, func(r *ResumeRequest) {
				args := evalInput(600, 2).Args // an approval for a different scope
				r.ScopeDigest = Digest(args)
			}), wantType: RejectInputNotExpected},
		{name: "UnknownDecision", approver: authz.ApproverOwner,
			req: editedAnswer(owner, func(r *ResumeRequest) { r.Decision = "maybe" }), wantType: RejectInvalidArgument},
		{name: "OtherUserOfTenant", approver: authz.ApproverOwner, req: editedAnswer(bo, nil), wantType: RejectNotFound},
		{name: "OtherTenant", approver: authz.ApproverOwner, req: editedAnswer(stranger, nil), wantType: RejectNotFound},
		{name: "InvalidPrincipal", approver: authz.ApproverOwner,
			req: editedAnswer(authz.Principal{Subject: "ann", Scopes: owner.Scopes}, nil), wantType: RejectNotFound},
		{name: "OwnerWithoutWriteScope", approver: authz.ApproverOwner,
			req: editedAnswer(authz.Principal{Tenant: "acme", Subject: "ann", Scopes: []authz.Scope{authz.ScopeRead}}, nil), wantType: RejectForbidden},
		{name: "OwnerOnApproverOnlyRequest", approver: authz.ApproverApprover, req: editedAnswer(owner, nil), wantType: RejectForbidden},
		{name: "OtherUserOnApproverOnlyRequest", approver: authz.ApproverApprover, req: editedAnswer(bo, nil), wantType: RejectNotFound},
		{name: "StewardOnApproverOnlyRequest", approver: authz.ApproverApprover, req: editedAnswer(steward, nil), wantBy: "steward"},
		// jobs:approve reaches only approver requests: an owner request is not the steward's to see.
		{name: "StewardOnOwnerRequest", approver: authz.ApproverOwner, req: editedAnswer(steward, nil), wantType: RejectNotFound},
		{name: "StewardWithWriteOnOwnerRequest", approver: authz.ApproverOwner,
			req: editedAnswer(authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeWrite, authz.ScopeApprove}}, nil), wantType: RejectNotFound},
		{name: "AdminStewardOnOwnerRequest", approver: authz.ApproverOwner,
			req: editedAnswer(authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove, authz.ScopeAdmin}}, nil), wantType: RejectForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
				Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil)
			in := evalInput(6, 2)
			in.Approval.Approver = c.approver
			got := h.resumeAt(10*time.Minute, "bad", c.req(h.jobHarness))
			var fix *resumeOutcome
			if c.wantType != "" {
				// After the rejection the request is still open: a valid answer goes through.
				fixer := owner
				if c.approver == authz.ApproverApprover {
					fixer = steward
				}
				fix = h.resumeAt(20*time.Minute, "good", h.answer(fixer, DecisionApprove))
			}
			h.execute(in)

			if c.wantType == "" {
				require.True(t, got.accepted, "rejected: %v", got.rejectErr)
				assert.Zero(t, got.startedAtDecision)
				res := h.result()
				assert.Equal(t, c.wantBy, res.ApprovedBy)
				return
			}
			requireRefusedThenFixed(t, got, fix, c.wantType)
			res := h.result()
			assert.Equal(t, 6, res.Scored)
			assert.Equal(t, fix.result.By, res.ApprovedBy)
		})
	}

	t.Run("SecondResumeAfterApproval", func(t *testing.T) {
		h := newHarness(t)
		// Slow episodes keep the job running while the second resume arrives.
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			After(time.Minute).Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil)
		first := h.resumeAt(10*time.Minute, "u1", h.answer(owner, DecisionApprove))
		second := h.resumeAt(10*time.Minute+time.Second, "u2", h.answer(owner, DecisionReject))
		h.execute(evalInput(6, 2))

		require.True(t, first.accepted)
		assert.False(t, second.accepted)
		requireAppErrType(t, second.rejectErr, RejectInputNotExpected)
		require.NoError(t, h.env.GetWorkflowError())
	})

	t.Run("ResumeWhenNoInputIsOpen", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			After(time.Minute).Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil)
		got := h.resumeAt(time.Second, "u1", func() ResumeRequest {
			return ResumeRequest{Principal: owner, InputID: "approve-000000000000", ScopeDigest: Digest(evalInput(2, 2).Args), Decision: DecisionApprove}
		})
		h.execute(evalInput(2, 2))
		assert.False(t, got.accepted)
		requireAppErrType(t, got.rejectErr, RejectInputNotExpected)
		require.NoError(t, h.env.GetWorkflowError())
	})
}
