package tests

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// describeOut calls describe_job and decodes its result.
func describeOut(t *testing.T, o outcome) wire.DescribeJobOut {
	t.Helper()
	if o.Err != nil {
		t.Fatalf("describe_job: %+v", o.Err)
	}
	var d wire.DescribeJobOut
	if err := json.Unmarshal(o.Raw, &d); err != nil {
		t.Fatalf("describe_job result: %v\n%s", err, o.Raw)
	}
	return d
}

func storyHas(t *testing.T, who string, d wire.DescribeJobOut, wants ...string) {
	t.Helper()
	var b strings.Builder
	for _, l := range d.Lines {
		b.WriteString(l.Text + "\n")
	}
	for _, w := range wants {
		if !strings.Contains(b.String(), w) {
			t.Errorf("%s: timeline lacks %q:\n%s", who, w, b.String())
		}
	}
}

// TestDescribeJob: an export approved by a steward, told by describe_job on the real server —
// to its owner and to an admin; the approver (who may get the job while it waits for them),
// and another tenant, get the not_found of an unknown job; the CLI prints the timeline.
func TestDescribeJob(t *testing.T) {
	testenv.Heavy(t, "runs an export to the end and the jobgate CLI binary")
	t.Parallel()
	b, csAna, v, w := exAwaiting(t, "csv", "id", "name", "email")
	jobgateBinary(t)
	csSteward := b.session(steward, 1, "")
	mustView(t, exResume(t, csSteward, w, "approve"))
	exWait(t, csAna, v.Handle, workflows.StatusSucceeded, time.Minute)

	own := describeOut(t, call(t, csAna, "describe_job", map[string]any{"handle": v.Handle}))
	if own.JobID != v.JobID || own.Status != workflows.StatusSucceeded || own.Detail != "owner" || own.Runs != 1 ||
		own.EndedAt == nil || own.Cut != "" || own.Owner != "ana" {
		t.Fatalf("owner's describe: %+v", own)
	}
	storyHas(t, "owner", own, "started by ana: dataset customers, format csv", "waiting for approval (approver: approver",
		"approved by steward on tool", "plan 1 succeeded", "part 1 succeeded", "succeeded\n")

	adm := describeOut(t, call(t, b.session(ops, 0, ""), "describe_job", map[string]any{"handle": v.Handle}))
	if adm.Detail != "full" || len(adm.Lines) != len(own.Lines) {
		t.Fatalf("admin's describe: %+v", adm)
	}

	globex := principal{"globex", "ana", []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}}
	other := mustErrRaw(t, call(t, b.session(globex, 0, ""), "describe_job", map[string]any{"handle": v.Handle}), jobcore.CodeNotFound)
	if got := mustErrRaw(t, call(t, csSteward, "describe_job", map[string]any{"handle": v.Handle}), jobcore.CodeNotFound); got != other {
		t.Errorf("approver's not_found differs from another tenant's:\n%s\n%s", got, other)
	}
	if got := mustErrRaw(t, call(t, b.session(globex, 0, ""), "get_export", map[string]any{"handle": v.Handle}), jobcore.CodeNotFound); got != other {
		t.Errorf("describe_job's not_found differs from get_export's:\n%s\n%s", got, other)
	}
	mustErr(t, call(t, csAna, "describe_job", map[string]any{"handle": v.Handle, "max_lines": 5}), jobcore.CodeInvalidArgument)

	r := runCLI(t, b, b.token(ana), "jobs", "describe", v.Handle)
	r.mustSucceed(t, "jobs describe")
	for _, want := range []string{"export job " + v.JobID + " (owner ana): succeeded after ", "error detail: owner",
		"  +0:00:00  started by ana", "approved by steward on tool"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("jobs describe output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := runCLI(t, b, b.token(steward), "jobs", "describe", v.Handle); r.code == 0 || !strings.Contains(r.stderr, "not_found") {
		t.Errorf("steward's jobs describe: exit %d\n%s", r.code, r.stderr)
	}
}
