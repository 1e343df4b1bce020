package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/tests/support/webhookrecv"
	"github.com/jobgate/jobgate/workflows"
)

// progressBody is what a job.progress or job.finished body says.
type progressBody struct {
	Type string `json:"type"`
	Data struct {
		EventID  string                  `json:"event_id"`
		JobID    string                  `json:"job_id"`
		Status   string                  `json:"status"`
		Link     string                  `json:"link"`
		Progress *contract.EventProgress `json:"progress"`
	} `json:"data"`
}

// progressRun is an eval of ~20s (40 episodes of 1s, 2 at a time) whose tenant's endpoint
// opted in to job.progress and job.finished with progress_every 5s, run to its end and until
// its notifier closed, and what the real signed receiver recorded.
type progressRun struct {
	b                         *testBundle
	jobID, firstRun, notifier string
	total                     int
	evs                       []webhookrecv.Event
	atts                      []webhookrecv.Attempt
}

func runProgressEval(t *testing.T, receiverArgs ...string) progressRun {
	t.Helper()
	f := newProgressFixture(t)
	f.receiver(t, receiverArgs...)
	b := setup(t, setupOpts{noWorker: true})
	f.worker(t, b)
	cs, h := startProgressEval(t, b, 40)
	waitStatus(t, cs, h, workflows.StatusSucceeded, 3*time.Minute)
	return finishedProgressRun(t, f, b, cs, h)
}

// newProgressFixture is a notifyFixture whose endpoint wants job.progress (5s) and job.finished.
func newProgressFixture(t *testing.T) *notifyFixture {
	f := newNotifyFixture(t)
	must(t, os.WriteFile(f.tenantsFile, []byte(fmt.Sprintf(`{"defaults":{},"notify":{"acme":[{"name":"recv",
		"url":"http://%s/hooks","secret_file":%q,"events":["job.progress","job.finished"],"progress_every":"5s","allow_private":true}]}}`,
		f.addr, f.secretFile)), 0o600))
	return f
}

// startProgressEval starts ana's eval of n episodes of 1s, 2 at a time.
func startProgressEval(t *testing.T, b *testBundle, n int) (*mcp.ClientSession, string) {
	cs := b.session(ana, 0, "")
	args := startArgs(uniqueKey(t), n, map[string]any{"episode_ms": 1000, "fail_rate": 0})
	args["concurrency"] = 2
	return cs, mustView(t, call(t, cs, "start_eval", args)).Handle
}

// finishedProgressRun waits for the succeeded job's notifier to close and reads the receiver.
func finishedProgressRun(t *testing.T, f *notifyFixture, b *testBundle, cs *mcp.ClientSession, h string) progressRun {
	t.Helper()
	v := waitStatus(t, cs, h, workflows.StatusSucceeded, 3*time.Minute)
	r := progressRun{b: b, jobID: v.JobID, firstRun: firstRunOf(t, b, v.JobID), total: v.Progress.Total}
	r.notifier = r.jobID + "/progress/" + r.firstRun
	eventually(t, 2*time.Minute, "the notifier closed", func() bool {
		d, err := b.temporal.DescribeWorkflowExecution(context.Background(), r.notifier, "")
		must(t, err)
		return d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	r.evs, r.atts = f.events(t), f.attempts(t)
	return r
}

// check asserts what holds for every run: every attempt validly signed; each accepted event
// under its own webhook-id (the body's event_id); job.progress events of the running job, done
// never going back, each under the webhook-id derived from job and state; job.finished last,
// and no attempt after it (the notifier has closed: nothing more can come). It returns the
// job.progress bodies and when each was first accepted.
func (r progressRun) check(t *testing.T) ([]progressBody, []time.Time) {
	t.Helper()
	var progress []progressBody
	var times []time.Time
	at := map[string]time.Time{} // first accepted attempt of each webhook-id
	for _, a := range r.atts {
		if !a.Valid {
			t.Fatalf("attempt %+v: signature not valid", a)
		}
		if _, ok := at[a.WebhookID]; !ok && a.Status == 204 {
			at[a.WebhookID] = a.At
		}
	}
	ids := map[string]bool{}
	for i, ev := range r.evs {
		var body progressBody
		must(t, json.Unmarshal(ev.Body, &body))
		if ids[ev.WebhookID] || body.Data.EventID != ev.WebhookID || body.Data.JobID != r.jobID {
			t.Fatalf("event %d %s: webhook-id %s repeated or not the body's", i, ev.Body, ev.WebhookID)
		}
		ids[ev.WebhookID] = true
		if i == len(r.evs)-1 {
			if body.Type != authz.EventJobFinished || body.Data.Status != "succeeded" ||
				ev.WebhookID != workflows.NotifyEventID(r.jobID, r.firstRun, authz.EventJobFinished, "") {
				t.Fatalf("last event %s, want job.finished", ev.Body)
			}
			continue
		}
		p := body.Data.Progress
		if body.Type != authz.EventJobProgress || p == nil || body.Data.Status != "running" || p.Total != r.total || p.Unit != "episodes" {
			t.Fatalf("event %d %s, want job.progress of a running job", i, ev.Body)
		}
		key := fmt.Sprintf("%s|%d|%d|%d|%s", body.Data.Status, p.Done, p.Failed, p.Total, p.Message)
		if ev.WebhookID != contract.EventID(r.jobID, r.firstRun, authz.EventJobProgress, key) {
			t.Fatalf("event %d: webhook-id %s is not the state's", i, ev.WebhookID)
		}
		if n := len(progress); n > 0 && p.Done < progress[n-1].Data.Progress.Done {
			t.Fatalf("progress went back: %d after %d", p.Done, progress[n-1].Data.Progress.Done)
		}
		progress = append(progress, body)
		times = append(times, at[ev.WebhookID])
	}
	if last := r.atts[len(r.atts)-1]; last.WebhookID != r.evs[len(r.evs)-1].WebhookID {
		t.Fatalf("an attempt after job.finished: %+v", last)
	}
	return progress, times
}

// TestNotifyJobProgress: the receiver answers the first delivery 500. It gets job.progress at
// most once per 5s window (at least three over the eval), the 500ed one retried within its
// window under the same webhook-id, then job.finished and nothing after it (check). The job's
// own history has no command per window, and both it and the notifier's history replay.
func TestNotifyJobProgress(t *testing.T) {
	t.Parallel()
	r := runProgressEval(t, "-fail-first", "1")
	progress, times := r.check(t)
	evs, atts, b, jobID := r.evs, r.atts, r.b, r.jobID
	if len(progress) < 3 {
		t.Fatalf("%d job.progress events over a ~20s eval with 5s windows, want at least 3", len(progress))
	}
	// Windows: one delivery per window. The first was 500ed and retried 1s later, so its
	// accepted attempt is up to a second late; the rest start on their window.
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 3500*time.Millisecond {
			t.Fatalf("job.progress %d came %s after the one before; windows are 5s", i, gap)
		}
	}
	// The 500ed attempt is the first job.progress, retried under the same webhook-id.
	if atts[0].Status != 500 || atts[1].WebhookID != atts[0].WebhookID || atts[1].Status != 204 || atts[0].WebhookID != evs[0].WebhookID {
		t.Fatalf("attempts %+v: want the first answered 500, then the same webhook-id accepted", atts[:2])
	}
	// The job itself issued no command per window: one child start (the notifier), one end
	// signal to it, no notification activity and no jobgate.Notify child.
	children, signals, notifyActs := 0, 0, 0
	it := b.temporal.GetWorkflowHistory(context.Background(), jobID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		must(t, err)
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
			children++
			if n := e.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowType().GetName(); n != workflows.NotifyProgressWorkflowName {
				t.Fatalf("the job started a %s child", n)
			}
		case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
			signals++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			// RunEpisode and the episode log's WriteEpisodes are the eval's own; anything else
			// would be a notifier's work done in the job's history.
			if n := e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName(); n != "RunEpisode" && n != "WriteEpisodes" {
				notifyActs++
			}
		}
	}
	if children != 1 || signals != 1 || notifyActs != 0 {
		t.Fatalf("job history: %d child starts, %d signals, %d other activities; want 1, 1, 0", children, signals, notifyActs)
	}
	replayWithoutNotifier(t, b, jobID)
	replayNotifier(t, b, r.notifier)
	t.Logf("%d job.progress events (done %v), %d attempts, then job.finished; gaps %v", len(progress), doneCounts(progress), len(atts), gaps(times))
}

// TestNotifyJobProgressStalledDropped: the receiver holds the first delivery until the sender
// hangs up. That delivery is dropped when its 5s window ends, not retried or queued: the next
// window sends the newer state under its own webhook-id, and the held state is never accepted.
func TestNotifyJobProgressStalledDropped(t *testing.T) {
	t.Parallel()
	r := runProgressEval(t, "-stall-first", "1")
	progress, _ := r.check(t)
	held, next := r.atts[0], r.atts[1]
	if held.Status != 0 || next.WebhookID == held.WebhookID || next.At.Sub(held.At) < 4*time.Second {
		t.Fatalf("attempts %+v: want the held one, then a newer state a window later", r.atts[:2])
	}
	for _, ev := range r.evs {
		if ev.WebhookID == held.WebhookID {
			t.Fatalf("the dropped state %s was delivered later", held.WebhookID)
		}
	}
	if len(progress) < 2 {
		t.Fatalf("%d job.progress events after the drop, want at least 2", len(progress))
	}
	t.Logf("held %s, then %d job.progress events (done %v) and job.finished", held.WebhookID, len(progress), doneCounts(progress))
}

// TestNotifyJobProgressWorkerSIGKILL: the only worker process dies mid-eval (after the first
// job.progress) and another takes over. The dead worker's window fails (heartbeat timeout) and
// is skipped; later windows go on from what was sent; the job's end still comes last, once,
// with nothing after it (check), and the notifier's history replays.
func TestNotifyJobProgressWorkerSIGKILL(t *testing.T) {
	t.Parallel()
	f := newProgressFixture(t)
	f.receiver(t)
	b := setup(t, setupOpts{noWorker: true})
	w1 := b.spawn(t, "worker", "--tenants", f.tenantsFile, "--public-url", "https://jobgate.test")
	cs, h := startProgressEval(t, b, 60) // ~30s: time for windows after the takeover
	eventually(t, time.Minute, "a job.progress accepted", func() bool { return len(f.events(t)) >= 2 })
	w1.kill(t)
	b.spawn(t, "worker", "--tenants", f.tenantsFile, "--public-url", "https://jobgate.test")
	r := finishedProgressRun(t, f, b, cs, h)
	progress, _ := r.check(t)
	if len(progress) < 3 {
		t.Fatalf("%d job.progress events across the worker's death, want at least 3", len(progress))
	}
	replayNotifier(t, b, r.notifier)
	t.Logf("%d job.progress events (done %v) across a SIGKILL, %d attempts, then job.finished", len(progress), doneCounts(progress), len(r.atts))
}

func doneCounts(ps []progressBody) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.Data.Progress.Done
	}
	return out
}

func gaps(ts []time.Time) []string {
	var out []string
	for i := 1; i < len(ts); i++ {
		out = append(out, ts[i].Sub(ts[i-1]).Round(100*time.Millisecond).String())
	}
	return out
}

// replayNotifier replays the job.progress notifier's closed history (its windows, the end
// signal and the job.finished delivery) on the code of this build.
func replayNotifier(t *testing.T, b *testBundle, id string) {
	t.Helper()
	it := b.temporal.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	hist := &historypb.History{}
	for it.HasNext() {
		e, err := it.Next()
		must(t, err)
		hist.Events = append(hist.Events, e)
	}
	r := b.replayer(t)
	r.RegisterWorkflowWithOptions(workflows.NotifyProgress, workflow.RegisterOptions{Name: workflows.NotifyProgressWorkflowName})
	must(t, r.ReplayWorkflowHistoryWithOptions(nil, hist, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: id}}))
}
