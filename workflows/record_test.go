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

// TestExport_DecisionRecordFull: everything a surface knows of the approver (identity, surface,
// sign-in, comment, the meaning shown) reaches the decision record in the result and the
// manifest's finalize input, as sealed.
func TestExport_DecisionRecordFull(t *testing.T) {
	h := newExportHarness(t)
	authAt := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	id := Identity{Issuer: "https://idp.acme.example", Name: "Stew Ard", Email: "steward@acme.example",
		AuthTime: authAt, AMR: []string{"pwd", "otp"}, ACR: "urn:acme:loa:2"}
	got := h.resumeAt(30*time.Minute, "u1", func() ResumeRequest {
		r := h.answer(steward, DecisionApprove)()
		r.Surface, r.SignedInWith = SurfacePage, "oidc-session"
		r.Identity = id
		r.Comment = "fine for the Q3 mailing"
		r.Meaning = h.openInput().Prompt
		return r
	})
	h.execute(exportInput(true))
	require.True(t, got.accepted, "rejected: %v", got.rejectErr)
	d := h.result().Decision
	require.NotNil(t, d)
	assert.Equal(t, id, d.Identity)
	assert.Equal(t, SurfacePage, d.Surface)
	assert.Equal(t, "oidc-session", d.SignedInWith)
	assert.Equal(t, "fine for the Q3 mailing", d.Comment)
	assert.Equal(t, h.openInput().Prompt, d.Prompt)
	assert.Equal(t, exportJobID, d.WorkflowID)
	assert.Equal(t, testRunID, d.RunID)
	require.NotEmpty(t, h.finalizes)
	fin := h.finalizes[len(h.finalizes)-1]
	assert.Equal(t, d, fin.Decision)
	// The approved scope goes to the manifest: its digest is the record's.
	require.NotNil(t, fin.Scope)
	assert.Equal(t, d.ScopeDigest, Digest(*fin.Scope))
	assert.Equal(t, []string{"id", "email", "plan"}, fin.Scope.Columns)
}

// TestExport_StaleMeaningRefused: an answer whose surface showed another meaning than the
// open request's (a page left open while the request changed) is refused before history with
// a message saying so; the request stays open for a current answer.
func TestExport_StaleMeaningRefused(t *testing.T) {
	h := newExportHarness(t)
	bad := h.resumeAt(10*time.Minute, "stale", func() ResumeRequest {
		r := h.answer(steward, DecisionApprove)()
		r.Meaning = "Allow ann@acme to export id of customers"
		return r
	})
	good := h.resumeAt(20*time.Minute, "good", h.answer(steward, DecisionApprove))
	h.execute(exportInput(true))
	assert.False(t, bad.accepted)
	requireAppErrType(t, bad.rejectErr, RejectInputNotExpected)
	assert.ErrorContains(t, bad.rejectErr, "meaning")
	require.True(t, good.accepted, "the current answer: %v", good.rejectErr)
}

// TestEval_DecisionRecordInResult: an eval that waited for an approver keeps the approval's
// record (surface, identity, the meaning shown, the comment) in its result, across
// continue-as-new, as exports do.
func TestEval_DecisionRecordInResult(t *testing.T) {
	id := Identity{Issuer: "https://idp.acme.example", Email: "steward@acme.example", AMR: []string{"pwd"}}
	in := evalInput(6, 2)
	in.Approval.Approver = authz.ApproverApprover
	in.EpisodesPerRun = 4 // the record must survive continue-as-new
	var got *resumeOutcome
	runs, hs := runToCompletion(t, in, func(h *harness) {
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil)
		if got != nil {
			return // only the first run asks
		}
		got = h.resumeAt(10*time.Minute, "u1", func() ResumeRequest {
			r := h.answer(steward, DecisionApprove)()
			r.Surface, r.SignedInWith, r.Identity = SurfacePage, "oidc-session", id
			r.Comment = "budget ok"
			return r
		})
	})
	require.Len(t, runs, 2, "the run continues as new once")
	require.True(t, got.accepted, "rejected: %v", got.rejectErr)
	res := hs[1].result()
	require.NotNil(t, res.Decision, "an approved eval's result carries its decision record")
	d := res.Decision
	assert.Equal(t, DecisionApprove, d.Decision)
	assert.Equal(t, "steward", d.By)
	assert.Equal(t, SurfacePage, d.Surface)
	assert.Equal(t, id, d.Identity)
	assert.Equal(t, "budget ok", d.Comment)
	assert.Equal(t, hs[0].openInput().Prompt, d.Prompt)
	assert.Equal(t, hs[0].openInput().ScopeDigest, d.ScopeDigest)
	assert.NotEmpty(t, d.Seal)
	assert.Equal(t, "steward", res.ApprovedBy)
}

// TestRejection_DecisionRecordInMemo: a rejected job (eval or export) keeps the rejecting
// answer's record in its memo, next to the job error, so get_* can show who rejected, how and why.
func TestRejection_DecisionRecordInMemo(t *testing.T) {
	check := func(t *testing.T, h *jobHarness, by, comment string) {
		v, ok := h.lastMemo(MemoDecision)
		require.True(t, ok, "no decision record in the memo of a rejected job")
		d := v.(*DecisionRecord)
		assert.Equal(t, DecisionReject, d.Decision)
		assert.Equal(t, by, d.By)
		assert.Equal(t, comment, d.Comment)
		assert.Equal(t, h.openInput().ScopeDigest, d.ScopeDigest)
		assert.NotEmpty(t, d.Seal)
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, ErrCodeRejected, je.Code)
		}
	}
	t.Run("Eval", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil).Maybe()
		h.resumeAt(5*time.Minute, "u1", func() ResumeRequest {
			r := h.answer(owner, DecisionReject)()
			r.Comment = "too expensive"
			return r
		})
		h.execute(evalInput(6, 2))
		check(t, h.jobHarness, "ann", "too expensive")
	})
	t.Run("Export", func(t *testing.T) {
		h := newExportHarness(t)
		h.resumeAt(5*time.Minute, "u1", func() ResumeRequest {
			r := h.answer(steward, DecisionReject)()
			r.Comment = "purpose does not justify email"
			return r
		})
		h.execute(exportInput(true))
		check(t, h.jobHarness, "steward", "purpose does not justify email")
	})
	t.Run("ApprovedHasNone", func(t *testing.T) {
		h := newHarness(t)
		h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
			Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil)
		h.resumeAt(5*time.Minute, "u1", h.answer(owner, DecisionApprove))
		h.execute(evalInput(6, 2))
		_, ok := h.lastMemo(MemoDecision)
		assert.False(t, ok, "only a rejection puts the record in the memo (an approval's is in the result)")
	})
}
