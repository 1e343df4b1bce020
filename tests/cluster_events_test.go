package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// TestClusterListenResume: a subscriptions/listen stream through the load balancer watches a
// running eval and one awaiting input. The replica holding the stream is SIGKILLed mid-run;
// the client reconnects through the balancer with Last-Event-ID and lands on the other
// replica. Checked against the job's Temporal history: every progress state the run's
// history recorded is notified (nothing missed), no state twice across the reconnect, and
// every event id is a position in that very history, strictly advancing.
func TestClusterListenResume(t *testing.T) {
	testenv.Heavy(t, "spawns a Temporal server, jobgate processes and a proxy")
	t.Parallel()
	c := newCluster(t, 1, "")
	lb := "http://" + c.proxyAddr + "/mcp"
	start := func(key string, n int, params map[string]any, conc int) string {
		args := startArgs(key, n, params)
		if conc > 0 {
			args["concurrency"] = conc
		}
		return c.tkPost(t, lb, ana, "tools/call", "start_eval", map[string]any{"name": "start_eval", "arguments": args}, tkCaps(), nil).task(t).TaskID
	}
	runKey := uniqueKey(t) + "-run"
	runs := start(runKey, 16, map[string]any{"episode_ms": 600, "fail_rate": 0}, 1) // about 10s
	asks := start(uniqueKey(t)+"-ask", 150, map[string]any{"episode_ms": 0, "fail_rate": 0}, 0)
	ids := []string{runs, asks}

	stats := func() [2]int64 {
		resp, err := http.Get("http://" + c.proxyAddr + "/__lb/stats")
		must(t, err)
		var s [2]int64
		must(t, jsonDecode(resp, &s))
		return s
	}
	before := stats()
	s := listen(t, lb, c.token(ana), ids, nil, "")
	after := stats()
	holder := 0
	if after[1] > before[1] {
		holder = 1
	}
	if s.status != http.StatusOK || after[holder] != before[holder]+1 {
		t.Fatalf("listen through the balancer: %d %s (stats %v → %v)", s.status, s.body, before, after)
	}
	type got struct {
		id string
		tk noteTask
	}
	var notes []got
	read := func(s *sseStream, until func() bool) {
		for !until() {
			ev := s.next(t, 60*time.Second)
			n := decodeNote(t, ev)
			if n.Method == "notifications/subscriptions/acknowledged" {
				continue
			}
			if n.Result != nil {
				return
			}
			var tk noteTask
			must(t, json.Unmarshal(n.Params, &tk))
			notes = append(notes, got{ev.id, tk})
		}
	}
	count := func(id string) int {
		n := 0
		for _, g := range notes {
			if g.tk.TaskID == id {
				n++
			}
		}
		return n
	}
	// Mid-run: the input request is out and the run has reported progress.
	read(s, func() bool { return count(asks) >= 1 && count(runs) >= 3 })
	lastID := notes[len(notes)-1].id
	c.serves[holder].kill(t)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream outlived its replica")
	}
	for range s.events {
	}
	if len(notes) > 0 && notes[len(notes)-1].id != lastID {
		lastID = notes[len(notes)-1].id // events read while the replica died
	}
	split := len(notes)

	before = stats()
	resumed := listen(t, lb, c.token(ana), ids, nil, lastID)
	if after := stats(); resumed.status != http.StatusOK || after[1-holder] != before[1-holder]+1 {
		t.Fatalf("resume: %d %s (stats %v → %v, holder %d dead)", resumed.status, resumed.body, before, after, holder)
	}
	var asked *noteTask
	for _, g := range notes {
		if g.tk.TaskID == asks && g.tk.Status == "input_required" {
			asked = &g.tk
		}
	}
	if asked == nil {
		t.Fatalf("no input_required before the kill: %+v", notes)
	}
	k, _ := tkInput(t, &asked.tkTask)
	tkAck(t, c.tkPost(t, lb, ana, "tasks/update", asks, map[string]any{"taskId": asks, "inputResponses": tkAnswer(k, "accept", "approve")}, tkCaps(), nil))
	read(resumed, func() bool { return false })
	resumed.ended(t, 10*time.Second)

	// Nothing twice: no task state follows an equal one, across the reconnect too.
	last := map[string]string{}
	for i, g := range notes {
		j := mustJSON(t, g.tk.tkTask)
		if last[g.tk.TaskID] == j {
			t.Fatalf("notification %d (split at %d) repeats the previous state of its task: %s", i, split, j)
		}
		last[g.tk.TaskID] = j
	}
	var statuses []string
	for _, g := range notes {
		if g.tk.TaskID == asks && (len(statuses) == 0 || statuses[len(statuses)-1] != g.tk.Status) {
			statuses = append(statuses, g.tk.Status)
		}
	}
	if len(statuses) > 0 && statuses[0] == "working" {
		statuses = statuses[1:] // queued, before its input request was open
	}
	if !slices.Equal(statuses, []string{"input_required", "working", "completed"}) {
		t.Fatalf("the asking task went %v", statuses)
	}

	// Against the run's history: its progress upserts, in order, and the ids' positions.
	hist := clusterHistory(t, c, "acme/eval/ana/"+runKey)
	var wantDone []int
	for _, e := range hist.events {
		if a := e.GetWorkflowPropertiesModifiedEventAttributes(); a != nil {
			if p, ok := a.GetUpsertedMemo().GetFields()[workflows.MemoProgress]; ok {
				var pr workflows.Progress
				must(t, c.converter().FromPayload(p, &pr))
				if len(wantDone) == 0 || wantDone[len(wantDone)-1] != pr.Done {
					wantDone = append(wantDone, pr.Done)
				}
			}
		}
	}
	doneRE := regexp.MustCompile(`\((\d+)/16 `)
	var gotDone []int
	var prevEvent int64
	for i, g := range notes {
		if g.tk.TaskID != runs {
			continue
		}
		if m := doneRE.FindStringSubmatch(g.tk.StatusMessage); m != nil {
			d, _ := strconv.Atoi(m[1])
			if len(gotDone) == 0 || gotDone[len(gotDone)-1] != d {
				gotDone = append(gotDone, d)
			}
		}
		pos, err := c.keys.OpenEventPos(g.id, time.Now())
		must(t, err)
		jp := pos.Jobs[0] // the stream's order: runs first
		if jp.Run != hist.runID || jp.Event <= prevEvent || jp.Event > hist.last {
			t.Fatalf("notification %d: position %+v, history run %s of %d events, previous %d", i, jp, hist.runID, hist.last, prevEvent)
		}
		prevEvent = jp.Event
	}
	for _, d := range wantDone {
		if d > 0 && d < 16 && !slices.Contains(gotDone, d) {
			t.Fatalf("progress %d/16 recorded in history was never notified: history %v, notified %v", d, wantDone, gotDone)
		}
	}
	var end noteTask
	for _, g := range notes {
		if g.tk.TaskID == runs {
			end = g.tk
		}
	}
	if isErr, v, _ := tkResult(t, &end.tkTask); end.Status != "completed" || isErr || v.Status != workflows.StatusSucceeded {
		t.Fatalf("the run's last notification: %+v", end)
	}
	t.Logf("run: history progress %v, notified %v (%d before the kill, %d after)", wantDone, gotDone, split, len(notes)-split)
}

// clusterRun is one run's history.
type clusterRun struct {
	runID  string
	last   int64
	events []*historypb.HistoryEvent
}

func clusterHistory(t *testing.T, c *cluster, id string) clusterRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := c.tc.DescribeWorkflowExecution(ctx, id, "")
	must(t, err)
	r := clusterRun{runID: d.GetWorkflowExecutionInfo().GetExecution().GetRunId()}
	it := c.tc.GetWorkflowHistory(ctx, id, r.runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		must(t, err)
		r.events = append(r.events, e)
		r.last = e.GetEventId()
	}
	return r
}
