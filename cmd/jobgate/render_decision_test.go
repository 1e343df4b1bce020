package main

import (
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows/jobstate"
)

// TestPrintJobRejectionRecord: `jobs get` of a rejected job prints the rejecting answer's
// record (get_*'s decision), not only the job error.
func TestPrintJobRejectionRecord(t *testing.T) {
	at := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	j := &job{kind: "export", view: wire.JobView{JobSummary: wire.JobSummary{JobID: "acme/export/ana/k", Kind: "export",
		Status: jobstate.StatusCancelled, Owner: "ana",
		Error: &jobstate.JobError{Code: "rejected", Message: "rejected by steward: email is not needed"},
		Decision: &wire.Decision{Decision: "reject", By: "steward", Email: "steward@acme.example", At: at, Surface: "page",
			SignedInWith: "oidc-session", Meaning: "Allow ana@acme to export id and **email** of customers", ScopeDigest: "sha256:d9",
			Comment: "email is not needed", Sealed: true}}}}
	var b strings.Builder
	printJob(&b, j, "acme", at)
	for _, want := range []string{"rejected:", "decision:", "reject by steward (<steward@acme.example>)", "via page, signed in with oidc-session",
		"meaning shown:", "comment:", "email is not needed", "sha256:d9", "sealed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("jobs get lacks %q:\n%s", want, b.String())
		}
	}
}
