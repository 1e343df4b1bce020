package workflows

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

func TestExport_CancelAndFailures(t *testing.T) {
	t.Run("CancelWhileExporting", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
			return planOf(cfg1, 6), nil
		}
		h.partMock.After(10 * time.Second)
		var partsAtCancel int
		h.env.RegisterDelayedCallback(func() {
			partsAtCancel = h.count("ExportPart")
			h.env.CancelWorkflow()
		}, 15*time.Second)
		h.execute(exportInput(false)) // concurrency 2

		canceled := requireCanceled(t, h.env.GetWorkflowError())
		assert.Contains(t, canceled.Error(), "cancel")
		// 1,2 finished at 10s; 3,4 were running at 15s and were cancelled.
		assert.Equal(t, 4, partsAtCancel)
		assert.Equal(t, 4, h.count("ExportPart"), "no part starts after the cancel")
		assert.Zero(t, h.count("FinalizeExport"))
		assert.Empty(t, h.children)
		h.mu.Lock()
		assert.Equal(t, []contract.DeleteExportInput{{JobID: exportJobID, FirstRunID: testRunID}}, h.deletes, "partial output is deleted")
		h.mu.Unlock()
		assert.Equal(t, "DeleteExport", h.started[len(h.started)-1])
		assert.Equal(t, []Status{StatusRunning, StatusCancelling, StatusCancelled}, h.statusSeq())
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, ErrCodeCancelled, je.Code)
		}
		p := h.lastProgress()
		assert.Equal(t, 2*rowsPerPart, p.Done)
		assert.Equal(t, 6*rowsPerPart, p.Total)
		assert.Equal(t, "rows", p.Unit)
	})

	t.Run("CancelWhileFinalizing", func(t *testing.T) {
		h := newExportHarness(t)
		h.finalizeMock.After(time.Hour)
		h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 10*time.Minute)
		h.execute(exportInput(false))
		requireCanceled(t, h.env.GetWorkflowError())
		assert.Equal(t, 1, h.count("DeleteExport"))
		assert.Empty(t, h.children)
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, ErrCodeCancelled, je.Code)
		}
	})

	for _, tc := range []struct {
		name    string
		errType string
		code    string
	}{
		{"DatasetTooLarge", contract.ErrTypeDatasetTooLarge, ErrCodeDatasetTooLarge},
		{"DatasetMissing", contract.ErrTypeDatasetMissing, ErrCodeDatasetMissing},
	} {
		t.Run("Plan"+tc.name, func(t *testing.T) {
			h := newExportHarness(t)
			msg := "dataset \"customers\": " + tc.name
			h.plan = func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
				// Retryable on purpose: the workflow's retry policy must not retry these types.
				return contract.PlanExportResult{}, temporal.NewApplicationError(msg, tc.errType)
			}
			h.execute(exportInput(false))

			appErr := requireAppErrType(t, h.env.GetWorkflowError(), tc.code)
			assert.True(t, appErr.NonRetryable())
			assert.Equal(t, msg, appErr.Message())
			assert.Equal(t, []string{"PlanExport", "DeleteExport"}, h.started, "not retried; partial output deleted")
			assert.Equal(t, []contract.DeleteExportInput{{JobID: exportJobID, FirstRunID: testRunID}}, h.deletes)
			assert.Equal(t, []Status{StatusRunning, StatusFailed}, h.statusSeq())
			if je := h.lastJobError(); assert.NotNil(t, je) {
				assert.Equal(t, tc.code, je.Code)
				assert.Equal(t, msg, je.Message)
			}
		})
	}

	t.Run("PartKeepsFailing", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
			return planOf(cfg1, 1), nil
		}
		h.part = func(contract.ExportPartInput) (contract.PartResult, error) {
			return contract.PartResult{}, errors.New(`failed to connect to user=svc database=crm: 10.0.0.7:5432: connection refused`)
		}
		h.execute(exportInput(false))
		// The caller sees the code and a fixed message; the driver's error (host, user,
		// database) and the worker's pid@host stay in the log and history.
		appErr := requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeExportFailed)
		assert.Equal(t, MsgExportFailed, appErr.Message())
		if je := h.lastJobError(); assert.NotNil(t, je) {
			assert.Equal(t, JobError{Code: ErrCodeExportFailed, Message: MsgExportFailed}, *je)
		}
		assert.Equal(t, exportActivityMaxAttempts, h.count("ExportPart"))
		assert.Zero(t, h.count("FinalizeExport"))
		assert.Equal(t, 1, h.count("DeleteExport"))
		assert.Equal(t, []Status{StatusRunning, StatusFailed}, h.statusSeq())
	})

	t.Run("TransientPartErrorIsRetried", func(t *testing.T) {
		h := newExportHarness(t)
		var mu sync.Mutex
		attempts := map[int]int{}
		h.part = func(in contract.ExportPartInput) (contract.PartResult, error) {
			mu.Lock()
			attempts[in.Part]++
			n := attempts[in.Part]
			mu.Unlock()
			if in.Part == 2 && n == 1 {
				return contract.PartResult{}, errors.New("worker hiccup")
			}
			return contract.PartResult{Part: in.Part, Chunks: 1, Rows: rowsPerPart, Bytes: 50}, nil
		}
		h.execute(exportInput(false))
		res := h.result()
		assert.Equal(t, 3*rowsPerPart, res.Manifest.Rows)
		assert.Equal(t, 4, h.count("ExportPart"))
		assert.Empty(t, h.deletes)
	})

	t.Run("FinalizeFails", func(t *testing.T) {
		h := newExportHarness(t)
		h.finalize = func(contract.FinalizeExportInput) (contract.Manifest, error) {
			return contract.Manifest{}, temporal.NewNonRetryableApplicationError("part 2: bytes differ", "InvalidArgument", nil)
		}
		h.execute(exportInput(false))
		requireAppErrType(t, h.env.GetWorkflowError(), "export_failed")
		assert.Equal(t, 1, h.count("FinalizeExport"))
		assert.Equal(t, 1, h.count("DeleteExport"))
		assert.Empty(t, h.children, "no retention for an artifact that was never made")
		assert.Equal(t, []Status{StatusRunning, StatusFailed}, h.statusSeq())
	})
}

func TestExportRetention(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration // expiry relative to the start
		wait  time.Duration // expected wait before deleting
	}{
		{"WaitsForExpiry", 72 * time.Hour, 72 * time.Hour},
		{"AlreadyExpired", -time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ts testsuite.WorkflowTestSuite
			env := ts.NewTestWorkflowEnvironment()
			env.RegisterWorkflowWithOptions(ExportRetention, workflow.RegisterOptions{Name: RetentionWorkflowName})
			env.RegisterActivity(exportActs)
			start := env.Now()
			var deletedAt time.Time
			var deleted []contract.DeleteExportInput
			env.OnActivity(exportActs.DeleteExport, mock.Anything, mock.Anything).Return(
				func(ctx context.Context, in contract.DeleteExportInput) error {
					deleted = append(deleted, in)
					deletedAt = env.Now()
					return nil
				})
			env.ExecuteWorkflow(RetentionWorkflowName, RetentionInput{JobID: exportJobID, FirstRunID: "run-1", ExpiresAt: start.Add(tc.after)})
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			assert.Equal(t, []contract.DeleteExportInput{{JobID: exportJobID, FirstRunID: "run-1"}}, deleted,
				"only the instance the child was started for")
			assert.WithinDuration(t, start.Add(tc.wait), deletedAt, time.Second)
		})
	}
}

// TestExport_ApprovalFromWorkerCatalog: every approval setting the job asks with after a plan
// comes from the worker's catalog (the plan), never from what the frontend resolved at start,
// and the update validator decides with it.
func TestExport_ApprovalFromWorkerCatalog(t *testing.T) {
	ownerApprover := authz.Principal{Tenant: "acme", Subject: "ann",
		Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove}}
	fourEyes := &contract.PlanApproval{Required: true, AllowSelf: false, Sensitive: []string{"email"},
		Timeout: contract.Duration(2 * time.Hour)}
	withApproval := func(p contract.PlanExportResult, a *contract.PlanApproval) contract.PlanExportResult {
		p.Approval = a
		return p
	}

	// reask runs a job whose first request allowed self-approval, which the owner answers at
	// 10m; the plan then disagrees. The owner's answer to the second request is refused, a
	// steward's accepted, and nothing is exported before that.
	reask := func(t *testing.T, plan func(int, contract.PlanExportInput) (contract.PlanExportResult, error)) *exportHarness {
		h := newExportHarness(t)
		h.plan = plan
		in := exportInput(true)
		in.Approval.AllowSelf = true
		self := h.resumeAt(10*time.Minute, "self", h.answer(ownerApprover, DecisionApprove))
		var askedAt time.Time
		h.env.RegisterDelayedCallback(func() { askedAt = h.env.Now() }, 10*time.Minute+time.Second)
		selfAgain := h.resumeAt(20*time.Minute, "self-again", h.answer(ownerApprover, DecisionApprove))
		other := h.resumeAt(30*time.Minute, "steward", h.answer(steward, DecisionApprove))
		h.execute(in)

		require.True(t, self.accepted, "the first request allowed self-approval: %v", self.rejectErr)
		assert.Zero(t, self.partsAtDecision)
		assert.False(t, selfAgain.accepted, "the owner approved her own export after four eyes came back")
		requireAppErrType(t, selfAgain.rejectErr, RejectForbidden)
		require.True(t, other.accepted, "%v", other.rejectErr)
		assert.Zero(t, other.partsAtDecision, "no part ran before the second approval")

		asked := h.askedInputs()
		require.Len(t, asked, 2)
		assert.True(t, asked[0].AllowSelf)
		n := asked[1]
		assert.False(t, n.AllowSelf, "needs_input.self_approval of the re-ask")
		assert.Equal(t, []string{"email"}, n.Scope["sensitive_columns"])
		assert.WithinDuration(t, askedAt.Add(2*time.Hour), n.ExpiresAt, time.Minute, "the worker's approval_timeout")
		assert.Equal(t, "steward", h.result().ApprovedBy)
		return h
	}

	t.Run("SelfApprovalSwitchedOffBeforePlanning", func(t *testing.T) {
		h := reask(t, func(_ int, in contract.PlanExportInput) (contract.PlanExportResult, error) {
			if in.ConfigDigest == cfg2 {
				return withApproval(planOf(cfg2, 3), fourEyes), nil
			}
			return contract.PlanExportResult{ScopeChanged: true, ConfigDigest: cfg2, Sensitive: true,
				SensitiveColumns: []string{"email"}, Approval: fourEyes}, nil
		})
		assert.Equal(t, []string{cfg1, cfg2}, h.planDigests())
	})

	t.Run("SameDigestOtherSettings", func(t *testing.T) {
		// The frontend's catalog said allow_self_approval, the worker's (same digest) does not:
		// a disagreement no digest shows is caught by the plan all the same.
		h := reask(t, func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
			return withApproval(planOf(cfg1, 3), fourEyes), nil
		})
		assert.Equal(t, []string{cfg1, cfg1}, h.planDigests())
	})

	t.Run("RequiredByWorkerOnly", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
			return withApproval(planOf(cfg1, 3), fourEyes), nil
		}
		got := h.resumeAt(10*time.Minute, "steward", h.answer(steward, DecisionApprove))
		h.execute(exportInput(false))
		require.True(t, got.accepted, "%v", got.rejectErr)
		assert.Zero(t, got.partsAtDecision, "nothing is read before the approval the worker requires")
		require.Len(t, h.askedInputs(), 1)
		assert.Equal(t, "steward", h.result().ApprovedBy)
	})

	t.Run("AgreeingCatalogsAskOnce", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
			a := *fourEyes
			a.Timeout = contract.Duration(4 * time.Hour)
			return withApproval(planOf(cfg1, 3), &a), nil
		}
		got := h.resumeAt(10*time.Minute, "steward", h.answer(steward, DecisionApprove))
		h.execute(exportInput(true))
		require.True(t, got.accepted, "%v", got.rejectErr)
		assert.Len(t, h.askedInputs(), 1)
		assert.Equal(t, 3*rowsPerPart, h.result().Manifest.Rows)
	})
}

// TestExport_Replay replays export histories recorded by a real (embedded) server (see
// testdata/genexport). export_v0.json is a job of the workers before run-scoped artifacts
// (972cb3d): its parts wrote under the legacy prefix and its retention child is
// "<job>/retention", so a job in flight when workers upgrade must keep both. export_v2.json
// (genexport -approve) exports a sensitive column approved by a steward through a sealed
// resume: it records the meaning prompt, the decision record and the notification versions.
//
// The others are recorded with genexport -scenario: export_reask.json (the dataset's config
// changed after the steward's approval: the plan reports it and the job asks again, approve-2,
// before reading a row), export_cancel_waiting.json (cancelled while awaiting approval),
// export_cancel_parts.json (cancelled while a part runs: partial output deleted) and
// export_retention.json (the retention child: its timer fires and it deletes the artifacts).
func TestExport_Replay(t *testing.T) {
	for _, file := range []string{"export_v0.json", "export_v1.json", "export_v2.json", "export_reask.json",
		"export_cancel_waiting.json", "export_cancel_parts.json"} {
		t.Run(file, func(t *testing.T) {
			// The recorded workflow ID: the child ID and artifact prefix are derived from it.
			replay(t, file, "acme/export/replay", ExportWorkflowName, (&Workflows{}).Export)
		})
	}
	t.Run("export_retention.json", func(t *testing.T) {
		replay(t, "export_retention.json", "acme/export/replay/retention", RetentionWorkflowName, ExportRetention)
	})
}
