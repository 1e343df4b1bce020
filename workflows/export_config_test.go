package workflows

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

func TestExport_ConfigChanged(t *testing.T) {
	// plan(cfg1) reports a change to cfg2; plan(cfg2) plans three parts.
	changedTo := func(digest string, sensitive bool, missing ...string) func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
		return func(_ int, in contract.PlanExportInput) (contract.PlanExportResult, error) {
			if in.ConfigDigest == digest {
				return planOf(digest, 3), nil
			}
			return contract.PlanExportResult{ScopeChanged: true, ConfigDigest: digest, Sensitive: sensitive,
				Missing: missing}, nil
		}
	}

	t.Run("AfterApprovalAsksAgain", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = changedTo(cfg2, true)
		in := exportInput(true)

		first := h.resumeAt(10*time.Minute, "first", h.answer(steward, DecisionApprove))
		var old *NeedsInput
		var midStatuses []Status
		h.env.RegisterDelayedCallback(func() {
			asked := h.askedInputs()
			require.Len(t, asked, 2, "a second input request is open")
			old = asked[0]
			midStatuses = h.statusSeq()
		}, 15*time.Minute)
		oldBoth := h.resumeAt(20*time.Minute, "old-both", func() ResumeRequest {
			return ResumeRequest{Principal: steward, InputID: old.InputID, ScopeDigest: old.ScopeDigest, Decision: DecisionApprove}
		})
		oldID := h.resumeAt(21*time.Minute, "old-id", func() ResumeRequest {
			return ResumeRequest{Principal: steward, InputID: old.InputID, ScopeDigest: h.openInput().ScopeDigest, Decision: DecisionApprove}
		})
		oldDigest := h.resumeAt(22*time.Minute, "old-digest", func() ResumeRequest {
			return ResumeRequest{Principal: steward, InputID: h.openInput().InputID, ScopeDigest: old.ScopeDigest, Decision: DecisionApprove}
		})
		second := h.resumeAt(30*time.Minute, "second", h.answer(dora, DecisionApprove))
		h.execute(in)

		require.True(t, first.accepted, "%v", first.rejectErr)
		assert.Zero(t, first.startedAtDecision)
		for name, o := range map[string]*resumeOutcome{"old-both": oldBoth, "old-id": oldID, "old-digest": oldDigest} {
			assert.False(t, o.accepted, name)
			requireAppErrType(t, o.rejectErr, RejectInputNotExpected)
		}
		require.True(t, second.accepted, "%v", second.rejectErr)
		assert.Zero(t, second.partsAtDecision, "no part ran before the second approval")
		assert.Equal(t, 1, second.plansAtDecision, "only the plan that found the change ran")
		assert.Equal(t, 1, second.startedAtDecision)
		assert.Equal(t, []Status{StatusAwaitingInput, StatusRunning, StatusAwaitingInput}, midStatuses)

		asked := h.askedInputs()
		require.Len(t, asked, 2)
		n1, n2 := asked[0], asked[1]
		assert.Equal(t, Digest(in.Scope(cfg1)), n1.ScopeDigest)
		assert.NotEqual(t, n1.InputID, n2.InputID, "a re-ask opens a new input request")
		assert.Regexp(t, `^approve-2-[0-9a-f]{12}$`, n2.InputID)
		assert.Equal(t, Digest(in.Scope(cfg2)), n2.ScopeDigest, "the new request binds to the new config digest")
		assert.Equal(t, cfg2, n2.Scope["config_digest"])
		assert.Equal(t, authz.ApproverApprover, n2.Approver)
		assert.Contains(t, n2.Prompt, "changed")

		res := h.result()
		assert.Equal(t, "dora", res.ApprovedBy, "the approval of the current scope is the one reported")
		assert.Equal(t, 3*rowsPerPart, res.Manifest.Rows)
		assert.Equal(t, []string{cfg1, cfg2}, h.planDigests())
		require.Len(t, h.parts, 3)
		for _, p := range h.parts {
			assert.Equal(t, cfg2, p.ConfigDigest, "parts read under the new approval's digest")
		}
		assert.Equal(t, []Status{StatusAwaitingInput, StatusRunning, StatusAwaitingInput, StatusRunning, StatusSucceeded},
			h.statusSeq())
		assert.Empty(t, h.deletes)
	})

	t.Run("BecameSensitiveWithoutApproval", func(t *testing.T) {
		// A job that needed no approval at start asks for one when a requested column became sensitive.
		h := newExportHarness(t)
		h.plan = changedTo(cfg2, true)
		in := exportInput(false)
		got := h.resumeAt(time.Hour, "u1", h.answer(steward, DecisionApprove))
		h.execute(in)

		require.True(t, got.accepted, "%v", got.rejectErr)
		assert.Zero(t, got.partsAtDecision)
		assert.Equal(t, 1, got.startedAtDecision)
		n := h.openInput()
		assert.Equal(t, Digest(in.Scope(cfg2)), n.ScopeDigest)
		assert.Equal(t, authz.ApproverApprover, n.Approver)
		res := h.result()
		assert.Equal(t, "steward", res.ApprovedBy)
		assert.Equal(t, []string{cfg1, cfg2}, h.planDigests())
		assert.Equal(t, []Status{StatusRunning, StatusAwaitingInput, StatusRunning, StatusSucceeded}, h.statusSeq())
	})

	t.Run("NotSensitiveReplansSilently", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = changedTo(cfg2, false)
		h.execute(exportInput(false))
		res := h.result()
		assert.Equal(t, 3*rowsPerPart, res.Manifest.Rows)
		assert.Empty(t, h.askedInputs())
		assert.Equal(t, []string{cfg1, cfg2}, h.planDigests())
	})

	t.Run("ApprovedJobAsksAgainEvenIfNoLongerSensitive", func(t *testing.T) {
		// An old confirmation never authorizes a changed dataset.
		h := newExportHarness(t)
		h.plan = changedTo(cfg2, false)
		h.resumeAt(time.Minute, "u1", h.answer(steward, DecisionApprove))
		second := h.resumeAt(time.Hour, "u2", h.answer(steward, DecisionApprove))
		h.execute(exportInput(true))
		require.True(t, second.accepted, "%v", second.rejectErr)
		assert.Zero(t, second.partsAtDecision)
		assert.Len(t, h.askedInputs(), 2)
		h.result()
	})

	t.Run("MissingColumns", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = changedTo(cfg2, false, "email")
		h.execute(exportInput(false))

		appErr := requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeDatasetChanged)
		assert.True(t, appErr.NonRetryable())
		assert.Contains(t, appErr.Message(), "email")
		assert.Equal(t, []string{"PlanExport"}, h.started, "nothing exported")
		assert.Empty(t, h.askedInputs())
		assert.Empty(t, h.children)
		assert.Equal(t, []Status{StatusRunning, StatusFailed}, h.statusSeq())
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, ErrCodeDatasetChanged, je.Code)
		}
	})

	t.Run("MissingColumnsAfterApproval", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = changedTo(cfg2, true, "email")
		h.resumeAt(time.Minute, "u1", h.answer(steward, DecisionApprove))
		h.execute(exportInput(true))
		requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeDatasetChanged)
		assert.Zero(t, h.count("ExportPart"))
		assert.Len(t, h.askedInputs(), 1, "a missing column is not asked about")
	})

	t.Run("KeepsChanging", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(n int, in contract.PlanExportInput) (contract.PlanExportResult, error) {
			return contract.PlanExportResult{ScopeChanged: true, ConfigDigest: fmt.Sprintf("sha256:%d", n)}, nil
		}
		h.execute(exportInput(false))
		appErr := requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeDatasetChanged)
		assert.Contains(t, appErr.Message(), "kept changing")
		assert.Equal(t, exportScopeChangesMax+1, h.count("PlanExport"))
		assert.Zero(t, h.count("ExportPart"))
	})

	t.Run("PartFindsChange", func(t *testing.T) {
		// Approved for cfg1; part 3 finds the config changed. The job re-plans (with cfg1, so
		// the plan reports the change), asks again for cfg2, and only then exports.
		h := newExportHarness(t)
		in := exportInput(true)
		in.Concurrency = 1
		var planned int
		h.plan = func(n int, pin contract.PlanExportInput) (contract.PlanExportResult, error) {
			planned = n
			if n == 1 {
				return planOf(cfg1, 4), nil
			}
			if pin.ConfigDigest == cfg2 {
				return planOf(cfg2, 3), nil
			}
			return contract.PlanExportResult{ScopeChanged: true, ConfigDigest: cfg2, Sensitive: true}, nil
		}
		h.part = func(pin contract.ExportPartInput) (contract.PartResult, error) {
			if pin.ConfigDigest == cfg1 && pin.Part == 3 {
				return contract.PartResult{}, scopeChangedErr()
			}
			return contract.PartResult{Part: pin.Part, Chunks: 1, Rows: rowsPerPart, Bytes: 50}, nil
		}
		first := h.resumeAt(time.Minute, "u1", h.answer(steward, DecisionApprove))
		var midDeletes int
		h.env.RegisterDelayedCallback(func() {
			h.mu.Lock()
			midDeletes = len(h.deletes)
			h.mu.Unlock()
		}, 30*time.Minute)
		second := h.resumeAt(time.Hour, "u2", h.answer(dora, DecisionApprove))
		h.execute(in)

		require.True(t, first.accepted)
		require.True(t, second.accepted, "%v", second.rejectErr)
		assert.Equal(t, 3, second.partsAtDecision, "parts 1-3 under cfg1 only; none after the change until approved")
		assert.Equal(t, 2, second.plansAtDecision)
		assert.Equal(t, 1, midDeletes, "rows read before the change are deleted while the job asks again")
		assert.Equal(t, 3, planned)
		assert.Equal(t, []string{cfg1, cfg1, cfg2}, h.planDigests())

		asked := h.askedInputs()
		require.Len(t, asked, 2)
		assert.Equal(t, Digest(in.Scope(cfg2)), asked[1].ScopeDigest)
		assert.NotEqual(t, asked[0].InputID, asked[1].InputID)

		res := h.result()
		assert.Equal(t, "dora", res.ApprovedBy)
		assert.Equal(t, 3*rowsPerPart, res.Manifest.Rows, "only the rows of the new plan")
		assert.Equal(t, 3*rowsPerPart, h.lastProgress().Done)
		assert.Equal(t, []Status{StatusAwaitingInput, StatusRunning, StatusRunning, StatusAwaitingInput, StatusRunning,
			StatusSucceeded}, h.statusSeq())
		h.mu.Lock()
		defer h.mu.Unlock()
		var digests []string
		for _, p := range h.parts {
			digests = append(digests, fmt.Sprintf("%s#%d", p.ConfigDigest, p.Part))
		}
		assert.Equal(t, []string{cfg1 + "#1", cfg1 + "#2", cfg1 + "#3", cfg2 + "#1", cfg2 + "#2", cfg2 + "#3"}, digests,
			"the ScopeChanged part is not retried and part 4 never starts under cfg1")
		require.Len(t, h.finalizes, 1)
		assert.Len(t, h.finalizes[0].Parts, 3)
		assert.Equal(t, []contract.DeleteExportInput{{JobID: exportJobID, FirstRunID: testRunID}}, h.deletes)
	})

	t.Run("RetryableScopeChangedTypeIsNotRetried", func(t *testing.T) {
		// The retry policy lists the type, so even a part that forgets non-retryable is not retried.
		h := newExportHarness(t)
		h.plan = func(n int, pin contract.PlanExportInput) (contract.PlanExportResult, error) {
			if n == 1 || pin.ConfigDigest == cfg2 {
				return planOf(pin.ConfigDigest, 1), nil
			}
			return contract.PlanExportResult{ScopeChanged: true, ConfigDigest: cfg2}, nil
		}
		h.part = func(pin contract.ExportPartInput) (contract.PartResult, error) {
			if pin.ConfigDigest == cfg1 {
				return contract.PartResult{}, temporal.NewApplicationError("changed", contract.ErrTypeScopeChanged)
			}
			return contract.PartResult{Part: pin.Part, Chunks: 1, Rows: rowsPerPart, Bytes: 50}, nil
		}
		h.execute(exportInput(false))
		h.result()
		assert.Equal(t, 2, h.count("ExportPart"), "one attempt under cfg1, one under cfg2")
	})

	for _, tc := range []struct {
		name   string
		answer string // how the re-ask ends: reject, expire, missing
	}{{"ThenRejected", "reject"}, {"ThenExpired", "expire"}, {"ThenColumnRemoved", "missing"}, {"ThenCancelled", "cancel"}} {
		t.Run("PartFindsChange"+tc.name, func(t *testing.T) {
			// Rows exported before the change must not outlive a job that never finishes.
			h := newExportHarness(t)
			in := exportInput(true)
			in.Approval.Timeout = Duration(time.Hour)
			in.Concurrency = 1
			h.plan = func(n int, pin contract.PlanExportInput) (contract.PlanExportResult, error) {
				if n == 1 {
					return planOf(cfg1, 3), nil
				}
				r := contract.PlanExportResult{ScopeChanged: true, ConfigDigest: cfg2, Sensitive: true}
				if tc.answer == "missing" {
					r.Missing = []string{"email"}
				}
				return r, nil
			}
			h.part = func(pin contract.ExportPartInput) (contract.PartResult, error) {
				if pin.Part == 2 {
					return contract.PartResult{}, scopeChangedErr()
				}
				return contract.PartResult{Part: pin.Part, Chunks: 1, Rows: rowsPerPart, Bytes: 50}, nil
			}
			h.resumeAt(time.Minute, "u1", h.answer(steward, DecisionApprove))
			switch tc.answer {
			case "reject":
				h.resumeAt(30*time.Minute, "u2", h.answer(steward, DecisionReject))
			case "cancel":
				h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 30*time.Minute)
			}
			h.execute(in)

			require.Error(t, h.env.GetWorkflowError())
			assert.Equal(t, 2, h.count("ExportPart"))
			assert.Zero(t, h.count("FinalizeExport"))
			assert.Empty(t, h.children)
			h.mu.Lock()
			defer h.mu.Unlock()
			assert.Contains(t, h.deletes, contract.DeleteExportInput{JobID: exportJobID, FirstRunID: testRunID},
				"the chunks of part 1 are deleted")
		})
	}
}
