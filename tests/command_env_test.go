package tests

// Issue 15 finding 4: command episodes are caller-influenced code and must not inherit the
// worker's secrets; they can run on workers of their own that hold no dataset or artifact
// credentials (jobgate worker --kinds eval, suites' task_queue).

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

// cmdEnvSecrets are credentials a worker typically holds for datasets and artifact stores.
var cmdEnvSecrets = map[string]string{
	"AWS_SECRET_ACCESS_KEY": "aws-secret-0123456789",
	"PGPASSWORD":            "pg-secret-0123456789",
	"AZURE_STORAGE_KEY":     "azure-secret-0123456789",
	// The worker's own settings may point at secrets too.
	"JOBGATE_HANDLE_KEYS_FILE": "/run/secrets/handle-keys",
}

// cmdEnvWorkerEnv sets the worker process's environment (the in-process workers share the
// test's): the secrets above and known values of the variables commands may see.
func cmdEnvWorkerEnv(t *testing.T) {
	for k, v := range cmdEnvSecrets {
		t.Setenv(k, v)
	}
	t.Setenv("HOME", "/home/jobgate-worker")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("LC_ALL", "C.UTF-8")
	t.Setenv("TZ", "UTC")
	t.Setenv("OPENAI_API_KEY", "sk-named-by-the-suite")
}

// cmdEnvSuite is a command suite whose episodes copy their exact environment (as jobgate
// exec'd the shell: /proc/<pid>/environ, before the shell adds anything) to dir/env-<index>.
// extra is spliced into the suite object.
func cmdEnvSuite(t *testing.T, extra string) (suitesJSON, dir string) {
	t.Helper()
	dir = t.TempDir()
	script := filepath.Join(dir, "episode.sh")
	must(t, os.WriteFile(script, []byte(`#!/bin/sh
set -e
cp "/proc/$$/environ" "`+dir+`/env-$JOBGATE_EPISODE_INDEX"
echo '{"score": 1}'
`), 0o700))
	return fmt.Sprintf(`{"suites":[{"name":"cmd","kind":"command","command":["sh",%q],"heartbeat_timeout":"5s"%s}]}`, script, extra), dir
}

// cmdEnvRead parses the environment episode i recorded.
func cmdEnvRead(t *testing.T, dir string, i int) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("env-%d", i)))
	must(t, err)
	env := map[string]string{}
	for _, kv := range bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0}) {
		k, v, _ := strings.Cut(string(kv), "=")
		env[k] = v
	}
	return env
}

// cmdEnvCheck asserts an episode's environment is exactly the allow-list plus extra names.
func cmdEnvCheck(t *testing.T, env map[string]string, jobID string, i int, extra ...string) {
	t.Helper()
	for k := range cmdEnvSecrets {
		if v, ok := env[k]; ok {
			t.Errorf("episode %d sees the worker's %s=%s", i, k, v)
		}
	}
	for _, v := range env {
		for _, secret := range cmdEnvSecrets {
			if strings.Contains(v, secret) {
				t.Errorf("episode %d sees a secret's value in %q", i, v)
			}
		}
	}
	want := []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ",
		"JOBGATE_JOB_ID", "JOBGATE_EPISODE_INDEX", "JOBGATE_OPERATION_ID", "JOBGATE_ATTEMPT", "JOBGATE_PARAMS"}
	want = append(want, extra...)
	if got := slices.Sorted(maps.Keys(env)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("episode %d environment has %v, want exactly %v", i, got, slices.Sorted(slices.Values(want)))
	}
	for _, k := range []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ"} {
		if env[k] != os.Getenv(k) {
			t.Errorf("episode %d: %s=%q, the worker has %q", i, k, env[k], os.Getenv(k))
		}
	}
	if env["JOBGATE_JOB_ID"] != jobID || env["JOBGATE_EPISODE_INDEX"] != fmt.Sprint(i) ||
		!isOperationID(env["JOBGATE_OPERATION_ID"], jobID, i) {
		t.Errorf("episode %d: JOBGATE_* variables %v", i, env)
	}
}

// TestCommandEnvHidesWorkerSecrets: a real eval job's command episodes (real subprocesses) see
// PATH, HOME, the locale and their JOBGATE_* variables, and none of the worker's secrets.
func TestCommandEnvHidesWorkerSecrets(t *testing.T) {
	cmdEnvWorkerEnv(t)
	suites, dir := cmdEnvSuite(t, "")
	b := setup(t, setupOpts{suitesJSON: suites})
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", acStartArgs(uniqueKey(t), "cmd", 2, 2, nil)))
	done := waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 30*time.Second)
	if res := acResult(t, done); res.Scored != 2 {
		t.Fatalf("result %+v", res)
	}
	for i := range 2 {
		cmdEnvCheck(t, cmdEnvRead(t, dir, i), v.JobID, i)
	}
}

// TestCommandEpisodesOnSuiteQueue: a suite with a task_queue has its episodes dispatched there
// (ActivityTaskScheduled in history), where a worker started with kinds=eval and no dataset or
// artifact store runs them; the suite's env names reach the command, nothing else does.
func TestCommandEpisodesOnSuiteQueue(t *testing.T) {
	cmdEnvWorkerEnv(t)
	queue := "tq-episodes-" + randHex(6)
	suites, dir := cmdEnvSuite(t, fmt.Sprintf(`,"env":["OPENAI_API_KEY","NOT_SET_ON_THE_WORKER"],"task_queue":%q`, queue))
	b := setup(t, setupOpts{suitesJSON: suites})
	ew := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace,
		TaskQueue: queue, Payloads: b.payloads()}, SuitesFile: b.suites, MaxConcurrentEpisodes: 10, Kinds: []string{workflows.KindEval}}}
	must(t, ew.Run(context.Background()))
	t.Cleanup(func() { _ = ew.Close() })

	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", acStartArgs(uniqueKey(t), "cmd", 3, 3, nil)))
	done := waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 30*time.Second)
	if res := acResult(t, done); res.Scored != 3 {
		t.Fatalf("result %+v", res)
	}
	scheduled := 0
	for _, e := range acHistory(t, b, v.JobID) {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			if q := e.GetWorkflowExecutionStartedEventAttributes().GetTaskQueue().GetName(); q != b.taskQueue {
				t.Errorf("workflow on task queue %q, want the deployment's %q", q, b.taskQueue)
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := e.GetActivityTaskScheduledEventAttributes()
			if a.GetActivityType().GetName() != "RunEpisode" {
				// The episode log is written on the job's own queue, by a worker with the artifact store.
				if q := a.GetTaskQueue().GetName(); q != b.taskQueue {
					t.Errorf("%s scheduled on task queue %q, want the deployment's %q", a.GetActivityType().GetName(), q, b.taskQueue)
				}
				continue
			}
			scheduled++
			if q := a.GetTaskQueue().GetName(); q != queue {
				t.Errorf("episode scheduled on task queue %q, want the suite's %q", q, queue)
			}
		}
	}
	if scheduled != 3 {
		t.Errorf("%d episodes scheduled, want 3", scheduled)
	}
	for i := range 3 {
		env := cmdEnvRead(t, dir, i)
		cmdEnvCheck(t, env, v.JobID, i, "OPENAI_API_KEY")
		if env["OPENAI_API_KEY"] != "sk-named-by-the-suite" {
			t.Errorf("episode %d: OPENAI_API_KEY=%q", i, env["OPENAI_API_KEY"])
		}
	}
}

// TestCommandWorkerKindsEvalServesNoExport: a worker started with kinds=eval registers the eval
// workflow and the episode activity only. An export started on its queue is never run: the
// worker fails its workflow task as an unknown type (its log says so: the SDK encodes a
// workflow task's failure without the workflow's context, so a sealing worker withholds the
// message in history), and no activity is scheduled.
func TestCommandWorkerKindsEvalServesNoExport(t *testing.T) {
	t.Parallel()
	queue := "tq-evalonly-" + randHex(6)
	core, logs := observer.New(zap.WarnLevel)
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace,
		TaskQueue: queue, Payloads: testPayloadKEK(t)}, MaxConcurrentEpisodes: 10, Kinds: []string{workflows.KindEval}},
		Logger: zap.New(core)}
	must(t, w.Run(context.Background()))
	t.Cleanup(func() { _ = w.Close() })
	// Plus the notification delivery every kind's jobs use.
	want := []string{"activity:" + contract.DeleteEpisodesActivityName, "activity:" + contract.NotifyActivityName, "activity:" + contract.NotifyProgressActivityName,
		"activity:RunEpisode", "activity:WriteEpisodes", "workflow:" + workflows.EvalWorkflowName, "workflow:" + workflows.EpisodeRetentionWorkflowName,
		"workflow:" + workflows.NotifyWorkflowName, "workflow:" + workflows.NotifyProgressWorkflowName}
	if got := w.Registered(); len(got) != 1 || !slices.Equal(slices.Sorted(slices.Values(got[queue])), want) {
		t.Fatalf("registered %v, want only %v on %s", got, want, queue)
	}

	c, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: namespace})
	must(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := "acme/export/evalonly-" + randHex(4)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.ExportWorkflowName,
		workflows.ExportInput{Tenant: "acme", Owner: "ana"})
	must(t, err)
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), id, run.GetRunID(), "test over") })

	var failure string
	eventually(t, 20*time.Second, "the eval-only worker to refuse the export's workflow task", func() bool {
		it := c.GetWorkflowHistory(ctx, id, run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			must(t, err)
			switch e.GetEventType() {
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				t.Fatalf("the eval-only worker ran the export: %s", e.GetEventType())
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
				failure = e.GetWorkflowTaskFailedEventAttributes().GetFailure().GetMessage()
				return true
			}
		}
		return false
	})
	if strings.Contains(failure, "Supported types: ["+workflows.ExportWorkflowName) {
		t.Fatalf("workflow task failure %q lists the export type as supported", failure)
	}
	var logged string
	eventually(t, 10*time.Second, "the worker to log why it failed the export's workflow task", func() bool {
		for _, e := range logs.FilterMessage("Failed to process workflow task.").All() {
			if fmt.Sprint(e.ContextMap()["WorkflowID"]) == id {
				logged = fmt.Sprint(e.ContextMap()["Error"])
				return true
			}
		}
		return false
	})
	if !strings.Contains(logged, "unable to find workflow type: "+workflows.ExportWorkflowName) || strings.Contains(logged, "Supported types: ["+workflows.ExportWorkflowName) {
		t.Fatalf("the worker logged %q (history: %q), want the export type unknown", logged, failure)
	}
	d, err := c.DescribeWorkflowExecution(ctx, id, run.GetRunID())
	must(t, err)
	if s := d.GetWorkflowExecutionInfo().GetStatus(); s != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("export status %s, want still running (not served)", s)
	}
}

// TestCommandDevWorkerServesSuiteQueues: with ServeSuiteQueues (jobgate dev) one worker also
// polls every suite's task queue, serving only the eval kind there, so dev runs every episode.
func TestCommandDevWorkerServesSuiteQueues(t *testing.T) {
	t.Parallel()
	queue, suiteQueue := "tq-dev-"+randHex(6), "tq-dev-episodes-"+randHex(6)
	suites := filepath.Join(t.TempDir(), "suites.json")
	must(t, os.WriteFile(suites, []byte(fmt.Sprintf(`{"suites":[{"name":"q","kind":"demo","task_queue":%q}]}`, suiteQueue)), 0o600))
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace,
		TaskQueue: queue, Payloads: testPayloadKEK(t)}, SuitesFile: suites, MaxConcurrentEpisodes: 10, ServeSuiteQueues: true,
		SigningKeys: "s1:" + handle.GenerateSigningSeedHex()}}
	must(t, w.Run(context.Background()))
	t.Cleanup(func() { _ = w.Close() })
	got := w.Registered()
	if len(got) != 2 || !slices.Contains(got[queue], "workflow:"+workflows.ExportWorkflowName) ||
		!slices.Equal(slices.Sorted(slices.Values(got[suiteQueue])), []string{"activity:" + contract.DeleteEpisodesActivityName, "activity:RunEpisode",
			"activity:WriteEpisodes", "workflow:" + workflows.EvalWorkflowName, "workflow:" + workflows.EpisodeRetentionWorkflowName}) {
		t.Fatalf("registered %v: want every kind on %s and only eval on %s", got, queue, suiteQueue)
	}
}

// isOperationID reports whether op is episode i's operation ID of job jobID:
// <job>#<first run ID>#<i>, scoped to the job instance.
func isOperationID(op, jobID string, i int) bool {
	run, ok := strings.CutPrefix(op, jobID+"#")
	if !ok {
		return false
	}
	run, ok = strings.CutSuffix(run, fmt.Sprintf("#%d", i))
	return ok && run != "" && !strings.Contains(run, "#")
}
