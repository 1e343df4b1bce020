package workflows

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// testVerifier stands in for the frontend's resume keys: a "seal" is testSealPrefix + the JSON
// of the ResumeSeal. The workflows' own checks (which fields must match, expiry against
// workflow time, fail closed without a verifier) are what these tests exercise; the HMAC format
// is frontend/handle's, tested there and end to end in tests/.
type testVerifier struct{}

const (
	testSealPrefix = "test-seal:"
	// noSeal asks sealed to send the request without any seal.
	noSeal = "\x00no-seal"
)

func (testVerifier) OpenResumeSeal(seal string, now time.Time) (ResumeSeal, error) {
	var s ResumeSeal
	if !strings.HasPrefix(seal, testSealPrefix) || json.Unmarshal([]byte(seal[len(testSealPrefix):]), &s) != nil {
		return ResumeSeal{}, errors.New("malformed or badly signed")
	}
	if !now.Before(s.Expiry) {
		return ResumeSeal{}, errors.New("expired")
	}
	return s, nil
}

var testWorkflows = &Workflows{Resume: testVerifier{}}

// farFuture is the expiry of seals that must not expire while a test's clock skips ahead.
var farFuture = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)

// sealOf seals req for run runID of workflow id, as a frontend would.
func sealOf(id, runID string, req ResumeRequest, exp time.Time) string {
	b, _ := json.Marshal(ResumeSeal{WorkflowID: id, RunID: runID, InputID: req.InputID, ScopeDigest: req.ScopeDigest,
		Principal: req.Principal, Decision: req.Decision, CommentDigest: CommentDigest(req.Comment), Surface: req.Surface,
		SignedInWith: req.SignedInWith, Identity: req.Identity, MeaningDigest: MeaningDigest(req.Meaning),
		ExtendBy: ExtendByText(req.ExtendBy), Expiry: exp})
	return testSealPrefix + string(b)
}

// sealed gives req the surface and seal a frontend's resume_* would (unless req carries a seal
// of its own, or noSeal).
func sealed(id string, req ResumeRequest) ResumeRequest {
	switch req.Seal {
	case noSeal:
		req.Seal = ""
		return req
	case "":
		if req.Surface == "" {
			req.Surface, req.SignedInWith = SurfaceTool, SignedInBearerJWT
		}
		req.Seal = sealOf(id, testRunID, req, farFuture)
	}
	return req
}

// TestResumeSeal_Refused: a resume whose seal is missing, forged, expired or made for anything
// else than exactly this run, request, principal, decision and comment is rejected by the
// validator (so it never reaches history), nothing runs, and the request stays open for the
// frontend's genuine answer.
func TestResumeSeal_Refused(t *testing.T) {
	withSeal := func(edit func(*ResumeRequest), sealEdit func(id, run *string, r *ResumeRequest, exp *time.Time)) func(h *harness) func() ResumeRequest {
		return func(h *harness) func() ResumeRequest {
			return func() ResumeRequest {
				r := h.answer(owner, DecisionApprove)()
				r.Surface, r.SignedInWith = SurfaceTool, SignedInBearerJWT
				id, run, sr, exp := testJobID, testRunID, r, farFuture
				sealEdit(&id, &run, &sr, &exp)
				r.Seal = sealOf(id, run, sr, exp)
				edit(&r)
				return r
			}
		}
	}
	none := func(*ResumeRequest) {}
	cases := map[string]func(h *harness) func() ResumeRequest{
		"Unsealed": withSeal(func(r *ResumeRequest) { r.Seal = noSeal }, func(*string, *string, *ResumeRequest, *time.Time) {}),
		"Garbage":  withSeal(func(r *ResumeRequest) { r.Seal = "jgr1.k1.e30.AAAA" }, func(*string, *string, *ResumeRequest, *time.Time) {}),
		"OtherJob": withSeal(none, func(id, _ *string, _ *ResumeRequest, _ *time.Time) { *id = "acme/eval/k2" }),
		"OtherRun": withSeal(none, func(_, run *string, _ *ResumeRequest, _ *time.Time) { *run = "an-earlier-run" }),
		"Expired": withSeal(none, func(_, _ *string, _ *ResumeRequest, exp *time.Time) {
			*exp = time.Now().Add(-time.Minute)
		}),
		"AlteredDecision": withSeal(func(r *ResumeRequest) { r.Decision = DecisionApprove },
			func(_, _ *string, r *ResumeRequest, _ *time.Time) { r.Decision = DecisionReject }),
		"AlteredPrincipal": withSeal(func(r *ResumeRequest) { r.Principal = owner },
			func(_, _ *string, r *ResumeRequest, _ *time.Time) { r.Principal = bo }),
		"AlteredScopes": withSeal(func(r *ResumeRequest) { r.Principal = owner },
			func(_, _ *string, r *ResumeRequest, _ *time.Time) {
				r.Principal = authz.Principal{Tenant: "acme", Subject: "ann", Scopes: []authz.Scope{authz.ScopeRead}}
			}),
		"AlteredDigest":  withSeal(none, func(_, _ *string, r *ResumeRequest, _ *time.Time) { r.ScopeDigest = "sha256:00" }),
		"AlteredInputID": withSeal(none, func(_, _ *string, r *ResumeRequest, _ *time.Time) { r.InputID = "approve-000000000000" }),
		"AlteredComment": withSeal(func(r *ResumeRequest) { r.Comment = "approved by the board" }, func(*string, *string, *ResumeRequest, *time.Time) {}),
		"AlteredSurface": withSeal(func(r *ResumeRequest) { r.Surface = SurfaceTasks }, func(*string, *string, *ResumeRequest, *time.Time) {}),
		"AlteredIssuer":  withSeal(func(r *ResumeRequest) { r.Issuer = "https://evil.example" }, func(*string, *string, *ResumeRequest, *time.Time) {}),
		"AlteredName":    withSeal(func(r *ResumeRequest) { r.Name = "Someone Else" }, func(*string, *string, *ResumeRequest, *time.Time) {}),
		"AlteredEmail":   withSeal(func(r *ResumeRequest) { r.Email = "boss@acme.example" }, func(*string, *string, *ResumeRequest, *time.Time) {}),
		"AlteredAuthTime": withSeal(func(r *ResumeRequest) { r.AuthTime = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) },
			func(*string, *string, *ResumeRequest, *time.Time) {}),
		"AlteredAMR":     withSeal(func(r *ResumeRequest) { r.AMR = []string{"mfa"} }, func(*string, *string, *ResumeRequest, *time.Time) {}),
		"AlteredACR":     withSeal(func(r *ResumeRequest) { r.ACR = "gold" }, func(*string, *string, *ResumeRequest, *time.Time) {}),
		"AlteredMeaning": withSeal(func(r *ResumeRequest) { r.Meaning = "Allow nothing" }, func(*string, *string, *ResumeRequest, *time.Time) {}),
	}
	// The refusal names the field that differs from the seal.
	wantField := map[string]string{"AlteredIssuer": "issuer", "AlteredName": "name", "AlteredEmail": "email",
		"AlteredAuthTime": "auth_time", "AlteredAMR": "amr", "AlteredACR": "acr", "AlteredMeaning": "meaning",
		"AlteredComment": "comment", "AlteredSurface": "surface", "AlteredDecision": "decision"}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).
				Return(contract.EpisodeResult{Score: 0.7, Passed: true}, nil)
			bad := h.resumeAt(10*time.Minute, "forged", req(h))
			var awaitingAtBad bool
			h.env.RegisterDelayedCallback(func() {
				seq := h.statusSeq()
				awaitingAtBad = len(seq) > 0 && seq[len(seq)-1] == StatusAwaitingInput
			},
				15*time.Minute)
			good := h.resumeAt(20*time.Minute, "good", h.answer(owner, DecisionApprove))
			h.execute(evalInput(6, 2))

			assert.False(t, bad.accepted, "a resume without a matching seal was accepted")
			requireAppErrType(t, bad.rejectErr, RejectUnsealed)
			if f, ok := wantField[name]; ok {
				assert.ErrorContains(t, bad.rejectErr, "does not match its "+f)
			}
			assert.Zero(t, bad.startedAtDecision, "episodes ran before the genuine answer")
			assert.True(t, awaitingAtBad, "the job must still await input after the refused resume")
			require.True(t, good.accepted, "the frontend's answer after a refused one: %v", good.rejectErr)
			res := h.result()
			assert.Equal(t, "ann", res.ApprovedBy)
		})
	}
}

// TestResumeSeal_NoKeysFailClosed: a worker without resume keys refuses every resume, even a
// correctly sealed one; the job keeps waiting (here until its approval expires).
func TestResumeSeal_NoKeysFailClosed(t *testing.T) {
	h := newHarnessWith(t, &Workflows{})
	got := h.resumeAt(10*time.Minute, "u1", h.answer(owner, DecisionApprove))
	h.execute(evalInput(6, 2))
	assert.False(t, got.accepted)
	requireAppErrType(t, got.rejectErr, RejectUnsealed)
	assert.Contains(t, got.rejectErr.Error(), "no resume keys")
	assert.Zero(t, h.startedCount())
	requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeInputExpired)
}

// TestTenantMismatch: a job whose input names another tenant than its workflow ID fails at
// once, non-retryable, before it records anything or runs any activity.
func TestTenantMismatch(t *testing.T) {
	for name, tenant := range map[string]string{"OtherTenant": "globex", "Prefix": "acm", "Empty": ""} {
		t.Run("Eval"+name, func(t *testing.T) {
			h := newHarness(t) // workflow ID acme/eval/k1
			in := evalInput(2, 1)
			in.Approval.Threshold = 0
			in.Tenant = tenant
			h.execute(in)
			err := h.env.GetWorkflowError()
			requireAppErrType(t, err, ErrCodeTenantMismatch)
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(err, &appErr))
			assert.True(t, appErr.NonRetryable())
			assert.Zero(t, h.startedCount(), "activities started")
			assert.Empty(t, h.statuses, "JobStatus upserted")
			assert.Empty(t, h.memos, "memo upserted")
		})
	}
	t.Run("Export", func(t *testing.T) {
		h := newExportHarness(t) // workflow ID acme/export/k1
		in := exportInput(false)
		in.Tenant = "globex"
		h.execute(in)
		requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeTenantMismatch)
		assert.Zero(t, h.count(""), "activities started")
	})
}
