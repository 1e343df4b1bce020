package tests

import (
	"context"
	"errors"
	"io/fs"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/handle/resumeseal"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// plainResume sends req to job id straight to Temporal, as any Temporal client (or the Web UI's
// "Send Update") can, bypassing every frontend.
func plainResume(t *testing.T, b *testBundle, id, runID string, req workflows.ResumeRequest) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := b.temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, RunID: runID,
		UpdateName: workflows.UpdateResume, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	return err
}

func runIDOf(t *testing.T, b *testBundle, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := b.temporal.DescribeWorkflowExecution(ctx, id, "")
	must(t, err)
	return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// acceptedResume is the (sealed) request of the job's accepted resume update, from history.
func acceptedResume(t *testing.T, b *testBundle, id string) workflows.ResumeRequest {
	t.Helper()
	for _, ev := range acHistory(t, b, id) {
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED {
			var req workflows.ResumeRequest
			must(t, b.converter().FromPayloads(
				ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetArgs(), &req))
			return req
		}
	}
	t.Fatalf("%s has no accepted resume", id)
	return workflows.ResumeRequest{}
}

// sealWith seals req for run runID of job id with keys, as a frontend holding keys would.
func sealWith(keys *handle.Keyring, id, runID string, req workflows.ResumeRequest, expiry time.Time) string {
	return resumeseal.Seal(keys, id, runID, req, expiry)
}

// artifactFiles counts files in the bundle's artifact store under job id.
func artifactFiles(t *testing.T, b *testBundle, id string) int {
	t.Helper()
	n := 0
	root := strings.TrimPrefix(b.artifacts, "file://")
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(filepath.ToSlash(p), url.PathEscape(id)) {
			n++
		}
		return nil
	})
	return n
}

// TestForgedResumeRefused: an Update sent straight to Temporal — unsealed, carrying another
// job's genuine seal, a seal for this job with any field altered, an expired seal, or one made
// with other keys — is refused by the validator: nothing reaches history, no row is read, no
// artifact is written, and the job still awaits its approver, whose resume_export then works.
func TestForgedResumeRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	csAna, csSteward := b.session(ana, 0, ""), b.session(steward, 1, "")
	sensitive := []string{"id", "name", "email"}

	// B: a sensitive export the steward approves the normal way; its history then holds a
	// genuine seal an attacker who can read histories may try to reuse.
	vb := mustView(t, exStart(t, csAna, uniqueKey(t), "jsonl", sensitive))
	wb := exWait(t, csAna, vb.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	mustView(t, exResume(t, csSteward, wb, "approve"))
	exWait(t, csAna, vb.Handle, workflows.StatusSucceeded, 60*time.Second)
	genuineB := acceptedResume(t, b, vb.JobID)
	if genuineB.Seal == "" || genuineB.Surface != workflows.SurfaceTool || genuineB.SignedInWith != workflows.SignedInBearerJWT {
		t.Fatalf("the frontend's resume carries no seal: %+v", genuineB)
	}
	queriesBefore := b.queries.count("customers")

	// A: the job under attack.
	va := mustView(t, exStart(t, csAna, uniqueKey(t), "jsonl", sensitive))
	wa := exWait(t, csAna, va.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	runA := runIDOf(t, b, va.JobID)
	ni := wa.NeedsInput
	// What the steward would send for A through a frontend.
	base := workflows.ResumeRequest{Principal: authz.Principal{Tenant: "acme", Subject: "steward", Scopes: steward.scopes},
		InputID: ni.InputID, ScopeDigest: ni.ScopeDigest, Decision: workflows.DecisionApprove,
		Surface: workflows.SurfaceTool, SignedInWith: workflows.SignedInBearerJWT}
	fresh := time.Now().Add(jobcore.ResumeSealTTL)
	sealedA := func(edit func(*workflows.ResumeRequest)) workflows.ResumeRequest {
		r := base
		r.Seal = sealWith(b.resumeKeys, va.JobID, runA, base, fresh)
		edit(&r)
		return r
	}
	otherKeys, err := handle.NewKeyring("r1", map[string][]byte{"r1": handle.GenerateKey()})
	must(t, err)

	cases := map[string]workflows.ResumeRequest{
		// (a) the reproduced attack: a made-up approver, no seal.
		"Unsealed": {Principal: authz.Principal{Tenant: "acme", Subject: "nobody", Scopes: []authz.Scope{authz.ScopeApprove}},
			InputID: ni.InputID, ScopeDigest: ni.ScopeDigest, Decision: workflows.DecisionApprove},
		"UnsealedAsSteward": sealedA(func(r *workflows.ResumeRequest) { r.Seal = "" }),
		// (b) another job's genuine seal, verbatim and re-aimed at A's request.
		"OtherJobsSealVerbatim": genuineB,
		"OtherJobsSealOnThisRequest": func() workflows.ResumeRequest {
			r := base
			r.Seal = genuineB.Seal
			return r
		}(),
		"OtherRun": func() workflows.ResumeRequest {
			r := base
			r.Seal = sealWith(b.resumeKeys, va.JobID, runIDOf(t, b, vb.JobID), base, fresh)
			return r
		}(),
		// (c) a valid seal for A, with a field altered after sealing.
		"AlteredDecision": sealedA(func(r *workflows.ResumeRequest) { r.Decision = workflows.DecisionReject }),
		"AlteredPrincipal": sealedA(func(r *workflows.ResumeRequest) {
			r.Principal = authz.Principal{Tenant: "acme", Subject: "nobody", Scopes: []authz.Scope{authz.ScopeApprove}}
		}),
		"AlteredScopes": sealedA(func(r *workflows.ResumeRequest) {
			r.Principal.Scopes = []authz.Scope{authz.ScopeApprove, authz.ScopeAdmin}
		}),
		"AlteredDigest":  sealedA(func(r *workflows.ResumeRequest) { r.ScopeDigest = "sha256:" + strings.Repeat("0", 64) }),
		"AlteredComment": sealedA(func(r *workflows.ResumeRequest) { r.Comment = "approved by the board" }),
		// (d) expired, and (e) sealed with keys that are not the deployment's.
		"Expired": func() workflows.ResumeRequest {
			r := base
			r.Seal = sealWith(b.resumeKeys, va.JobID, runA, base, time.Now().Add(-time.Minute))
			return r
		}(),
		"OtherKeys": func() workflows.ResumeRequest {
			r := base
			r.Seal = sealWith(otherKeys, va.JobID, runA, base, fresh)
			return r
		}(),
	}
	for name, req := range cases {
		err := plainResume(t, b, va.JobID, "", req)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != workflows.RejectUnsealed {
			t.Errorf("%s: %v, want a rejection of type %s", name, err, workflows.RejectUnsealed)
		}
	}

	// Nothing of it reached A's history, the dataset or the artifact store; A still waits.
	acNoSideEffects(t, b, va.JobID)
	if n := b.queries.count("customers"); n != queriesBefore {
		t.Errorf("%d statements reached the dataset after the forged resumes", n-queriesBefore)
	}
	if n := artifactFiles(t, b, va.JobID); n != 0 {
		t.Errorf("%d artifact files of the attacked job", n)
	}
	still := mustView(t, call(t, csAna, "get_export", map[string]any{"handle": va.Handle}))
	if still.Status != workflows.StatusAwaitingInput || still.NeedsInput == nil || still.NeedsInput.InputID != ni.InputID {
		t.Fatalf("after the forged resumes: %+v", still)
	}

	// The frontend's path still works, and the result records the decision.
	mustView(t, exResume(t, csSteward, wa, "approve"))
	done := exWait(t, csAna, va.Handle, workflows.StatusSucceeded, 60*time.Second)
	if r := exResult(t, done); r.ApprovedBy != "steward" || r.Rows != 5000 {
		t.Fatalf("result: %+v", r)
	}
	var res workflows.ExportResult
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, b.temporal.GetWorkflow(ctx, va.JobID, "").Get(ctx, &res))
	d := res.Decision
	if d == nil || d.By != "steward" || d.Tenant != "acme" || d.Surface != workflows.SurfaceTool ||
		d.SignedInWith != workflows.SignedInBearerJWT || d.ScopeDigest != ni.ScopeDigest || d.InputID != ni.InputID ||
		d.Decision != workflows.DecisionApprove || d.At.IsZero() {
		t.Fatalf("decision record: %+v", d)
	}
	if m := res.Manifest.Decision; m == nil || m.By != "steward" || m.Seal == "" || m.Prompt == "" || m.ScopeDigest != ni.ScopeDigest {
		t.Fatalf("the manifest's decision record: %+v", m)
	}
	if acceptedResume(t, b, va.JobID).Seal == "" {
		t.Fatal("the accepted resume in history has no seal")
	}
}

// TestForgedStartTenantMismatch: a start straight to Temporal under acme's job ID space with
// another tenant's input fails at once, non-retryable, before any activity.
func TestForgedStartTenantMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := "acme/export/" + uniqueKey(t)
	run, err := b.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: b.taskQueue},
		workflows.ExportWorkflowName, workflows.ExportInput{Tenant: "globex", Owner: "gus",
			Args: workflows.ExportArgs{Dataset: "customers", Format: "jsonl", Columns: []string{"id"}, Purpose: "x"}})
	must(t, err)
	err = run.Get(ctx, nil)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrCodeTenantMismatch {
		t.Fatalf("forged start: %v, want %s", err, workflows.ErrCodeTenantMismatch)
	}
	evs := acHistory(t, b, id)
	if n := acCount(evs, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
		enumspb.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED); n != 0 {
		t.Errorf("%d activity/memo/search attribute events before the refusal", n)
	}
	if n := acCount(evs, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED); n != 0 {
		t.Errorf("%d workflow task failures: the refusal must end the run, not retry it", n)
	}
}

// TestUIURLOnlyForAdmins: job views carry ui_url (a link into the Temporal Web UI, which shows
// every tenant's jobs) only for jobs:admin holders by default.
func TestUIURLOnlyForAdmins(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noWorker: true})
	tenant := listTenant() // ops lists the whole tenant: one of this test's own
	pAna, pOps := principal{tenant, "ana", listRW}, principal{tenant, "ops", listAdminRead}
	csAna := b.session(pAna, 0, "")
	v := mustView(t, call(t, csAna, "start_eval", startArgs(uniqueKey(t), 1, nil)))
	if v.UIURL != "" {
		t.Errorf("start_eval gave ana ui_url %q", v.UIURL)
	}
	if g := mustView(t, call(t, csAna, "get_eval", map[string]any{"handle": v.Handle})); g.UIURL != "" {
		t.Errorf("get_eval gave ana ui_url %q", g.UIURL)
	}
	rows := waitListed(t, b.session(pOps, 1, ""), nil, []string{v.JobID})
	for _, r := range rows {
		if r.JobID == v.JobID && !strings.HasPrefix(r.UIURL, "http://ui.test/namespaces/default/workflows/") {
			t.Errorf("list_jobs gave ops (jobs:admin) ui_url %q", r.UIURL)
		}
	}
	for _, r := range waitListed(t, csAna, nil, []string{v.JobID}) {
		if r.UIURL != "" {
			t.Errorf("list_jobs gave ana ui_url %q", r.UIURL)
		}
	}
}
