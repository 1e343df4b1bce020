package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

const (
	exportJobID = "acme/export/k1"
	cfg1        = "sha256:c0ff1111"
	cfg2        = "sha256:c0ff2222"
	rowsPerPart = 10
)

// exportActs is the activity struct the export tests register; every method they reach is mocked.
var exportActs = &activities.Activities{}

// dora is a second approver of the tenant.
var dora = authz.Principal{Tenant: "acme", Subject: "dora", Scopes: []authz.Scope{authz.ScopeApprove}}

func exportInput(sensitive bool) ExportInput {
	in := ExportInput{
		Tenant: "acme",
		Owner:  "ann",
		Args: ExportArgs{Dataset: "customers", Format: "jsonl", Columns: []string{"id", "email", "plan"},
			Purpose: "churn analysis"},
		ConfigDigest: cfg1,
		MaxRows:      1000,
		PartRows:     rowsPerPart,
		PageRows:     5,
		Concurrency:  2,
	}
	if sensitive {
		in.Approval = ExportApproval{Required: true, Timeout: Duration(4 * time.Hour), Sensitive: []string{"email"}}
	}
	return in
}

// planOf is a plan of n parts of rowsPerPart rows each for a config digest.
func planOf(digest string, n int) contract.PlanExportResult {
	p := contract.PlanExportResult{ConfigDigest: digest, Rows: n * rowsPerPart}
	var after *string
	for i := range n {
		through := fmt.Sprint((i + 1) * rowsPerPart)
		p.Ranges = append(p.Ranges, contract.KeyRange{After: after, Through: through})
		after = &through
	}
	return p
}

func scopeChangedErr() error {
	return temporal.NewNonRetryableApplicationError("dataset config changed", contract.ErrTypeScopeChanged, nil)
}

type childStart struct {
	id string
	in RetentionInput
}

// exportHarness runs the Export workflow (jobHarness) against mocked activities and also
// records every activity's input and every child it starts.
type exportHarness struct {
	*jobHarness

	// What the mocked activities do; tests replace these before execute.
	plan      func(n int, in contract.PlanExportInput) (contract.PlanExportResult, error) // n: 1-based call number
	part      func(in contract.ExportPartInput) (contract.PartResult, error)
	finalize  func(in contract.FinalizeExportInput) (contract.Manifest, error)
	childErr  error         // what the mocked retention child returns
	partDelay time.Duration // real time each part takes, so concurrent parts overlap
	// the mocks of ExportPart and FinalizeExport, for After
	partMock, finalizeMock *testsuite.MockCallWrapper

	// guarded by mu
	plans     []contract.PlanExportInput
	parts     []contract.ExportPartInput
	finalizes []contract.FinalizeExportInput
	deletes   []contract.DeleteExportInput
	children  []childStart
	manifest  contract.Manifest // what the mocked FinalizeExport returned last
	inflight  int
	peak      int
}

func newExportHarness(t *testing.T) *exportHarness {
	t.Helper()
	return newExportHarnessWith(t, testWorkflows, nil)
}

// newExportHarnessWith runs w's Export, registering what register adds (newJobHarness).
func newExportHarnessWith(t *testing.T, w *Workflows, register func(*testsuite.TestWorkflowEnvironment)) *exportHarness {
	t.Helper()
	h := &exportHarness{jobHarness: newJobHarness(t, KindExport, exportJobID, w, exportActs, register)}
	env := h.env

	h.plan = func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
		return planOf(cfg1, 3), nil
	}
	h.part = func(in contract.ExportPartInput) (contract.PartResult, error) {
		return contract.PartResult{Part: in.Part, Chunks: 2, Rows: rowsPerPart, Bytes: 100}, nil
	}
	h.finalize = defaultFinalize

	env.OnActivity(exportActs.PlanExport, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.PlanExportInput) (contract.PlanExportResult, error) {
			h.mu.Lock()
			h.plans = append(h.plans, in)
			n := len(h.plans)
			h.mu.Unlock()
			return h.plan(n, in)
		})
	h.partMock = env.OnActivity(exportActs.ExportPart, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ExportPartInput) (contract.PartResult, error) {
			h.mu.Lock()
			h.parts = append(h.parts, in)
			h.inflight++
			h.peak = max(h.peak, h.inflight)
			h.mu.Unlock()
			defer func() {
				h.mu.Lock()
				h.inflight--
				h.mu.Unlock()
			}()
			time.Sleep(h.partDelay)
			return h.part(in)
		})
	h.finalizeMock = env.OnActivity(exportActs.FinalizeExport, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.FinalizeExportInput) (contract.Manifest, error) {
			h.mu.Lock()
			h.finalizes = append(h.finalizes, in)
			h.mu.Unlock()
			m, err := h.finalize(in)
			if err == nil {
				h.mu.Lock()
				h.manifest = m
				h.mu.Unlock()
			}
			return m, err
		})
	env.OnActivity(exportActs.DeleteExport, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.DeleteExportInput) error {
			h.mu.Lock()
			h.deletes = append(h.deletes, in)
			h.mu.Unlock()
			return nil
		})
	// The retention child sleeps for days; the tests only check how it is started.
	env.OnWorkflow(RetentionWorkflowName, mock.Anything, mock.Anything).Return(
		func(workflow.Context, RetentionInput) error { return h.childErr }).Maybe()
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
		var in RetentionInput
		require.NoError(t, args.Get(&in))
		h.mu.Lock()
		h.children = append(h.children, childStart{id: info.WorkflowExecution.ID, in: in})
		h.mu.Unlock()
	})
	return h
}

func defaultFinalize(in contract.FinalizeExportInput) (contract.Manifest, error) {
	m := contract.Manifest{
		Object:    "exports/" + in.JobID + "/export." + in.Format + ".gz",
		FileName:  "customers." + in.Format + ".gz",
		Format:    in.Format,
		Columns:   in.Columns,
		SHA256:    "0123abcd",
		CreatedAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		ExpiresAt: in.ExpiresAt,
	}
	parts := append([]contract.PartResult(nil), in.Parts...)
	sort.Slice(parts, func(i, j int) bool { return parts[i].Part < parts[j].Part })
	for _, p := range parts {
		m.Rows += p.Rows
		m.Bytes += p.Bytes
		m.Parts = append(m.Parts, contract.ManifestPart{Part: p.Part, Rows: p.Rows, Bytes: p.Bytes, SHA256: fmt.Sprintf("%064d", p.Part)})
	}
	return m, nil
}

func (h *exportHarness) result() ExportResult {
	h.t.Helper()
	var res ExportResult
	h.resultInto(&res)
	return res
}

func (h *exportHarness) planDigests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.plans))
	for _, p := range h.plans {
		out = append(out, p.ConfigDigest)
	}
	return out
}

func TestExport_NoApproval(t *testing.T) {
	t.Run("PlanPartsFinalize", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(_ int, in contract.PlanExportInput) (contract.PlanExportResult, error) {
			return planOf(in.ConfigDigest, 3), nil
		}
		h.part = func(in contract.ExportPartInput) (contract.PartResult, error) {
			return contract.PartResult{Part: in.Part, Chunks: 2, Rows: rowsPerPart - in.Part, Bytes: int64(100 * in.Part)}, nil
		}
		in := exportInput(false)
		start := h.env.Now()
		h.execute(in)
		res := h.result()

		// The result is exactly the manifest FinalizeExport returned.
		want, err := json.Marshal(h.manifest)
		require.NoError(t, err)
		got, err := json.Marshal(res.Manifest)
		require.NoError(t, err)
		assert.JSONEq(t, string(want), string(got))
		assert.Empty(t, res.ApprovedBy)
		assert.Nil(t, res.Decision, "no approval, no decision record")
		assert.Equal(t, 9+8+7, res.Manifest.Rows)

		assert.Equal(t, []Status{StatusRunning, StatusSucceeded}, h.statusSeq())
		p := h.lastProgress()
		assert.Equal(t, "rows", p.Unit)
		assert.Equal(t, res.Manifest.Rows, p.Done)
		assert.Equal(t, 3*rowsPerPart, p.Total, "total is the planned row count")
		assert.Zero(t, p.Failed)
		assert.Equal(t, "finished", p.Message)
		assert.Nil(t, h.lastJobError())
		assert.Empty(t, h.askedInputs(), "no input request without a sensitive column")
		u, ok := h.lastMemo(MemoUsage)
		require.True(t, ok, "usage recorded at the end")
		assert.Equal(t, Usage{Rows: int64(res.Manifest.Rows), Bytes: res.Manifest.Bytes}, u)
		assert.Equal(t, []string{"PlanExport", "ExportPart", "ExportPart", "ExportPart", "FinalizeExport"},
			sortedMiddle(h.started))

		require.Len(t, h.plans, 1)
		assert.Equal(t, contract.PlanExportInput{JobID: exportJobID, Tenant: "acme", Dataset: "customers",
			Columns: in.Args.Columns, ConfigDigest: in.ConfigDigest, PartRows: rowsPerPart, Steps: exportPlanHeadSteps}, h.plans[0])

		plan := planOf(cfg1, 3)
		require.Len(t, h.parts, 3)
		sort.Slice(h.parts, func(i, j int) bool { return h.parts[i].Part < h.parts[j].Part })
		for i, pin := range h.parts {
			assert.Equal(t, contract.ExportPartInput{JobID: exportJobID, FirstRunID: testRunID, Tenant: "acme", Dataset: "customers",
				Columns: in.Args.Columns, Format: "jsonl", ConfigDigest: cfg1, Part: i + 1, Range: plan.Ranges[i],
				PageRows: 5}, pin)
		}

		require.Len(t, h.finalizes, 1)
		fin := h.finalizes[0]
		assert.Equal(t, exportJobID, fin.JobID)
		assert.Equal(t, testRunID, fin.FirstRunID)
		assert.Equal(t, "jsonl", fin.Format)
		assert.Equal(t, in.Args.Columns, fin.Columns)
		assert.ElementsMatch(t, []contract.PartResult{
			{Part: 1, Chunks: 2, Rows: 9, Bytes: 100},
			{Part: 2, Chunks: 2, Rows: 8, Bytes: 200},
			{Part: 3, Chunks: 2, Rows: 7, Bytes: 300},
		}, fin.Parts)
		assert.True(t, fin.ExpiresAt.After(start.Add(ExportRetentionDefault-time.Minute)) &&
			!fin.ExpiresAt.After(start.Add(ExportRetentionDefault+time.Minute)),
			"expires_at %v: the default retention (7 days) from now (%v)", fin.ExpiresAt, start)
		assert.Zero(t, fin.ExpiresAt.Nanosecond(), "expires_at is whole seconds")

		require.Len(t, h.children, 1, "one retention child")
		assert.Equal(t, exportJobID+"/retention/"+testRunID, h.children[0].id)
		assert.Equal(t, exportJobID, h.children[0].in.JobID)
		assert.Equal(t, testRunID, h.children[0].in.FirstRunID, "the child deletes this job instance's objects only")
		assert.True(t, h.children[0].in.ExpiresAt.Equal(res.Manifest.ExpiresAt),
			"retention expires at %v, manifest at %v", h.children[0].in.ExpiresAt, res.Manifest.ExpiresAt)
		assert.Empty(t, h.deletes, "a finished export deletes nothing")
	})

	t.Run("RetentionFromInput", func(t *testing.T) {
		h := newExportHarness(t)
		in := exportInput(false)
		in.Retention = Duration(36 * time.Hour)
		start := h.env.Now()
		h.execute(in)
		res := h.result()
		assert.True(t, res.Manifest.ExpiresAt.Equal(start.Add(36*time.Hour).UTC().Truncate(time.Second)),
			"expires_at %v", res.Manifest.ExpiresAt)
		require.Len(t, h.children, 1)
		assert.True(t, h.children[0].in.ExpiresAt.Equal(res.Manifest.ExpiresAt))
	})

	t.Run("ManifestExpiryIsWhatRetentionGets", func(t *testing.T) {
		// The child gets the manifest's expiry, not the one the workflow asked for.
		h := newExportHarness(t)
		stored := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
		h.finalize = func(in contract.FinalizeExportInput) (contract.Manifest, error) {
			m, err := defaultFinalize(in)
			m.ExpiresAt = stored
			return m, err
		}
		h.execute(exportInput(false))
		res := h.result()
		assert.True(t, res.Manifest.ExpiresAt.Equal(stored))
		require.Len(t, h.children, 1)
		assert.Equal(t, exportJobID+"/retention/"+testRunID, h.children[0].id)
		assert.True(t, h.children[0].in.ExpiresAt.Equal(stored), "retention expires at %v", h.children[0].in.ExpiresAt)
	})

	t.Run("EmptyDataset", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
			return contract.PlanExportResult{ConfigDigest: cfg1}, nil
		}
		h.execute(exportInput(false))
		res := h.result()
		assert.Zero(t, res.Manifest.Rows)
		assert.Zero(t, h.count("ExportPart"))
		require.Len(t, h.finalizes, 1)
		assert.Empty(t, h.finalizes[0].Parts)
		assert.Equal(t, []Status{StatusRunning, StatusSucceeded}, h.statusSeq())
	})

	t.Run("RetentionChildNotStarted", func(t *testing.T) {
		// A retention child that cannot start does not fail a finished export.
		h := newExportHarness(t)
		h.childErr = testsuite.ErrMockStartChildWorkflowFailed
		h.execute(exportInput(false))
		res := h.result()
		assert.Equal(t, 3*rowsPerPart, res.Manifest.Rows)
		assert.Equal(t, []Status{StatusRunning, StatusSucceeded}, h.statusSeq())
	})

	for _, tc := range []struct {
		name        string
		concurrency int
		want        int
	}{
		{"ConcurrencyBound", 3, 3},
		{"OneAtATime", 1, 1},
		{"DefaultConcurrency", 0, ExportConcurrencyDefault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newExportHarness(t)
			h.plan = func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
				return planOf(cfg1, 11), nil
			}
			h.partDelay = 15 * time.Millisecond // real time, so overlapping parts really overlap
			in := exportInput(false)
			in.Concurrency = tc.concurrency
			h.execute(in)
			res := h.result()
			assert.Equal(t, 11*rowsPerPart, res.Manifest.Rows)
			assert.Equal(t, 11, h.count("ExportPart"), "each part runs once")
			h.mu.Lock()
			defer h.mu.Unlock()
			assert.Equal(t, tc.want, h.peak, "peak number of parts in flight")
			parts := map[int]bool{}
			for _, p := range h.parts {
				parts[p.Part] = true
			}
			assert.Len(t, parts, 11)
		})
	}
}

// sortedMiddle sorts the activity types between the first and the last, so concurrent parts
// compare in a stable order.
func sortedMiddle(s []string) []string {
	out := append([]string(nil), s...)
	if len(out) > 2 {
		sort.Strings(out[1 : len(out)-1])
	}
	return out
}

func TestExport_Approval(t *testing.T) {
	t.Run("StewardApproves", func(t *testing.T) {
		h := newExportHarness(t)
		in := exportInput(true)
		start := h.env.Now()
		var midStatuses []Status
		midStarted := -1
		h.env.RegisterDelayedCallback(func() {
			midStatuses = h.statusSeq()
			midStarted = h.count("")
		}, 29*time.Minute)
		got := h.resumeAt(30*time.Minute, "u1", h.answer(steward, DecisionApprove))
		h.execute(in)

		require.True(t, got.accepted, "steward approval rejected: %v", got.rejectErr)
		require.True(t, got.completed)
		assert.Equal(t, ResumeResult{Decision: DecisionApprove, By: "steward"}, got.result)
		assert.Zero(t, midStarted, "no activity is scheduled while waiting for approval")
		assert.Zero(t, got.startedAtDecision, "no activity may start before the approval")
		assert.Equal(t, []Status{StatusAwaitingInput}, midStatuses)

		res := h.result()
		assert.Equal(t, "steward", res.ApprovedBy)
		// The decision record: who, when (workflow time of acceptance), surface, sign-in, scope.
		ni := h.openInput()
		require.NotNil(t, res.Decision)
		assert.Equal(t, &DecisionRecord{WorkflowID: exportJobID, RunID: testRunID, InputID: ni.InputID, ScopeDigest: ni.ScopeDigest, Decision: DecisionApprove,
			Tenant: "acme", By: "steward", Scopes: []string{string(authz.ScopeApprove)}, At: start.Add(30 * time.Minute).UTC(),
			Surface: SurfaceTool, SignedInWith: SignedInBearerJWT, Prompt: ni.Prompt, Seal: res.Decision.Seal}, res.Decision)
		assert.NotEmpty(t, res.Decision.Seal)
		// ... and the manifest is written with it.
		require.NotEmpty(t, h.finalizes)
		assert.Equal(t, res.Decision, h.finalizes[len(h.finalizes)-1].Decision)
		assert.Equal(t, 3*rowsPerPart, res.Manifest.Rows)
		assert.Equal(t, []Status{StatusAwaitingInput, StatusRunning, StatusSucceeded}, h.statusSeq())
		assert.Equal(t, []string{cfg1}, h.planDigests())

		asked := h.askedInputs()
		require.Len(t, asked, 1)
		n := asked[0]
		assert.Regexp(t, `^approve-[0-9a-f]{12}$`, n.InputID)
		assert.Equal(t, authz.ApproverApprover, n.Approver)
		assert.False(t, n.AllowSelf)
		assert.Equal(t, "ann", n.RequestedBy)
		assert.Equal(t, Digest(in.Scope(in.ConfigDigest)), n.ScopeDigest)
		assert.Equal(t, Digest(ExportScope{Tenant: "acme", Dataset: "customers", ConfigDigest: cfg1,
			Columns: []string{"id", "email", "plan"}, Format: "jsonl", Purpose: "churn analysis"}), n.ScopeDigest)
		assert.Equal(t, "customers", n.Scope["dataset"])
		assert.Equal(t, []string{"id", "email", "plan"}, n.Scope["columns"])
		assert.Equal(t, "jsonl", n.Scope["format"])
		assert.Equal(t, "churn analysis", n.Scope["purpose"])
		assert.Equal(t, cfg1, n.Scope["config_digest"])
		assert.Equal(t, []string{"email"}, n.Scope["sensitive_columns"])
		// New runs ask with the meaning sentence (GetVersion export-meaning-prompt).
		assert.Equal(t, in.Meaning().Text(), n.Prompt)
		assert.Contains(t, n.Prompt, "Allow ann@acme to export id, **email** and plan of customers")
		assert.Contains(t, n.Prompt, "churn analysis")
		assert.True(t, start.Add(4*time.Hour).Equal(n.ExpiresAt), "expires_at %v, started %v", n.ExpiresAt, start)
		v, ok := h.lastMemo(MemoNeedsInput)
		require.True(t, ok)
		assert.Nil(t, v, "needs_input is cleared once answered")
		p := h.lastProgress()
		assert.Equal(t, "rows", p.Unit)
		assert.Equal(t, 3*rowsPerPart, p.Done)
	})

	t.Run("DefaultTimeout", func(t *testing.T) {
		h := newExportHarness(t)
		in := exportInput(true)
		in.Approval.Timeout = 0
		start := h.env.Now()
		h.execute(in)
		requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeInputExpired)
		assert.True(t, start.Add(ExportApprovalTimeoutDefault).Equal(h.openInput().ExpiresAt))
	})
}
