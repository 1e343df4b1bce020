package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
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
func planOf(digest string, n int) activities.PlanExportResult {
	p := activities.PlanExportResult{ConfigDigest: digest, Rows: n * rowsPerPart}
	var after *string
	for i := range n {
		through := fmt.Sprint((i + 1) * rowsPerPart)
		p.Ranges = append(p.Ranges, activities.KeyRange{After: after, Through: through})
		after = &through
	}
	return p
}

func scopeChangedErr() error {
	return temporal.NewNonRetryableApplicationError("dataset config changed", activities.ErrTypeScopeChanged, nil)
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
	plan      func(n int, in activities.PlanExportInput) (activities.PlanExportResult, error) // n: 1-based call number
	part      func(in activities.ExportPartInput) (activities.PartResult, error)
	finalize  func(in activities.FinalizeExportInput) (activities.Manifest, error)
	childErr  error         // what the mocked retention child returns
	partDelay time.Duration // real time each part takes, so concurrent parts overlap
	// the mocks of ExportPart and FinalizeExport, for After
	partMock, finalizeMock *testsuite.MockCallWrapper

	// guarded by mu
	plans     []activities.PlanExportInput
	parts     []activities.ExportPartInput
	finalizes []activities.FinalizeExportInput
	deletes   []activities.DeleteExportInput
	children  []childStart
	manifest  activities.Manifest // what the mocked FinalizeExport returned last
	inflight  int
	peak      int
}

func newExportHarness(t *testing.T) *exportHarness {
	t.Helper()
	h := &exportHarness{jobHarness: newJobHarness(t, KindExport, exportJobID, testWorkflows, exportActs, nil)}
	env := h.env

	h.plan = func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
		return planOf(cfg1, 3), nil
	}
	h.part = func(in activities.ExportPartInput) (activities.PartResult, error) {
		return activities.PartResult{Part: in.Part, Chunks: 2, Rows: rowsPerPart, Bytes: 100}, nil
	}
	h.finalize = defaultFinalize

	env.OnActivity(exportActs.PlanExport, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.PlanExportInput) (activities.PlanExportResult, error) {
			h.mu.Lock()
			h.plans = append(h.plans, in)
			n := len(h.plans)
			h.mu.Unlock()
			return h.plan(n, in)
		})
	h.partMock = env.OnActivity(exportActs.ExportPart, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ExportPartInput) (activities.PartResult, error) {
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
		func(_ context.Context, in activities.FinalizeExportInput) (activities.Manifest, error) {
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
		func(_ context.Context, in activities.DeleteExportInput) error {
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

func defaultFinalize(in activities.FinalizeExportInput) (activities.Manifest, error) {
	m := activities.Manifest{
		Object:    "exports/" + in.JobID + "/export." + in.Format + ".gz",
		FileName:  "customers." + in.Format + ".gz",
		Format:    in.Format,
		Columns:   in.Columns,
		SHA256:    "0123abcd",
		CreatedAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		ExpiresAt: in.ExpiresAt,
	}
	parts := append([]activities.PartResult(nil), in.Parts...)
	sort.Slice(parts, func(i, j int) bool { return parts[i].Part < parts[j].Part })
	for _, p := range parts {
		m.Rows += p.Rows
		m.Bytes += p.Bytes
		m.Parts = append(m.Parts, activities.ManifestPart{Part: p.Part, Rows: p.Rows, Bytes: p.Bytes, SHA256: fmt.Sprintf("%064d", p.Part)})
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
		h.plan = func(_ int, in activities.PlanExportInput) (activities.PlanExportResult, error) {
			return planOf(in.ConfigDigest, 3), nil
		}
		h.part = func(in activities.ExportPartInput) (activities.PartResult, error) {
			return activities.PartResult{Part: in.Part, Chunks: 2, Rows: rowsPerPart - in.Part, Bytes: int64(100 * in.Part)}, nil
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
		assert.Equal(t, []string{"PlanExport", "ExportPart", "ExportPart", "ExportPart", "FinalizeExport"},
			sortedMiddle(h.started))

		require.Len(t, h.plans, 1)
		assert.Equal(t, activities.PlanExportInput{JobID: exportJobID, Tenant: "acme", Dataset: "customers",
			Columns: in.Args.Columns, ConfigDigest: in.ConfigDigest, PartRows: rowsPerPart}, h.plans[0])

		plan := planOf(cfg1, 3)
		require.Len(t, h.parts, 3)
		sort.Slice(h.parts, func(i, j int) bool { return h.parts[i].Part < h.parts[j].Part })
		for i, pin := range h.parts {
			assert.Equal(t, activities.ExportPartInput{JobID: exportJobID, FirstRunID: testRunID, Tenant: "acme", Dataset: "customers",
				Columns: in.Args.Columns, Format: "jsonl", ConfigDigest: cfg1, Part: i + 1, Range: plan.Ranges[i],
				PageRows: 5}, pin)
		}

		require.Len(t, h.finalizes, 1)
		fin := h.finalizes[0]
		assert.Equal(t, exportJobID, fin.JobID)
		assert.Equal(t, testRunID, fin.FirstRunID)
		assert.Equal(t, "jsonl", fin.Format)
		assert.Equal(t, in.Args.Columns, fin.Columns)
		assert.ElementsMatch(t, []activities.PartResult{
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
		h.finalize = func(in activities.FinalizeExportInput) (activities.Manifest, error) {
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
		h.plan = func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
			return activities.PlanExportResult{ConfigDigest: cfg1}, nil
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
			h.plan = func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
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
		assert.Equal(t, &DecisionRecord{InputID: ni.InputID, ScopeDigest: ni.ScopeDigest, Decision: DecisionApprove,
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
		assert.Contains(t, n.Prompt, `"customers"`)
		assert.Contains(t, n.Prompt, "email")
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

func TestExport_ConfigChanged(t *testing.T) {
	// plan(cfg1) reports a change to cfg2; plan(cfg2) plans three parts.
	changedTo := func(digest string, sensitive bool, missing ...string) func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
		return func(_ int, in activities.PlanExportInput) (activities.PlanExportResult, error) {
			if in.ConfigDigest == digest {
				return planOf(digest, 3), nil
			}
			return activities.PlanExportResult{ScopeChanged: true, ConfigDigest: digest, Sensitive: sensitive,
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
		h.plan = func(n int, in activities.PlanExportInput) (activities.PlanExportResult, error) {
			return activities.PlanExportResult{ScopeChanged: true, ConfigDigest: fmt.Sprintf("sha256:%d", n)}, nil
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
		h.plan = func(n int, pin activities.PlanExportInput) (activities.PlanExportResult, error) {
			planned = n
			if n == 1 {
				return planOf(cfg1, 4), nil
			}
			if pin.ConfigDigest == cfg2 {
				return planOf(cfg2, 3), nil
			}
			return activities.PlanExportResult{ScopeChanged: true, ConfigDigest: cfg2, Sensitive: true}, nil
		}
		h.part = func(pin activities.ExportPartInput) (activities.PartResult, error) {
			if pin.ConfigDigest == cfg1 && pin.Part == 3 {
				return activities.PartResult{}, scopeChangedErr()
			}
			return activities.PartResult{Part: pin.Part, Chunks: 1, Rows: rowsPerPart, Bytes: 50}, nil
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
		assert.Equal(t, []activities.DeleteExportInput{{JobID: exportJobID, FirstRunID: testRunID}}, h.deletes)
	})

	t.Run("RetryableScopeChangedTypeIsNotRetried", func(t *testing.T) {
		// The retry policy lists the type, so even a part that forgets non-retryable is not retried.
		h := newExportHarness(t)
		h.plan = func(n int, pin activities.PlanExportInput) (activities.PlanExportResult, error) {
			if n == 1 || pin.ConfigDigest == cfg2 {
				return planOf(pin.ConfigDigest, 1), nil
			}
			return activities.PlanExportResult{ScopeChanged: true, ConfigDigest: cfg2}, nil
		}
		h.part = func(pin activities.ExportPartInput) (activities.PartResult, error) {
			if pin.ConfigDigest == cfg1 {
				return activities.PartResult{}, temporal.NewApplicationError("changed", activities.ErrTypeScopeChanged)
			}
			return activities.PartResult{Part: pin.Part, Chunks: 1, Rows: rowsPerPart, Bytes: 50}, nil
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
			h.plan = func(n int, pin activities.PlanExportInput) (activities.PlanExportResult, error) {
				if n == 1 {
					return planOf(cfg1, 3), nil
				}
				r := activities.PlanExportResult{ScopeChanged: true, ConfigDigest: cfg2, Sensitive: true}
				if tc.answer == "missing" {
					r.Missing = []string{"email"}
				}
				return r, nil
			}
			h.part = func(pin activities.ExportPartInput) (activities.PartResult, error) {
				if pin.Part == 2 {
					return activities.PartResult{}, scopeChangedErr()
				}
				return activities.PartResult{Part: pin.Part, Chunks: 1, Rows: rowsPerPart, Bytes: 50}, nil
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
			assert.Contains(t, h.deletes, activities.DeleteExportInput{JobID: exportJobID, FirstRunID: testRunID},
				"the chunks of part 1 are deleted")
		})
	}
}

func TestExport_CancelAndFailures(t *testing.T) {
	t.Run("CancelWhileExporting", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
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
		assert.Equal(t, []activities.DeleteExportInput{{JobID: exportJobID, FirstRunID: testRunID}}, h.deletes, "partial output is deleted")
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
		{"DatasetTooLarge", activities.ErrTypeDatasetTooLarge, ErrCodeDatasetTooLarge},
		{"DatasetMissing", activities.ErrTypeDatasetMissing, ErrCodeDatasetMissing},
	} {
		t.Run("Plan"+tc.name, func(t *testing.T) {
			h := newExportHarness(t)
			msg := "dataset \"customers\": " + tc.name
			h.plan = func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
				// Retryable on purpose: the workflow's retry policy must not retry these types.
				return activities.PlanExportResult{}, temporal.NewApplicationError(msg, tc.errType)
			}
			h.execute(exportInput(false))

			appErr := requireAppErrType(t, h.env.GetWorkflowError(), tc.code)
			assert.True(t, appErr.NonRetryable())
			assert.Equal(t, msg, appErr.Message())
			assert.Equal(t, []string{"PlanExport", "DeleteExport"}, h.started, "not retried; partial output deleted")
			assert.Equal(t, []activities.DeleteExportInput{{JobID: exportJobID, FirstRunID: testRunID}}, h.deletes)
			assert.Equal(t, []Status{StatusRunning, StatusFailed}, h.statusSeq())
			if je := h.lastJobError(); assert.NotNil(t, je) {
				assert.Equal(t, tc.code, je.Code)
				assert.Equal(t, msg, je.Message)
			}
		})
	}

	t.Run("PartKeepsFailing", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
			return planOf(cfg1, 1), nil
		}
		h.part = func(activities.ExportPartInput) (activities.PartResult, error) {
			return activities.PartResult{}, errors.New(`failed to connect to user=svc database=crm: 10.0.0.7:5432: connection refused`)
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
		h.part = func(in activities.ExportPartInput) (activities.PartResult, error) {
			mu.Lock()
			attempts[in.Part]++
			n := attempts[in.Part]
			mu.Unlock()
			if in.Part == 2 && n == 1 {
				return activities.PartResult{}, errors.New("worker hiccup")
			}
			return activities.PartResult{Part: in.Part, Chunks: 1, Rows: rowsPerPart, Bytes: 50}, nil
		}
		h.execute(exportInput(false))
		res := h.result()
		assert.Equal(t, 3*rowsPerPart, res.Manifest.Rows)
		assert.Equal(t, 4, h.count("ExportPart"))
		assert.Empty(t, h.deletes)
	})

	t.Run("FinalizeFails", func(t *testing.T) {
		h := newExportHarness(t)
		h.finalize = func(activities.FinalizeExportInput) (activities.Manifest, error) {
			return activities.Manifest{}, temporal.NewNonRetryableApplicationError("part 2: bytes differ", "InvalidArgument", nil)
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
			var deleted []activities.DeleteExportInput
			env.OnActivity(exportActs.DeleteExport, mock.Anything, mock.Anything).Return(
				func(ctx context.Context, in activities.DeleteExportInput) error {
					deleted = append(deleted, in)
					deletedAt = env.Now()
					return nil
				})
			env.ExecuteWorkflow(RetentionWorkflowName, RetentionInput{JobID: exportJobID, FirstRunID: "run-1", ExpiresAt: start.Add(tc.after)})
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			assert.Equal(t, []activities.DeleteExportInput{{JobID: exportJobID, FirstRunID: "run-1"}}, deleted,
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
	fourEyes := &activities.PlanApproval{Required: true, AllowSelf: false, Sensitive: []string{"email"},
		Timeout: activities.Duration(2 * time.Hour)}
	withApproval := func(p activities.PlanExportResult, a *activities.PlanApproval) activities.PlanExportResult {
		p.Approval = a
		return p
	}

	// reask runs a job whose first request allowed self-approval, which the owner answers at
	// 10m; the plan then disagrees. The owner's answer to the second request is refused, a
	// steward's accepted, and nothing is exported before that.
	reask := func(t *testing.T, plan func(int, activities.PlanExportInput) (activities.PlanExportResult, error)) *exportHarness {
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
		h := reask(t, func(_ int, in activities.PlanExportInput) (activities.PlanExportResult, error) {
			if in.ConfigDigest == cfg2 {
				return withApproval(planOf(cfg2, 3), fourEyes), nil
			}
			return activities.PlanExportResult{ScopeChanged: true, ConfigDigest: cfg2, Sensitive: true,
				SensitiveColumns: []string{"email"}, Approval: fourEyes}, nil
		})
		assert.Equal(t, []string{cfg1, cfg2}, h.planDigests())
	})

	t.Run("SameDigestOtherSettings", func(t *testing.T) {
		// The frontend's catalog said allow_self_approval, the worker's (same digest) does not:
		// a disagreement no digest shows is caught by the plan all the same.
		h := reask(t, func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
			return withApproval(planOf(cfg1, 3), fourEyes), nil
		})
		assert.Equal(t, []string{cfg1, cfg1}, h.planDigests())
	})

	t.Run("RequiredByWorkerOnly", func(t *testing.T) {
		h := newExportHarness(t)
		h.plan = func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
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
		h.plan = func(int, activities.PlanExportInput) (activities.PlanExportResult, error) {
			a := *fourEyes
			a.Timeout = activities.Duration(4 * time.Hour)
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
// "<job>/retention", so a job in flight when workers upgrade must keep both.
func TestExport_Replay(t *testing.T) {
	for _, file := range []string{"export_v0.json", "export_v1.json"} {
		t.Run(file, func(t *testing.T) {
			// The recorded workflow ID: the child ID and artifact prefix are derived from it.
			replay(t, file, "acme/export/replay", ExportWorkflowName, (&Workflows{}).Export)
		})
	}
}
