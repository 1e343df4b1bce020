package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
