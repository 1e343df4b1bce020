package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows/jobstate"
)

// Defaults for ExportInput fields left zero.
const (
	ExportConcurrencyDefault      = 4
	PartHeartbeatTimeoutDefault   = 20 * time.Second
	ExportRetentionDefault        = 7 * 24 * time.Hour
	ExportApprovalTimeoutDefault  = 24 * time.Hour
	exportScopeChangesMax         = 5
	exportActivityMaxAttempts     = 10
	exportPartStartToCloseDefault = 30 * time.Minute
	// exportRunScopedChange marks the change to run-scoped artifacts and retention child IDs
	// (workflow.GetVersion): jobs started before it keep the prefix their parts already wrote
	// to and the old child ID, so they finish and replay as recorded.
	exportRunScopedChange = "export-run-scoped-artifacts"
	// exportScopeMismatchFails marks the change that fails finalize when the accepted decision's
	// scope digest is not the scope asked for, instead of writing a manifest without the scope
	// (which verify could then not check). Recorded runs never took that branch.
	exportScopeMismatchFails = "export-scope-mismatch-fails"
)

const (
	// KindExport is the export kind's name: the middle of its job IDs and its JobKind.
	KindExport = "export"
	// Workflow names are part of history; never rename them.
	ExportWorkflowName    = "jobgate.Export"
	RetentionWorkflowName = "jobgate.ExportRetention"
	// exportUnit is what an export's progress counts.
	exportUnit = "rows"
)

// exportKind declares the export kind: its workflow, the retention workflow it leaves behind
// for each artifact, its progress unit and its activities.
func exportKind() Kind {
	return Kind{Name: KindExport, WorkflowName: ExportWorkflowName, Workflow: func(w *Workflows) any { return w.Export },
		Unit: exportUnit,
		// Pinned: an export waits up to a day for approval, then writes parts; it finishes on
		// the build that asked for the approval.
		Versioning: workflow.VersioningBehaviorPinned,
		Auxiliary:  map[string]any{RetentionWorkflowName: ExportRetention},
		// AutoUpgrade: the retention child sleeps until the artifacts expire (days, per dataset)
		// and then runs one activity. Pinned would keep every release's workers alive for the
		// longest retention; its code is one timer and one activity, and any change to it must
		// be GetVersion-gated like all workflow code (replay tests), so a newer build replays it.
		AuxiliaryVersioning: map[string]workflow.VersioningBehavior{RetentionWorkflowName: workflow.VersioningBehaviorAutoUpgrade},
		Activities: []string{contract.PlanExportActivityName, contract.ExportPartActivityName,
			contract.FinalizeExportActivityName, contract.DeleteExportActivityName},
		Story: exportStory()}
}

// ExportArgs are the caller's normalized start arguments: the idempotency fingerprint.
type ExportArgs struct {
	Dataset string   `json:"dataset"`
	Format  string   `json:"format"`
	Columns []string `json:"columns"`
	Purpose string   `json:"purpose"`
}

// ExportScope is exactly what an approval authorizes; its Digest is the scope_digest. It is
// the approved scope the export's manifest and decision record carry (contract.ApprovedScope):
// one type, so its JSON (and so the digest) cannot differ between the two.
type ExportScope = contract.ApprovedScope

// ExportApproval is resolved from the dataset catalog when the job starts.
type ExportApproval struct {
	// Required: a requested column is sensitive, so an approver must confirm the scope.
	Required bool `json:"required"`
	// AllowSelf lets the owner approve (the dataset switched four eyes off).
	AllowSelf bool     `json:"allow_self,omitempty"`
	Timeout   Duration `json:"timeout"`
	// Sensitive names the requested sensitive columns, for the prompt.
	Sensitive []string `json:"sensitive,omitempty"`
}

// ExportInput starts an export job.
type ExportInput struct {
	Tenant string     `json:"tenant"`
	Owner  string     `json:"owner"`
	Args   ExportArgs `json:"args"`
	// ConfigDigest is the dataset's config digest when the job was started.
	ConfigDigest string         `json:"config_digest"`
	MaxRows      int            `json:"max_rows"`
	Approval     ExportApproval `json:"approval"`
	// Retention is how long the artifact is kept. Defaults to 7 days.
	Retention Duration `json:"retention,omitempty"`
	// PartRows and PageRows size parts and pages; 0 takes the activities' defaults.
	PartRows int `json:"part_rows,omitempty"`
	PageRows int `json:"page_rows,omitempty"`
	// Concurrency bounds parts in flight. Defaults to 4.
	Concurrency int `json:"concurrency,omitempty"`
	// PartHeartbeatTimeout is how soon a dead worker's part is retried elsewhere. Defaults to 20s.
	PartHeartbeatTimeout Duration `json:"part_heartbeat_timeout,omitempty"`
	// Fairness keys the job's part activities by tenant; zero dispatches without a key.
	Fairness Fairness `json:"fairness,omitzero"`
}

// changeMeaningPrompt is the workflow.GetVersion change ID of the export's prompt becoming its
// meaning sentence (jobstate.ExportMeaning); part of history, never rename it.
const changeMeaningPrompt = "export-meaning-prompt"

// Meaning is what approving the export allows, in words (its prompt for new runs).
func (in ExportInput) Meaning() jobstate.ExportMeaning {
	return jobstate.ExportMeaning{Requester: in.Owner, Tenant: in.Tenant, Dataset: in.Args.Dataset,
		Columns: in.Args.Columns, Sensitive: in.Approval.Sensitive, MaxRows: in.MaxRows, Format: in.Args.Format,
		Purpose: in.Args.Purpose}
}

// Scope is the approval scope of the job for a dataset config digest.
func (in ExportInput) Scope(configDigest string) ExportScope {
	return ExportScope{Tenant: in.Tenant, Dataset: in.Args.Dataset, ConfigDigest: configDigest,
		Columns: in.Args.Columns, Format: in.Args.Format, Purpose: in.Args.Purpose}
}

// ExportResult is a finished export: the artifact's manifest (references and digests only).
type ExportResult struct {
	Manifest   contract.Manifest `json:"manifest"`
	ApprovedBy string            `json:"approved_by,omitempty"`
	// Decision records the accepted approval (who, when, surface, how signed in, scope digest);
	// nil when none was needed.
	Decision *DecisionRecord `json:"decision,omitempty"`
}

// RetentionInput asks for an export's artifacts to be deleted at ExpiresAt.
type RetentionInput struct {
	JobID string `json:"job_id"`
	// FirstRunID names the job instance whose artifacts are deleted (none of a later job that
	// reuses the workflow ID). Empty in children started before run-scoped artifacts.
	FirstRunID string    `json:"first_run_id,omitempty"`
	ExpiresAt  time.Time `json:"expires_at"`
}

type exportRun struct {
	*jobRun
	in ExportInput
	// firstRun is the job's first run ID, scoping its artifacts and retention child; "" for a
	// job started before run-scoped artifacts (legacy prefix and child ID).
	firstRun string
	// asked is the scope of the last approval asked for: what an accepted decision approved.
	asked *ExportScope
	rows  int // rows exported so far
	total int // rows planned; 0 until planned
	bytes int64
}

func (r *exportRun) progress(ctx workflow.Context, msg string) Progress {
	p := Progress{Done: r.rows, Total: r.total, Unit: exportUnit, Message: msg, AsOf: workflow.Now(ctx)}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s**\n\n%d of %d rows exported.", msg, p.Done, p.Total))
	return p
}

// fail records a failed job and returns the workflow's error.
func (r *exportRun) fail(ctx workflow.Context, code, msg string) error {
	r.finish(ctx, StatusFailed, &JobError{Code: code, Message: msg}, r.progress(ctx, msg))
	return temporal.NewNonRetryableApplicationError(msg, code, nil)
}

// Export reads the caller tenant's rows of a dataset into one artifact. When a requested column
// is sensitive, nothing is read before an approver other than the owner confirms the exact scope;
// if the dataset's config changes after that, the job asks again instead of exporting.
func (w *Workflows) Export(ctx workflow.Context, in ExportInput) (ExportResult, error) {
	if in.Concurrency <= 0 {
		in.Concurrency = ExportConcurrencyDefault
	}
	if in.Retention <= 0 {
		in.Retention = Duration(ExportRetentionDefault)
	}
	if in.Approval.Timeout <= 0 {
		in.Approval.Timeout = Duration(ExportApprovalTimeoutDefault)
	}
	if in.PartHeartbeatTimeout <= 0 {
		in.PartHeartbeatTimeout = Duration(PartHeartbeatTimeoutDefault)
	}
	jr, err := newJobRun(ctx, w, in.Tenant, in.Owner)
	if err != nil {
		return ExportResult{}, err
	}
	r := &exportRun{jobRun: jr, in: in}
	jr.usage = func() Usage { return Usage{Rows: int64(r.rows), Bytes: r.bytes} }
	jobID := workflow.GetInfo(ctx).WorkflowExecution.ID
	if workflow.GetVersion(ctx, exportRunScopedChange, workflow.DefaultVersion, 1) >= 1 {
		r.firstRun = FirstRunID(ctx)
	}

	// Plans in two steps, the first parts running while the rest is planned (export_overlap.go).
	overlap := workflow.GetVersion(ctx, exportPlanOverlap, workflow.DefaultVersion, 1) >= 1
	digest := in.ConfigDigest
	approved := false
	for changes := 0; ; changes++ {
		if changes > exportScopeChangesMax {
			return ExportResult{}, r.fail(ctx, ErrCodeDatasetChanged, "the dataset's configuration kept changing; start a new export")
		}
		if r.in.Approval.Required && !approved {
			if err := r.askApproval(ctx, digest, changes); err != nil {
				return ExportResult{}, err
			}
			approved = true
		}
		r.setStatus(ctx, StatusRunning)
		r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "planning")})

		plan, err := r.planHead(ctx, jobID, digest, overlap)
		if err != nil {
			return ExportResult{}, r.activityFailure(ctx, jobID, err)
		}
		if plan.ScopeChanged {
			if len(plan.Missing) > 0 {
				return ExportResult{}, r.fail(ctx, ErrCodeDatasetChanged,
					"the dataset no longer has column(s) "+strings.Join(plan.Missing, ", ")+"; start a new export")
			}
			// An old confirmation never authorizes a changed dataset: ask again whenever an
			// approval was (or now is) needed, with the worker's current approval settings.
			digest = plan.ConfigDigest
			r.approvalFromCatalog(plan)
			approved = false
			continue
		}
		if r.approvalFromCatalog(plan) && r.in.Approval.Required {
			// Same digest, yet the job asked (or skipped asking) with other approval settings
			// than this worker's catalog has: the worker's win, and the job asks with them.
			approved = false
			continue
		}
		r.total = plan.Rows
		var parts []contract.PartResult
		var changed bool
		if plan.More {
			parts, changed, err = r.exportPartsPlanning(ctx, jobID, digest, plan.Ranges, r.planRest(ctx, jobID, digest, plan))
		} else {
			parts, changed, err = r.exportParts(ctx, jobID, digest, plan.Ranges)
		}
		if err != nil {
			return ExportResult{}, r.activityFailure(ctx, jobID, err)
		}
		if changed {
			// Parts that finished before the change left chunks (rows) in the store. Delete them
			// now: the job may end while asking again (reject, expiry, cancel, a removed column),
			// and none of those paths deletes anything; a re-run rewrites every part anyway.
			r.cleanup(ctx, jobID)
			r.rows = 0
			continue // re-plan with the old digest: the plan reports the change without reading
		}
		return r.finalize(ctx, jobID, parts)
	}
}

// approvalFromCatalog takes every approval-relevant setting from the plan, that is from the
// worker's current catalog (never from what the frontend resolved at start): whether approval
// is required, allow_self_approval, the sensitive columns and the approval timeout. Approval
// stays required once it was: a column that stopped being sensitive does not undo an ask.
// It says whether who may approve, or what, changed. Plans recorded before they carried the
// settings only update what the job updated then.
func (r *exportRun) approvalFromCatalog(plan contract.PlanExportResult) bool {
	cur := &r.in.Approval
	pa := plan.Approval
	if pa == nil {
		if plan.ScopeChanged {
			cur.Required = cur.Required || plan.Sensitive
			cur.Sensitive = plan.SensitiveColumns // the prompt names what is sensitive now
		}
		return false
	}
	next := ExportApproval{Required: cur.Required || pa.Required, AllowSelf: pa.AllowSelf,
		Sensitive: pa.Sensitive, Timeout: cur.Timeout}
	if pa.Timeout > 0 {
		next.Timeout = pa.Timeout
	}
	changed := next.Required != cur.Required || next.AllowSelf != cur.AllowSelf || !slices.Equal(next.Sensitive, cur.Sensitive)
	*cur = next
	return changed
}

func (r *exportRun) askApproval(ctx workflow.Context, digest string, changes int) error {
	in := r.in
	scope := in.Scope(digest)
	r.asked = &scope
	name := "approve"
	prompt := fmt.Sprintf("%s asks to export dataset %q (columns %s; sensitive: %s) as %s, purpose: %q. "+
		"Approve only if this purpose justifies these columns. No row is read until this is answered.",
		in.Owner, in.Args.Dataset, strings.Join(in.Args.Columns, ", "), strings.Join(in.Approval.Sensitive, ", "),
		in.Args.Format, in.Args.Purpose)
	// Runs from now on ask with the meaning sentence every surface shows (and the decision
	// record keeps); recorded runs keep their prompt, so their memo upserts replay unchanged.
	if workflow.GetVersion(ctx, changeMeaningPrompt, workflow.DefaultVersion, 1) >= 1 {
		prompt = in.Meaning().Text()
	}
	if changes > 0 {
		name = fmt.Sprintf("approve-%d", changes+1)
		prompt = "The dataset's configuration changed since the last approval, so it is asked again. " + prompt
	}
	return r.askInput(ctx, InputRequest{
		Name:   name,
		Prompt: prompt,
		Scope: map[string]any{"dataset": in.Args.Dataset, "columns": in.Args.Columns, "format": in.Args.Format,
			"purpose": in.Args.Purpose, "sensitive_columns": in.Approval.Sensitive, "max_rows": in.MaxRows,
			"config_digest": digest},
		ScopeDigest: Digest(scope),
		Approver:    authz.ApproverApprover,
		AllowSelf:   in.Approval.AllowSelf,
		Timeout:     in.Approval.Timeout.D(),
	}, r.progress)
}

// activityOptions are the options of every activity of the job. All of them (plan, parts,
// finalize, cleanup) carry the job's fairness key and weight, so a tenant's exports share worker
// slots with other tenants' tasks by weight (Temporal task queue fairness).
func (r *exportRun) activityOptions(ctx workflow.Context, summary string, startToClose, heartbeat time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: startToClose,
		HeartbeatTimeout:    heartbeat,
		WaitForCancellation: true,
		Summary:             summary,
		Priority:            r.in.Fairness.Priority(),
		RetryPolicy: retryPolicy(exportActivityMaxAttempts,
			contract.ErrTypeScopeChanged, contract.ErrTypeDatasetMissing, contract.ErrTypeDatasetTooLarge),
	})
}

func (r *exportRun) finalize(ctx workflow.Context, jobID string, parts []contract.PartResult) (ExportResult, error) {
	in := r.in
	r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "finalizing")})
	expires := workflow.Now(ctx).Add(in.Retention.D()).UTC().Truncate(time.Second)
	var m contract.Manifest
	fin := contract.FinalizeExportInput{JobID: jobID, FirstRunID: r.firstRun, Format: in.Args.Format, Columns: in.Args.Columns,
		Parts: parts, ExpiresAt: expires, Decision: r.decision}
	// ApprovalRequired goes to the (worker-sealed) manifest, so verify can tell a record that
	// was removed from one that was never needed. Activity inputs are not compared on replay.
	fin.ApprovalRequired = in.Approval.Required
	switch {
	case r.decision != nil && r.asked != nil && r.decision.ScopeDigest == Digest(*r.asked):
		// The manifest carries what was approved, so its digest can be recomputed from it. An
		// activity's input is not compared on replay: no version gate is needed.
		s := *r.asked
		fin.Scope = &s
	case r.decision != nil && workflow.GetVersion(ctx, exportScopeMismatchFails, workflow.DefaultVersion, 1) >= 1:
		// The validator only accepts a decision for the scope asked, so this is a bug or a
		// tampered history: never write an artifact whose approval does not match its scope.
		return ExportResult{}, r.fail(ctx, ErrCodeExportFailed, "the accepted decision's scope digest is not the scope that was asked for; nothing was written")
	}
	err := workflow.ExecuteActivity(r.activityOptions(ctx, "finalize: assemble artifact and manifest", time.Hour, time.Minute),
		contract.FinalizeExportActivityName, fin).Get(ctx, &m)
	if err != nil {
		return ExportResult{}, r.activityFailure(ctx, jobID, err)
	}
	// Retention outlives the job: an abandoned child sleeps until expiry, then deletes. Its ID
	// names the job instance, so an old instance's child still sleeping never blocks (or is
	// mistaken for) a new one's.
	childID := jobID + "/retention"
	if r.firstRun != "" {
		childID += "/" + r.firstRun
	}
	child := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            childID,
		ParentClosePolicy:     enums.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:         "deletes the artifacts of " + jobID + " at " + m.ExpiresAt.Format(time.RFC3339),
		// The child's tasks (and its delete activity, which inherits it) are the tenant's too.
		Priority: in.Fairness.Priority(),
	}), RetentionWorkflowName, RetentionInput{JobID: jobID, FirstRunID: r.firstRun, ExpiresAt: m.ExpiresAt})
	if err := child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("retention workflow not started; artifacts stay until deleted by hand", "error", err)
	}
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	r.rows, r.bytes = m.Rows, m.Bytes
	r.finish(ctx, StatusSucceeded, nil, r.progress(ctx, "finished"))
	return ExportResult{Manifest: m, ApprovedBy: r.approvedBy(), Decision: r.decision}, nil
}

// activityFailure ends the job for an activity error (or a cancel), deleting partial output.
func (r *exportRun) activityFailure(ctx workflow.Context, jobID string, err error) error {
	r.cleanup(ctx, jobID)
	if ctx.Err() != nil || temporal.IsCanceledError(err) {
		r.finish(ctx, StatusCancelled, &JobError{Code: ErrCodeCancelled, Message: "cancelled on request"}, r.progress(ctx, "cancelled"))
		return temporal.NewCanceledError("cancelled on request")
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case contract.ErrTypeDatasetMissing:
			return r.fail(ctx, ErrCodeDatasetMissing, appErr.Message())
		case contract.ErrTypeDatasetTooLarge:
			return r.fail(ctx, ErrCodeDatasetTooLarge, appErr.Message())
		}
	}
	// The error names the worker (pid@host) and, from a driver, host, user and database: it is
	// logged (and is in history already), the caller gets the code and a fixed message.
	workflow.GetLogger(ctx).Error("export failed", "job_id", jobID, "tenant", r.in.Tenant, "error", err)
	return r.fail(ctx, ErrCodeExportFailed, MsgExportFailed)
}

// cleanup deletes partial output; it runs on a disconnected context so a cancelled job cleans too.
func (r *exportRun) cleanup(ctx workflow.Context, jobID string) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	err := workflow.ExecuteActivity(r.activityOptions(dctx, "delete partial output", 5*time.Minute, 0), contract.DeleteExportActivityName,
		contract.DeleteExportInput{JobID: jobID, FirstRunID: r.firstRun}).Get(dctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("partial export output not deleted", "error", err)
	}
}

// ExportRetention deletes an export's artifacts once they expire.
func ExportRetention(ctx workflow.Context, in RetentionInput) error {
	return deleteOnExpiry(ctx, in.ExpiresAt, contract.DeleteExportActivityName,
		contract.DeleteExportInput{JobID: in.JobID, FirstRunID: in.FirstRunID})
}

// deleteOnExpiry is a retention workflow's one step (an export's artifacts, an eval's episode
// log): sleep until expiresAt, then run the delete activity, retried until it succeeds.
func deleteOnExpiry(ctx workflow.Context, expiresAt time.Time, activity string, input any) error {
	if d := expiresAt.Sub(workflow.Now(ctx)); d > 0 {
		if err := workflow.NewTimer(ctx, d).Get(ctx, nil); err != nil {
			return err
		}
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Minute},
	}), activity, input).Get(ctx, nil)
}
