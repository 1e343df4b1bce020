package frontend

import (
	"context"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/workflows"
)

// TestResumeUpdateIDCoversTheAnswer: a retried resume with the same answer reuses its update ID
// (Temporal deduplicates it); another comment or another surface is another answer and must get
// another ID, or Temporal would hand back the first answer's outcome as if the second comment had
// been recorded (review 18, finding 15).
func TestResumeUpdateIDCoversTheAnswer(t *testing.T) {
	ms := memstore.New()
	f := newStoreFrontend(t, ms, jobcore.Options{Now: func() time.Time { return coreNow }})
	j := &jobstore.Job{ID: "acme/export/ana/k", RunID: "run-k", Tenant: "acme", Owner: "ana", Kind: workflows.KindExport, Exec: jobstore.RunRunning,
		SAStatus: workflows.StatusAwaitingInput, NeedsInput: &workflows.NeedsInput{InputID: "approve", Prompt: "p",
			ScopeDigest: "sha256:d", Approver: authz.ApproverApprover, RequestedBy: "ana"}}
	ms.Jobs[j.ID] = j
	ms.OnResume = func(*jobstore.Job, workflows.ResumeRequest) error { return nil } // leave it open: every call reaches the store
	p := authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove}}
	send := func(comment, surface string) string {
		t.Helper()
		if _, err := f.ResumeJob(context.Background(), p, j, jobcore.ResumeIn{InputID: "approve", ScopeDigest: "sha256:d",
			Decision: workflows.DecisionApprove, Comment: comment}, jobcore.Answerer{Surface: surface, SignedInWith: workflows.SignedInBearerJWT}, "p"); err != nil {
			t.Fatal(err)
		}
		return ms.Resumes[len(ms.Resumes)-1].UpdateID
	}
	first := send("ok for Q3", workflows.SurfaceTool)
	if again := send("ok for Q3", workflows.SurfaceTool); again != first {
		t.Fatalf("a retry of the same answer got another update ID: %s, %s", first, again)
	}
	if other := send("ok, but only Q3", workflows.SurfaceTool); other == first {
		t.Fatal("another comment reuses the first answer's update ID")
	}
	if other := send("ok for Q3", workflows.SurfacePage); other == first {
		t.Fatal("another surface reuses the first answer's update ID")
	}
}
