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

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

// progressBody is what a job.progress or job.finished body says.
type progressBody struct {
	Type string `json:"type"`
	Data struct {
		EventID  string                    `json:"event_id"`
		JobID    string                    `json:"job_id"`
		Status   string                    `json:"status"`
		Link     string                    `json:"link"`
		Progress *activities.EventProgress `json:"progress"`
	} `json:"data"`
}

// TestNotifyJobProgress: an eval of ~20s whose tenant's endpoint opted in to job.progress
// with progress_every 5s. The real signed receiver (its first delivery answered 500) sees:
// every attempt validly signed; job.progress events at most one per 5s window, done never
// going back, each state under its own webhook-id (derived from job and state), the 500ed one
// retried within its window under the same webhook-id; then job.finished, and nothing after
// it once the notifier has closed. Both the job's and the notifier's histories replay.
func TestNotifyJobProgress(t *testing.T) {
	t.Parallel()
	f := newNotifyFixture(t)
	must(t, os.WriteFile(f.tenantsFile, []byte(fmt.Sprintf(`{"defaults":{},"notify":{"acme":[{"name":"recv",
		"url":"http://%s/hooks","secret_file":%q,"events":["job.progress","job.finished"],"progress_every":"5s","allow_private":true}]}}`,
		f.addr, f.secretFile)), 0o600))
	f.receiver(t, "-fail-first", "1")
	b := setup(t, setupOpts{noWorker: true})
	f.worker(t, b)
	cs := b.session(ana, 0, "")
	args := startArgs(uniqueKey(t), 40, map[string]any{"episode_ms": 1000, "fail_rate": 0})
	args["concurrency"] = 2
	v := mustView(t, call(t, cs, "start_eval", args))
	waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 3*time.Minute)
	jobID := v.JobID
	firstRun := firstRunOf(t, b, jobID)
	notifierID := jobID + "/progress/" + firstRun
	eventually(t, time.Minute, "the notifier closed", func() bool {
		d, err := b.temporal.DescribeWorkflowExecution(context.Background(), notifierID, "")
		must(t, err)
		return d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	evs, atts := f.events(t), f.attempts(t)

	var progress []progressBody
	var times []time.Time
	at := map[string]time.Time{} // first accepted attempt of each webhook-id
	for _, a := range atts {
		if !a.Valid {
			t.Fatalf("attempt %+v: signature not valid", a)
		}
		if _, ok := at[a.WebhookID]; !ok && a.Status == 204 {
			at[a.WebhookID] = a.At
		}
	}
	ids := map[string]bool{}
	for i, ev := range evs {
		var body progressBody
		must(t, json.Unmarshal(ev.Body, &body))
		if ids[ev.WebhookID] || body.Data.EventID != ev.WebhookID || body.Data.JobID != jobID {
			t.Fatalf("event %d %s: webhook-id %s repeated or not the body's", i, ev.Body, ev.WebhookID)
		}
		ids[ev.WebhookID] = true
		if i == len(evs)-1 {
			if body.Type != authz.EventJobFinished || body.Data.Status != "succeeded" ||
				ev.WebhookID != workflows.NotifyEventID(jobID, firstRun, authz.EventJobFinished, "") {
				t.Fatalf("last event %s, want job.finished", ev.Body)
			}
			continue
		}
		p := body.Data.Progress
		if body.Type != authz.EventJobProgress || p == nil || body.Data.Status != "running" || p.Total != 40 || p.Unit != "episodes" {
			t.Fatalf("event %d %s, want job.progress of a running job", i, ev.Body)
		}
		key := fmt.Sprintf("%s|%d|%d|%d|%s", body.Data.Status, p.Done, p.Failed, p.Total, p.Message)
		if ev.WebhookID != activities.EventID(jobID, firstRun, authz.EventJobProgress, key) {
			t.Fatalf("event %d: webhook-id %s is not the state's", i, ev.WebhookID)
		}
		if n := len(progress); n > 0 && p.Done < progress[n-1].Data.Progress.Done {
			t.Fatalf("progress went back: %d after %d", p.Done, progress[n-1].Data.Progress.Done)
		}
		progress = append(progress, body)
		times = append(times, at[ev.WebhookID])
	}
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
	// Nothing after job.finished: its attempt is the receiver's last.
	if last := atts[len(atts)-1]; last.WebhookID != evs[len(evs)-1].WebhookID {
		t.Fatalf("an attempt after job.finished: %+v", last)
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
			if n := e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName(); n != "RunEpisode" {
				notifyActs++
			}
		}
	}
	if children != 1 || signals != 1 || notifyActs != 0 {
		t.Fatalf("job history: %d child starts, %d signals, %d other activities; want 1, 1, 0", children, signals, notifyActs)
	}
	replayWithoutNotifier(t, b, jobID)
	replayNotifier(t, b, notifierID)
	t.Logf("%d job.progress events (done %v), %d attempts, then job.finished; gaps %v", len(progress), doneCounts(progress), len(atts), gaps(times))
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
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(workflows.NotifyProgress, workflow.RegisterOptions{Name: workflows.NotifyProgressWorkflowName})
	must(t, r.ReplayWorkflowHistoryWithOptions(nil, hist, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: id}}))
}
