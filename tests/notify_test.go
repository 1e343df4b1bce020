package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/tests/support/webhookrecv"
	"github.com/jobgate/jobgate/workflows"
)

// webhookrecvTarget is the notification test receiver process (tests/support/webhookrecv).
var webhookrecvTarget = goTarget{"./support/webhookrecv/cmd/webhookrecv", "webhookrecv", ""}

// notifyFixture is a receiver's address and state directory and the tenants file naming it as
// acme's endpoint (both events, allow_private: the receiver is on loopback).
type notifyFixture struct {
	addr, dir, secretFile, tenantsFile string
}

func newNotifyFixture(t *testing.T) *notifyFixture {
	t.Helper()
	d := t.TempDir()
	f := &notifyFixture{addr: freeAddr(t), dir: filepath.Join(d, "recv"), secretFile: filepath.Join(d, "secret"),
		tenantsFile: filepath.Join(d, "tenants.json")}
	must(t, os.WriteFile(f.secretFile, []byte("whsec_"+"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"+"\n"), 0o600))
	must(t, os.WriteFile(f.tenantsFile, []byte(fmt.Sprintf(`{"defaults":{},"notify":{"acme":[{"name":"recv",
		"url":"http://%s/hooks","secret_file":%q,"events":["approval.requested","job.finished"],"allow_private":true}]}}`,
		f.addr, f.secretFile)), 0o600))
	return f
}

// receiver starts the receiver process on the fixture's address with its faults.
func (f *notifyFixture) receiver(t *testing.T, args ...string) *proc {
	t.Helper()
	bin := buildGo(t, webhookrecvTarget)[0]
	p := startProc(t, exec.Command(bin, append([]string{"-addr", f.addr, "-dir", f.dir, "-secret-file", f.secretFile}, args...)...), true)
	waitTCP(t, f.addr, 30*time.Second)
	return p
}

func (f *notifyFixture) attempts(t *testing.T) []webhookrecv.Attempt {
	a, err := webhookrecv.ReadAttempts(f.dir)
	must(t, err)
	return a
}

func (f *notifyFixture) events(t *testing.T) []webhookrecv.Event {
	e, err := webhookrecv.ReadEvents(f.dir)
	must(t, err)
	return e
}

// worker runs an in-process worker reading the fixture's tenants file, with metrics.
func (f *notifyFixture) worker(t *testing.T, b *testBundle) *app.WorkerMain {
	t.Helper()
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace,
		TaskQueue: b.taskQueue, Payloads: b.payloads()}, MaxConcurrentEpisodes: 10, TenantsFile: f.tenantsFile, PublicURL: "https://jobgate.test",
		MetricsListen: "127.0.0.1:0"}, ResumeKeys: b.resumeKeys, SigningKeys: b.signingKeys}
	must(t, w.Run(context.Background()))
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// askingEval starts a demo eval above the owner-approval threshold: it waits for ana's answer.
func askingEval(t *testing.T, b *testBundle) (handle, jobID string) {
	t.Helper()
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 101, nil)))
	v = waitStatus(t, cs, v.Handle, workflows.StatusAwaitingInput, time.Minute)
	return v.Handle, v.JobID
}

// checkApprovalEvent: the one accepted event is acme's approval.requested of jobID, with its
// stable ID, a deep link and the meaning, and no handle or row data.
func checkApprovalEvent(t *testing.T, ev webhookrecv.Event, jobID, firstRun, h string) {
	t.Helper()
	var body struct {
		Type string            `json:"type"`
		Data map[string]string `json:"data"`
	}
	must(t, json.Unmarshal(ev.Body, &body))
	d := body.Data
	if body.Type != authz.EventApprovalRequested || d["tenant"] != "acme" || d["job_id"] != jobID || d["kind"] != "eval" ||
		d["approver"] != "owner" || !strings.HasPrefix(d["input_id"], "approve-") || d["expires_at"] == "" ||
		!strings.Contains(d["meaning"], "101 episodes") || !strings.HasPrefix(d["link"], "https://jobgate.test/approvals/acme%2Feval%2F") {
		t.Fatalf("event body %s", ev.Body)
	}
	if want := workflows.NotifyEventID(jobID, firstRun, authz.EventApprovalRequested, d["input_id"]); ev.WebhookID != want || d["event_id"] != want {
		t.Fatalf("webhook-id %s, want %s", ev.WebhookID, want)
	}
	if strings.Contains(string(ev.Body), h) || strings.Contains(string(ev.Body), "handle") {
		t.Fatalf("event carries a handle: %s", ev.Body)
	}
}

func firstRunOf(t *testing.T, b *testBundle, jobID string) string {
	d, err := b.temporal.DescribeWorkflowExecution(context.Background(), jobID, "")
	must(t, err)
	if r := d.GetWorkflowExecutionInfo().GetFirstRunId(); r != "" {
		return r
	}
	return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// notifyActivities counts the job's Notify activities scheduled and the attempt that completed.
func notifyActivities(t *testing.T, b *testBundle, jobID string) (scheduled int, lastAttempt int32) {
	it := b.temporal.GetWorkflowHistory(context.Background(), jobID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	ids := map[int64]bool{}
	for it.HasNext() {
		e, err := it.Next()
		must(t, err)
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == contract.NotifyActivityName {
				scheduled++
				ids[e.GetEventId()] = true
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if a := e.GetActivityTaskStartedEventAttributes(); ids[a.GetScheduledEventId()] {
				lastAttempt = a.GetAttempt()
			}
		}
	}
	return scheduled, lastAttempt
}

// TestNotifyRetriedDeliveryIsOneEvent: the receiver answers 500 twice; the job's approval
// request still reaches it as one logical event (the same signed webhook-id on all three
// attempts, one Notify activity in history), the job never waits for it, and the metric counts
// the outcomes. Cancelling the job then sends job.finished (opted in) once, under its own ID.
func TestNotifyRetriedDeliveryIsOneEvent(t *testing.T) {
	t.Parallel()
	f := newNotifyFixture(t)
	f.receiver(t, "-fail-first", "2")
	b := setup(t, setupOpts{noWorker: true})
	w := f.worker(t, b)
	h, jobID := askingEval(t, b)
	eventually(t, time.Minute, "the approval event accepted", func() bool { return len(f.events(t)) == 1 })
	evs, atts := f.events(t), f.attempts(t)
	checkApprovalEvent(t, evs[0], jobID, firstRunOf(t, b, jobID), h)
	if len(atts) != 3 {
		t.Fatalf("%d attempts, want 3 (two 500s, then accepted): %+v", len(atts), atts)
	}
	for _, a := range atts {
		if !a.Valid || a.WebhookID != evs[0].WebhookID {
			t.Fatalf("attempt %+v: want a valid signature and webhook-id %s on every attempt", a, evs[0].WebhookID)
		}
	}
	eventually(t, 30*time.Second, "the Notify activity completed on attempt 3", func() bool {
		n, last := notifyActivities(t, b, jobID)
		return n == 1 && last == 3
	})
	m := scrape(t, w.MetricsAddr())
	for _, want := range []string{`jobgate_notify_deliveries_total{endpoint="recv",outcome="retry"} 2`,
		`jobgate_notify_deliveries_total{endpoint="recv",outcome="delivered"} 1`} {
		if !strings.Contains(m, want) {
			t.Fatalf("worker /metrics lacks %s:\n%s", want, grepLines(m, "jobgate_notify"))
		}
	}

	cs := b.session(ana, 1, "")
	call(t, cs, "cancel_eval", map[string]any{"handle": h})
	waitStatus(t, cs, h, workflows.StatusCancelled, time.Minute)
	eventually(t, time.Minute, "the job.finished event accepted", func() bool { return len(f.events(t)) == 2 })
	var fin struct {
		Type string            `json:"type"`
		Data map[string]string `json:"data"`
	}
	ev := f.events(t)[1]
	must(t, json.Unmarshal(ev.Body, &fin))
	if fin.Type != authz.EventJobFinished || fin.Data["status"] != "cancelled" || fin.Data["error_code"] != "cancelled" || fin.Data["job_id"] != jobID ||
		ev.WebhookID != workflows.NotifyEventID(jobID, firstRunOf(t, b, jobID), authz.EventJobFinished, "") {
		t.Fatalf("job.finished event %s (id %s)", ev.Body, ev.WebhookID)
	}
	replayWithoutNotifier(t, b, jobID)
	t.Logf("attempts %d, events %d; metrics:\n%s", len(f.attempts(t)), len(f.events(t)), grepLines(m, "jobgate_notify_deliveries_total"))
}

// TestNotifyReceiverDownGetsEventLater: the receiver is down when the job asks; the delivery
// keeps failing and retrying with backoff, and once the receiver is up it gets the event, once.
func TestNotifyReceiverDownGetsEventLater(t *testing.T) {
	t.Parallel()
	f := newNotifyFixture(t)
	b := setup(t, setupOpts{noWorker: true})
	f.worker(t, b)
	h, jobID := askingEval(t, b)
	eventually(t, time.Minute, "the delivery failing twice", func() bool {
		d, err := b.temporal.DescribeWorkflowExecution(context.Background(), jobID, "")
		must(t, err)
		for _, p := range d.GetPendingActivities() {
			if p.GetActivityType().GetName() == contract.NotifyActivityName && p.GetAttempt() >= 3 && p.GetLastFailure() != nil {
				return true
			}
		}
		return false
	})
	f.receiver(t)
	eventually(t, 2*time.Minute, "the event accepted after the receiver came up", func() bool { return len(f.events(t)) == 1 })
	checkApprovalEvent(t, f.events(t)[0], jobID, firstRunOf(t, b, jobID), h)
	// A retried activity's started event is written when it completes.
	eventually(t, 30*time.Second, "one Notify activity, completed on a retry", func() bool {
		n, last := notifyActivities(t, b, jobID)
		return n == 1 && last >= 3
	})
	if v := mustView(t, call(t, b.session(ana, 0, ""), "get_eval", map[string]any{"handle": h})); v.Status != workflows.StatusAwaitingInput {
		t.Fatalf("job status %s while notifying, want awaiting_input", v.Status)
	}
	_, last := notifyActivities(t, b, jobID)
	t.Logf("receiver down for %d attempts; accepted on attempt %d; receiver saw %d request(s)", last-1, last, len(f.attempts(t)))
}

// TestNotifyWorkerSIGKILLMidDelivery: the worker process dies while its delivery is in flight
// (the receiver holds the request); another worker retries after the heartbeat timeout with the
// same webhook-id, and the receiver accepts the logical event exactly once.
func TestNotifyWorkerSIGKILLMidDelivery(t *testing.T) {
	t.Parallel()
	f := newNotifyFixture(t)
	f.receiver(t, "-stall-first", "1")
	b := setup(t, setupOpts{noWorker: true})
	w1 := b.spawn(t, "worker", "--tenants", f.tenantsFile, "--public-url", "https://jobgate.test")
	h, jobID := askingEval(t, b)
	eventually(t, time.Minute, "the first delivery held by the receiver", func() bool { return len(f.attempts(t)) >= 1 })
	w1.kill(t)
	b.spawn(t, "worker", "--tenants", f.tenantsFile, "--public-url", "https://jobgate.test")
	eventually(t, 2*time.Minute, "the event accepted from the second worker", func() bool { return len(f.events(t)) == 1 })
	evs, atts := f.events(t), f.attempts(t)
	checkApprovalEvent(t, evs[0], jobID, firstRunOf(t, b, jobID), h)
	if len(atts) < 2 || atts[0].Status != 0 {
		t.Fatalf("attempts %+v: want the held one, then a retry", atts)
	}
	for _, a := range atts {
		if !a.Valid || a.WebhookID != evs[0].WebhookID {
			t.Fatalf("attempt %+v: want webhook-id %s on every attempt", a, evs[0].WebhookID)
		}
	}
	if n, _ := notifyActivities(t, b, jobID); n != 1 {
		t.Fatalf("%d Notify activities, want 1", n)
	}
	t.Logf("attempts across the SIGKILL: %d, one event %s", len(atts), evs[0].WebhookID)
}

// TestNotifyDisallowedURLRefusedAtLoad: a worker given a tenants file whose endpoint is on
// loopback without allow_private does not start; the error is one line naming the field.
func TestNotifyDisallowedURLRefusedAtLoad(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tenants.json")
	must(t, os.WriteFile(file, []byte(`{"defaults":{},"notify":{"acme":[{"url":"http://127.0.0.1:9/hooks","secret_file":"s"}]}}`), 0o600))
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace,
		TaskQueue: "tq-" + randHex(6)}, TenantsFile: file}}
	err := w.Run(context.Background())
	if err == nil {
		_ = w.Close()
		t.Fatal("worker started with a loopback endpoint")
	}
	want := `tenants file: notify.acme[0].url: "http://127.0.0.1:9" names a loopback address; set "allow_private": true on this endpoint to allow it`
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

// replayWithoutNotifier replays the job's closed history on a worker that has no notification
// endpoints at all: the recorded SideEffect, not the worker's config, decides, so it replays.
func replayWithoutNotifier(t *testing.T, b *testBundle, jobID string) {
	t.Helper()
	it := b.temporal.GetWorkflowHistory(context.Background(), jobID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	hist := &historypb.History{}
	for it.HasNext() {
		e, err := it.Next()
		must(t, err)
		hist.Events = append(hist.Events, e)
	}
	r := b.replayer(t)
	r.RegisterWorkflowWithOptions((&workflows.Workflows{}).Eval, workflow.RegisterOptions{Name: workflows.EvalWorkflowName})
	must(t, r.ReplayWorkflowHistoryWithOptions(nil, hist, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: jobID}}))
}

// TestNotifyCancelledWithTheJob: while the receiver is down, the job is cancelled; its
// pending approval delivery is cancelled with it, and the receiver, once up, is never told of
// the request (only, as opted in, that the job ended).
func TestNotifyCancelledWithTheJob(t *testing.T) {
	t.Parallel()
	f := newNotifyFixture(t)
	b := setup(t, setupOpts{noWorker: true})
	f.worker(t, b)
	h, jobID := askingEval(t, b)
	eventually(t, time.Minute, "the delivery failing", func() bool {
		d, err := b.temporal.DescribeWorkflowExecution(context.Background(), jobID, "")
		must(t, err)
		for _, p := range d.GetPendingActivities() {
			if p.GetActivityType().GetName() == contract.NotifyActivityName && p.GetLastFailure() != nil {
				return true
			}
		}
		return false
	})
	cs := b.session(ana, 0, "")
	call(t, cs, "cancel_eval", map[string]any{"handle": h})
	waitStatus(t, cs, h, workflows.StatusCancelled, time.Minute)
	cancelRequested := 0
	it := b.temporal.GetWorkflowHistory(context.Background(), jobID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		must(t, err)
		if e.GetEventType() == enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED {
			cancelRequested++
		}
	}
	if cancelRequested != 1 {
		t.Fatalf("%d activity cancel requests in the job's history, want 1 (the delivery)", cancelRequested)
	}
	f.receiver(t)
	eventually(t, 2*time.Minute, "job.finished accepted", func() bool { return len(f.events(t)) >= 1 })
	for _, ev := range f.events(t) {
		if strings.Contains(string(ev.Body), authz.EventApprovalRequested) {
			t.Fatalf("the cancelled job's approval request was still sent: %s", ev.Body)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !regexp.MustCompile(`^#`).MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
