package tests

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"gocloud.dev/blob"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// retentionChild is the retention child an export job started: its workflow ID and its input,
// read from the parent's history, decoded as the delete it will run at expiry (RetentionInput
// and DeleteExportInput share their field names).
func retentionChild(t *testing.T, b *testBundle, jobID string) (string, contract.DeleteExportInput) {
	t.Helper()
	for _, ev := range acHistory(t, b, jobID) {
		if a := ev.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
			var in contract.DeleteExportInput
			must(t, b.converter().FromPayloads(a.GetInput(), &in))
			return a.GetWorkflowId(), in
		}
	}
	t.Fatalf("%s started no retention child", jobID)
	return "", contract.DeleteExportInput{}
}

// purge deletes a closed job's execution, as namespace retention does, and waits until
// Temporal no longer knows it (the embedded server takes about 30 s to run the delete task).
func purge(t *testing.T, b *testBundle, jobID string) {
	t.Helper()
	ctx, cancel := contextWithTimeout(20 * time.Second)
	defer cancel()
	_, err := b.temporal.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: jobID}})
	must(t, err)
	eventually(t, 150*time.Second, "the execution to be purged", func() bool {
		dctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		_, err := b.temporal.DescribeWorkflowExecution(dctx, jobID, "")
		var nf *serviceerror.NotFound
		return errors.As(err, &nf)
	})
}

// jsonlLines gunzips a jsonl artifact and returns its line count and whether any line holds key.
func jsonlLines(t *testing.T, gz []byte, key string) (n int, holds bool) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	must(t, err)
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		n++
		holds = holds || strings.Contains(sc.Text(), `"`+key+`":`)
	}
	must(t, sc.Err())
	return n, holds
}

// TestExportPurgedKeyReused: a finished export whose job Temporal purged (namespace retention
// shorter than the dataset's) while its artifact remains. The same owner reuses the key asking
// for fewer, non-sensitive columns (so no approval): she gets a fresh artifact of her own
// columns, never the old one with the sensitive column, and the old job's retention child,
// when it fires, deletes nothing of the new job's.
func TestExportPurgedKeyReused(t *testing.T) {
	testenv.Heavy(t, "waits about 30 s for the server to purge a job")
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	cs, csSteward := b.session(ana, 0, ""), b.session(steward, 1, "")
	key := uniqueKey(t)

	v1 := mustView(t, exStart(t, cs, key, "jsonl", []string{"id", "name", "email"}))
	w := exWait(t, cs, v1.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	mustView(t, exResume(t, csSteward, w, "approve"))
	r1 := exResult(t, exWait(t, cs, v1.Handle, workflows.StatusSucceeded, 60*time.Second))
	if r1.Rows != 5000 || strings.Join(r1.Columns, ",") != "id,name,email" {
		t.Fatalf("first export: %+v", r1)
	}
	oldChild, oldDelete := retentionChild(t, b, v1.JobID)
	purge(t, b, v1.JobID)

	v2 := mustView(t, exStart(t, cs, key, "jsonl", []string{"id", "name"}))
	if v2.JobID != v1.JobID || v2.Created == nil || !*v2.Created {
		t.Fatalf("the key after the purge: %+v", v2)
	}
	r2 := exResult(t, exWait(t, cs, v2.Handle, workflows.StatusSucceeded, 60*time.Second))
	if strings.Join(r2.Columns, ",") != "id,name" || r2.SHA256 == r1.SHA256 || r2.ApprovedBy != "" {
		t.Fatalf("the reused key got %+v (the old artifact is %s)", r2, r1.SHA256)
	}
	body := exDownloadAndCheck(t, b, ana, r2)
	if n, email := jsonlLines(t, body, "email"); n != 5000 || email {
		t.Fatalf("fresh artifact: %d rows, email column %v", n, email)
	}

	newChild, _ := retentionChild(t, b, v2.JobID)
	if newChild == oldChild {
		t.Fatalf("both job instances share the retention child %s", newChild)
	}
	ctx, cancel := contextWithTimeout(20 * time.Second)
	defer cancel()
	if d, err := b.temporal.DescribeWorkflowExecution(ctx, newChild, ""); err != nil ||
		d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the new job's retention child %s: %v %v", newChild, d.GetWorkflowExecutionInfo().GetStatus(), err)
	}

	// The old child fires: it runs the delete it was started with.
	store, err := activities.OpenArtifactStore(ctx, b.artifacts)
	must(t, err)
	t.Cleanup(func() { store.Close() })
	objects := func(prefix string) int {
		n := 0
		it := store.Bucket().List(&blob.ListOptions{Prefix: prefix})
		for {
			_, err := it.Next(ctx)
			if err == io.EOF {
				return n
			}
			must(t, err)
			n++
		}
	}
	oldPrefix := activities.ExportPrefix(oldDelete.JobID, oldDelete.FirstRunID)
	if objects(oldPrefix) == 0 {
		t.Fatalf("the old job's artifact is not under %s", oldPrefix)
	}
	must(t, (&activities.Activities{Artifacts: store}).DeleteExport(ctx, oldDelete))
	if n := objects(oldPrefix); n != 0 {
		t.Fatalf("the old job's retention left %d objects", n)
	}
	if again := exDownloadAndCheck(t, b, ana, exResult(t, mustView(t, call(t, cs, "get_export", map[string]any{"handle": v2.Handle})))); !bytes.Equal(again, body) {
		t.Fatal("the new artifact changed after the old job's retention")
	}
}

// TestExportSelfApprovalSwitchedOff: the dataset allowed self-approval when the job asked; it
// is switched off before the job plans. The re-asked request says so and the validator holds
// to it: the owner's answer is refused, nothing is read until another approver answers.
func TestExportSelfApprovalSwitchedOff(t *testing.T) {
	t.Parallel()
	db := demoDB(t)
	selfOK := func(on bool) string {
		return catalogJSON(t, demoDataset(db, func(d *contract.Dataset) { d.AllowSelfApproval = on }))
	}
	b := setup(t, setupOpts{datasetsJSON: selfOK(true)})
	anaApprover := principal{"acme", "ana", []authz.Scope{authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove}}
	cs, csSteward := b.session(anaApprover, 0, ""), b.session(steward, 1, "")
	v := mustView(t, exStart(t, cs, uniqueKey(t), "jsonl", []string{"id", "email"}))
	w := exWait(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	if !w.NeedsInput.SelfApproval {
		t.Fatalf("first request: %+v", w.NeedsInput)
	}

	// Four eyes back on; workers pick up the new catalog (the frontends keep the old one).
	b.stopWorker()
	must(t, os.WriteFile(b.datasets, []byte(selfOK(false)), 0o600))
	b.startWorker()
	mustView(t, exResume(t, cs, w, "approve")) // allowed by the request as it was asked

	again := reasked(t, cs, v.Handle, w.NeedsInput.InputID)
	if again.NeedsInput.SelfApproval {
		t.Fatalf("the re-asked request still allows self-approval: %+v", again.NeedsInput)
	}
	mustErr(t, exResume(t, cs, again, "approve"), jobcore.CodeForbidden)
	if n := b.queries.count("customers"); n != 0 {
		t.Fatalf("%d statements reached the dataset on the owner's own approval", n)
	}
	mustView(t, exResume(t, csSteward, again, "approve"))
	if r := exResult(t, exWait(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second)); r.ApprovedBy != "steward" || r.Rows != 5000 {
		t.Fatalf("result: %+v", r)
	}
}

// TestExportCatalogsDisagreeOnSelfApproval: the frontends' catalog allows self-approval, the
// workers' does not. The worker's wins: the job asks again without self-approval, and the
// owner cannot approve her own sensitive export.
func TestExportCatalogsDisagreeOnSelfApproval(t *testing.T) {
	t.Parallel()
	db := demoDB(t)
	b := setup(t, setupOpts{noWorker: true, datasetsJSON: catalogJSON(t, demoDataset(db, func(d *contract.Dataset) {
		d.AllowSelfApproval = true
	}))})
	must(t, os.WriteFile(b.datasets, []byte(catalogJSON(t, demoDataset(db, nil))), 0o600))
	b.startWorker()
	anaApprover := principal{"acme", "ana", []authz.Scope{authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove}}
	cs := b.session(anaApprover, 0, "")
	v := mustView(t, exStart(t, cs, uniqueKey(t), "csv", []string{"id", "name", "email"}))
	w := exWait(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	if o := exResume(t, cs, w, "approve"); o.Err == nil {
		// The frontend's request allowed it; the worker's plan must not let it through.
		again := reasked(t, cs, v.Handle, w.NeedsInput.InputID)
		if again.NeedsInput.SelfApproval {
			t.Fatalf("the worker's catalog lost: %+v", again.NeedsInput)
		}
		w = again
	}
	mustErr(t, exResume(t, cs, w, "approve"), jobcore.CodeForbidden)
	if n := b.queries.count("customers"); n != 0 {
		t.Fatalf("%d statements reached the dataset on the owner's own approval", n)
	}
	mustView(t, exResume(t, b.session(steward, 1, ""), w, "approve"))
	if r := exResult(t, exWait(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second)); r.ApprovedBy != "steward" {
		t.Fatalf("result: %+v", r)
	}
}

// reasked waits for an open input request other than oldID.
func reasked(t *testing.T, cs *mcp.ClientSession, h, oldID string) *jobcore.JobView {
	t.Helper()
	var v *jobcore.JobView
	eventually(t, 30*time.Second, "a second input request", func() bool {
		v = mustView(t, call(t, cs, "get_export", map[string]any{"handle": h}))
		if v.Status.Terminal() {
			t.Fatalf("export ended %s: %+v", v.Status, v.Error)
		}
		return v.Status == workflows.StatusAwaitingInput && v.NeedsInput != nil && v.NeedsInput.InputID != oldID
	})
	return v
}

// TestRetentionShorterThanDataset: against a real namespace, setup refuses a dataset that keeps
// artifacts longer than the namespace keeps closed jobs (unless --force), and a worker warns.
func TestRetentionShorterThanDataset(t *testing.T) {
	t.Parallel()
	long := contract.Datasets{"customers": demoDataset(demoDB(t), func(d *contract.Dataset) {
		d.Retention = contract.Duration(100 * 365 * 24 * time.Hour)
	})}
	c := app.SetupConfig{Address: temporalAddr, Namespace: namespace, Datasets: long, Timeout: time.Minute}
	var out bytes.Buffer
	if err := app.Setup(context.Background(), c, nil, &out); err == nil || !strings.Contains(err.Error(), `dataset "customers"`) ||
		!strings.Contains(err.Error(), "--force") {
		t.Fatalf("setup: %v\n%s", err, out.String())
	}
	c.Force = true
	out.Reset()
	if err := app.Setup(context.Background(), c, nil, &out); err != nil || !strings.Contains(out.String(), "warning (--force)") {
		t.Fatalf("setup --force: %v\n%s", err, out.String())
	}

	core, logs := observer.New(zap.WarnLevel)
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace,
		TaskQueue: "tq-" + randHex(6), Payloads: testPayloadKEK(t)}, Datasets: long, ArtifactsURL: "file://" + t.TempDir(),
		SigningKeys: "s1:" + handle.GenerateSigningSeedHex()}, Logger: zap.New(core)}
	must(t, w.Run(context.Background()))
	t.Cleanup(func() { _ = w.Close() })
	eventually(t, 30*time.Second, "the worker's retention warning", func() bool {
		for _, e := range logs.All() {
			if strings.Contains(e.Message, "namespace retention") && strings.Contains(fmt.Sprint(e.ContextMap()["problem"]), `"customers"`) {
				return true
			}
		}
		return false
	})
}

// operationID is episode i's operation ID in job jobID as jobgate builds it:
// "<job id>#<first run id>#<i>", the first run read from Temporal.
func operationID(t testing.TB, tc client.Client, jobID string, i int) string {
	t.Helper()
	ctx, cancel := contextWithTimeout(20 * time.Second)
	defer cancel()
	d, err := tc.DescribeWorkflowExecution(ctx, jobID, "")
	must(t, err)
	first := d.GetWorkflowExecutionInfo().GetFirstRunId()
	if first == "" {
		t.Fatalf("%s: no first run ID", jobID)
	}
	return fmt.Sprintf("%s#%s#%d", jobID, first, i)
}
