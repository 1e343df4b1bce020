package tests

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// runBin runs bin with the bundle's environment (as testBundle.spawn does for the normal build).
func (b *testBundle) runBin(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "JOBGATE_TEMPORAL_ADDRESS="+temporalAddr, "JOBGATE_TASK_QUEUE="+b.taskQueue, "JOBGATE_NAMESPACE="+namespace,
		"JOBGATE_DATASETS="+b.datasets, "JOBGATE_ARTIFACTS="+b.artifacts, "JOBGATE_RESUME_KEYS="+b.resumeKeySpec,
		"JOBGATE_SIGNING_KEYS="+b.signingKeySpec)
	cmd.Env = append(cmd.Env, b.payloadEnv()...)
	return startProc(t, cmd, false)
}

// wftBuilds lists the build ID stamped on every completed workflow task of a history, and the
// identities (pid@host) of the workers that started its activities; a failed workflow task
// (non-determinism included) fails the test.
func wftBuilds(t *testing.T, evs []*historypb.HistoryEvent, deployment string) (builds []string, actIdentities map[string]bool) {
	t.Helper()
	actIdentities = map[string]bool{}
	for _, e := range evs {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			a := e.GetWorkflowTaskCompletedEventAttributes()
			v := a.GetDeploymentVersion()
			if v.GetDeploymentName() != deployment {
				t.Errorf("event %d: workflow task completed by deployment %q, want %q", e.GetEventId(), v.GetDeploymentName(), deployment)
			}
			builds = append(builds, v.GetBuildId())
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			a := e.GetWorkflowTaskFailedEventAttributes()
			t.Errorf("event %d: workflow task failed (%v): %s", e.GetEventId(), a.GetCause(), a.GetFailure().GetMessage())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			actIdentities[e.GetActivityTaskStartedEventAttributes().GetIdentity()] = true
		}
	}
	return builds, actIdentities
}

// TestDeployPinnedJobsFinishOnTheirBuild is issue 20's deploy scenario with real processes: jobs
// start on worker build A; build B (a deliberately incompatible workflow change) becomes current
// through `jobgate deploy set-current`; A's jobs then resume and finish on A, new jobs run on B,
// and `jobgate deploy status` shows A with no open pinned job.
func TestDeployPinnedJobsFinishOnTheirBuild(t *testing.T) {
	testenv.Heavy(t, "builds two jobgate releases and runs them as worker processes")
	bins := buildGo(t, jobgateTarget, jobgateBreakingTarget)
	binA, binB := bins[0], bins[1]
	b := setup(t, setupOpts{noWorker: true, datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	dn := "deploytest-" + randHex(4)
	worker := func(bin, build string) *proc {
		return b.runBin(t, bin, "worker", "--deployment-name", dn, "--build-id", build, "--heartbeat-throttle", "500ms")
	}
	status := func() app.DeploymentStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := app.DeployStatus(ctx, b.temporal, namespace, dn)
		if err != nil {
			return app.DeploymentStatus{}
		}
		return st
	}
	deployCLI := func(args ...string) (string, error) {
		cmd := exec.Command(binA, append([]string{"deploy"}, append(args, "--deployment-name", dn)...)...)
		cmd.Env = append(os.Environ(), "JOBGATE_TEMPORAL_ADDRESS="+temporalAddr, "JOBGATE_NAMESPACE="+namespace)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// Version A: the first version of a new deployment makes itself current (no operator step).
	wA := worker(binA, "A")
	eventually(t, 60*time.Second, "build A current", func() bool {
		v, ok := status().Version("A")
		return ok && v.Role == "current"
	})
	csAna, csSteward := b.session(ana, 0, ""), b.session(steward, 1, "")
	evalA := mustView(t, call(t, csAna, "start_eval", acStartArgs(uniqueKey(t), "demo", acOverThreshold, 20, acFast)))
	exportA := mustView(t, exStart(t, csAna, uniqueKey(t), "jsonl", []string{"id", "name", "email"}))
	evalAWait := acAwaitInput(t, csAna, evalA.Handle, "owner")
	exportAWait := exWait(t, csAna, exportA.Handle, workflows.StatusAwaitingInput, 30*time.Second)

	// Version B joins; it gets nothing until the operator makes it current.
	wB := worker(binB, "B")
	var out string
	eventually(t, 60*time.Second, "jobgate deploy set-current B", func() bool {
		var err error
		out, err = deployCLI("set-current", "B")
		return err == nil
	})
	if !strings.Contains(out, "B is current") {
		t.Fatalf("set-current output: %s", out)
	}
	if st := status(); len(st.Versions) != 2 {
		t.Fatalf("status after set-current: %+v", st)
	}
	// New jobs, on B. The eval stays under the approval threshold and runs straight through.
	evalB := mustView(t, call(t, csAna, "start_eval", acStartArgs(uniqueKey(t), "demo", 20, 5, acFast)))
	exportB := mustView(t, exStart(t, csAna, uniqueKey(t), "csv", []string{"id", "name", "email"}))
	exportBWait := exWait(t, csAna, exportB.Handle, workflows.StatusAwaitingInput, 30*time.Second)

	// A's jobs continue: each answer is a workflow task A must run (B would fail to replay it).
	mustView(t, call(t, csAna, "resume_eval", acResumeArgs(evalAWait, "approve", nil)))
	mustView(t, exResume(t, csSteward, exportAWait, "approve"))
	mustView(t, exResume(t, csSteward, exportBWait, "approve"))
	for _, j := range []struct{ h, tool string }{{evalA.Handle, "eval"}, {exportA.Handle, "export"}, {evalB.Handle, "eval"}, {exportB.Handle, "export"}} {
		if j.tool == "eval" {
			waitStatus(t, csAna, j.h, workflows.StatusSucceeded, 90*time.Second)
		} else {
			exWait(t, csAna, j.h, workflows.StatusSucceeded, 90*time.Second)
		}
	}

	pid := func(p *proc) string { return strconv.Itoa(p.cmd.Process.Pid) + "@" }
	for _, j := range []struct {
		name, id, build string
		worker          *proc
	}{{"eval on A", evalA.JobID, "A", wA}, {"export on A", exportA.JobID, "A", wA},
		{"eval on B", evalB.JobID, "B", wB}, {"export on B", exportB.JobID, "B", wB}} {
		evs := history(t, b.temporal, j.id)
		builds, ids := wftBuilds(t, evs, dn)
		if len(builds) < 3 {
			t.Errorf("%s: only %d workflow tasks", j.name, len(builds))
		}
		for i, got := range builds {
			if got != j.build {
				t.Errorf("%s: workflow task %d ran on build %q, want %q (all: %v)", j.name, i, got, j.build, builds)
			}
		}
		if len(ids) == 0 {
			t.Errorf("%s: no activity ran", j.name)
		}
		for id := range ids {
			if !strings.HasPrefix(id, pid(j.worker)) {
				t.Errorf("%s: an activity ran on %s, want worker %s (pid %s)", j.name, id, j.build, pid(j.worker))
			}
		}
		// B's first command is the breaking change's 1 ms timer; A's histories have none (their
		// other timer is the approval's expiry).
		timers := 0
		for _, e := range evs {
			if a := e.GetTimerStartedEventAttributes(); a != nil && a.GetStartToFireTimeout().AsDuration() <= time.Millisecond {
				timers++
			}
		}
		if (j.build == "B") != (timers > 0) {
			t.Errorf("%s: %d breaking-change timers", j.name, timers)
		}
		if e := evs[len(evs)-1]; e.GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED {
			t.Errorf("%s: last event %v", j.name, e.GetEventType())
		}
		t.Logf("%s (%s): %d workflow tasks, all on build %s; activities by %v", j.name, j.id, len(builds), j.build, keys(ids))
	}

	// Drainage: A has no open pinned job, and the server's refresh (seconds in dev) says drained.
	eventually(t, 90*time.Second, "build A drained", func() bool {
		v, ok := status().Version("A")
		return ok && v.Pinned == 0 && v.Drainage == "drained"
	})
	out, err := deployCLI("status")
	if err != nil {
		t.Fatalf("deploy status: %v\n%s", err, out)
	}
	t.Logf("jobgate deploy status:\n%s", out)
	lineA, lineB := lineOf(out, "A "), lineOf(out, "B ")
	if !strings.Contains(lineA, "drained") || !strings.Contains(lineA, "may stop") || !strings.Contains(lineB, "current") {
		t.Fatalf("deploy status:\n%s", out)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func lineOf(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
