package tests

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// Job event streams: subscriptions/listen with notifications/tasks (2026-07-28 clients with the
// Tasks extension, raw JSON-RPC over HTTP) and GET /jobs/<handle>/events, on the two in-process
// replicas of setup. The stream's source is the job's Temporal history; each event's id is a
// sealed position that resumes the stream on any replica.

// noteTask is a notifications/tasks params: the task and the listen's _meta.
type noteTask struct {
	tkTask
	Meta   map[string]json.RawMessage `json:"_meta"`
	readAt time.Time                  // when the client read it
}

// TestListenTasks: one stream watches three tasks — one awaiting its owner's input, one
// running, one of another tenant. The other tenant's is never acknowledged nor notified; the
// owner sees input_required, answers it with tasks/update, and sees working then completed
// with the result; each notification is the task as tasks/get returns it; the stream ends
// with the listen's result once both are terminal.
func TestListenTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	asks := b.tkStart(t, 0, ana, "start_eval", startArgs(uniqueKey(t), 150, map[string]any{"episode_ms": 0, "fail_rate": 0}))
	runArgs := startArgs(uniqueKey(t), 6, map[string]any{"episode_ms": 700, "fail_rate": 0})
	runArgs["concurrency"] = 1 // about 4s: progress notifications between working and completed
	runs := b.tkStart(t, 1, ana, "start_eval", runArgs)
	theirs := b.tkStart(t, 0, gus, "start_eval", startArgs(uniqueKey(t), 2, map[string]any{"episode_ms": 0}))

	s := listen(t, b.url(0), b.token(ana), []string{asks.TaskID, runs.TaskID, theirs.TaskID}, nil, "")
	if s.status != http.StatusOK {
		t.Fatalf("listen: %d %s", s.status, s.body)
	}
	ack := decodeNote(t, s.next(t, 10*time.Second))
	var ackParams struct {
		Notifications struct {
			TaskIDs []string `json:"taskIds"`
		} `json:"notifications"`
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	must(t, json.Unmarshal(ack.Params, &ackParams))
	if ack.Method != "notifications/subscriptions/acknowledged" || !slices.Equal(ackParams.Notifications.TaskIDs, []string{asks.TaskID, runs.TaskID}) ||
		len(ackParams.Meta["io.modelcontextprotocol/subscriptionId"]) == 0 {
		t.Fatalf("acknowledgement: %s", ack.Params)
	}

	seen := map[string][]noteTask{}
	ids := map[string]bool{}
	answered := false
	var result rpcNote
	for result.Result == nil {
		ev := s.next(t, 90*time.Second)
		n := decodeNote(t, ev)
		if n.Result != nil {
			result = n
			break
		}
		if n.Method != "notifications/tasks" || ev.id == "" || ids[ev.id] {
			t.Fatalf("event %q: %s", ev.id, ev.data)
		}
		ids[ev.id] = true
		var tk noteTask
		must(t, json.Unmarshal(n.Params, &tk))
		tk.readAt = ev.at
		if tk.TaskID == theirs.TaskID || strings.Contains(string(ev.data), "globex") {
			t.Fatalf("another tenant's task notified: %s", ev.data)
		}
		if string(tk.Meta["io.modelcontextprotocol/subscriptionId"]) != string(ackParams.Meta["io.modelcontextprotocol/subscriptionId"]) {
			t.Fatalf("notification without the listen's subscription id: %s", ev.data)
		}
		if prev := seen[tk.TaskID]; len(prev) > 0 && jsonEqual(mustJSON(t, prev[len(prev)-1].tkTask), mustJSON(t, tk.tkTask)) {
			t.Fatalf("the same task state twice: %s", ev.data)
		}
		seen[tk.TaskID] = append(seen[tk.TaskID], tk)
		if tk.TaskID == asks.TaskID && tk.Status == "input_required" && !answered {
			k, _ := tkInput(t, &tk.tkTask)
			tkAck(t, b.tkUpdate(t, 1, ana, asks.TaskID, tkAnswer(k, "accept", "approve")))
			answered = true
		}
		if tk.Status == "completed" {
			// The notification is the task as tasks/get returns it now (terminal: it stays).
			// Handles and links inside the result are sealed afresh on every read, their expiries
			// truncated to the second, so two reads across a second differ only in those.
			got := b.tkGet(t, 1, ana, tk.TaskID).task(t)
			if freshSeals.ReplaceAllString(mustJSON(t, got), "SEAL") != freshSeals.ReplaceAllString(mustJSON(t, tk.tkTask), "SEAL") {
				t.Fatalf("notification differs from tasks/get:\n%s\n%s", mustJSON(t, tk.tkTask), mustJSON(t, got))
			}
		}
	}
	s.ended(t, 10*time.Second)
	if string(result.ID) == "" || len(result.Result) == 0 {
		t.Fatalf("listen result: %+v", result)
	}
	statuses := func(id string) []string {
		var out []string
		for _, tk := range seen[id] {
			if len(out) == 0 || out[len(out)-1] != tk.Status {
				out = append(out, tk.Status)
			}
		}
		return out
	}
	if got := statuses(asks.TaskID); !slices.Equal(got, []string{"input_required", "working", "completed"}) &&
		!slices.Equal(got, []string{"working", "input_required", "working", "completed"}) { // queued first, maybe
		t.Fatalf("awaiting task went %v", got)
	}
	if got := statuses(runs.TaskID); got[len(got)-1] != "completed" || slices.Contains(got, "input_required") {
		t.Fatalf("running task went %v", got)
	}
	for _, id := range []string{asks.TaskID, runs.TaskID} {
		last := seen[id][len(seen[id])-1]
		if isErr, v, _ := tkResult(t, &last.tkTask); isErr || v.Status != workflows.StatusSucceeded {
			t.Fatalf("completed without the result: %s", last.Result)
		}
	}
	// Progress of the running task arrived as it happened, never backwards.
	if n := len(seen[runs.TaskID]); n < 3 {
		t.Fatalf("%d notifications of a 6-episode run", n)
	}
	reportLatency(t, seen)
}

// reportLatency logs how long after the workflow stamped a state (lastUpdatedAt) its
// notification was read, p50/p99 over the events of the test.
func reportLatency(t *testing.T, seen map[string][]noteTask) {
	var lat []time.Duration
	for _, tks := range seen {
		for _, tk := range tks {
			if at, err := time.Parse(time.RFC3339Nano, tk.LastUpdatedAt); err == nil && tk.readAt.After(at) {
				lat = append(lat, tk.readAt.Sub(at))
			}
		}
	}
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("state change → event latency over %d events: p50 %s, p99 %s", len(lat), lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)])
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return string(b)
}

// TestListenRefusals: without the extension -32021; an ask for only unknown or foreign tasks
// acknowledges none and ends at once; without jobs:read 403.
func TestListenRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tk := b.tkStart(t, 0, ana, "start_eval", startArgs(uniqueKey(t), 1, map[string]any{"episode_ms": 0}))
	s := listen(t, b.url(1), b.token(ana), []string{tk.TaskID}, map[string]any{}, "")
	var msg struct {
		Error struct {
			Code int             `json:"code"`
			Data json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if s.status != http.StatusBadRequest || json.Unmarshal(s.body, &msg) != nil || msg.Error.Code != -32021 ||
		!strings.Contains(string(msg.Error.Data), frontend.TasksExtension) {
		t.Fatalf("without the extension: %d %s", s.status, s.body)
	}
	none := listen(t, b.url(0), b.token(gus), []string{tk.TaskID, "nope"}, nil, "")
	ack := decodeNote(t, none.next(t, 10*time.Second))
	if !strings.Contains(string(ack.Params), `"taskIds":[]`) {
		t.Fatalf("foreign tasks acknowledged: %s", ack.Params)
	}
	if end := decodeNote(t, none.next(t, 10*time.Second)); end.Result == nil {
		t.Fatalf("a listen of nothing goes on: %+v", end)
	}
	none.ended(t, 5*time.Second)
	writeOnly := principal{"acme", "ana", []authz.Scope{authz.ScopeWrite}}
	if s := listen(t, b.url(0), b.token(writeOnly), []string{tk.TaskID}, nil, ""); s.status != http.StatusForbidden ||
		!strings.Contains(s.header.Get("WWW-Authenticate"), "insufficient_scope") {
		t.Fatalf("without jobs:read: %d %s", s.status, s.body)
	}
}

// TestJobEventsAccess: GET /jobs/<handle>/events answers another tenant, another principal and a
// never-started job exactly as an unknown job; a malformed handle is invalid_handle; without
// a read scope 403; the owner and a tenant admin get the stream.
func TestJobEventsAccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := b.tkStart(t, 0, ana, "start_eval", startArgs(uniqueKey(t), 150, map[string]any{"episode_ms": 0}))
	forged := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/ana/never-started", Kind: "eval", Expiry: time.Now().Add(time.Hour)})
	unknown := jobEvents(t, jobEventsURL(b.url(0), forged), b.token(ana), "")
	if unknown.status != http.StatusNotFound || !strings.Contains(string(unknown.body), jobcore.CodeNotFound) {
		t.Fatalf("unknown job: %d %s", unknown.status, unknown.body)
	}
	for name, s := range map[string]*sseStream{
		"other tenant":    jobEvents(t, jobEventsURL(b.url(1), v.TaskID), b.token(gus), ""),
		"other principal": jobEvents(t, jobEventsURL(b.url(0), v.TaskID), b.token(bo), ""),
		"gus, unknown":    jobEvents(t, jobEventsURL(b.url(1), forged), b.token(gus), ""),
	} {
		if s.status != unknown.status || string(s.body) != string(unknown.body) || s.header.Get("Content-Type") != unknown.header.Get("Content-Type") {
			t.Errorf("%s: %d %s, want exactly %d %s", name, s.status, s.body, unknown.status, unknown.body)
		}
	}
	if s := jobEvents(t, jobEventsURL(b.url(0), "garbage"), b.token(ana), ""); s.status != http.StatusBadRequest ||
		!strings.Contains(string(s.body), jobcore.CodeInvalidHandle) {
		t.Fatalf("malformed handle: %d %s", s.status, s.body)
	}
	writeOnly := principal{"acme", "ana", []authz.Scope{authz.ScopeWrite}}
	if s := jobEvents(t, jobEventsURL(b.url(0), v.TaskID), b.token(writeOnly), ""); s.status != http.StatusForbidden {
		t.Fatalf("without jobs:read: %d %s", s.status, s.body)
	}
	for _, p := range []principal{ana, ops} {
		s := jobEvents(t, jobEventsURL(b.url(1), v.TaskID), b.token(p), "")
		var view jobcore.JobView
		ev := s.next(t, 20*time.Second)
		if s.status != http.StatusOK || ev.id == "" || json.Unmarshal(ev.data, &view) != nil || view.JobID != "acme/eval/ana/"+strings.TrimPrefix(view.JobID, "acme/eval/ana/") {
			t.Fatalf("%s: %d %q %s", p.sub, s.status, ev.id, ev.data)
		}
		s.close()
	}
}

// TestJobEventsResume: a job's event stream dropped mid-run and resumed on the other replica
// with Last-Event-ID: the views before and after are every state once — no view twice, none
// after the terminal one — and the stream ends with the job. A position of another principal,
// or a tampered one, starts afresh (the current view again).
func TestJobEventsResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// About 6.3 s, a progress event every 2 s: views at 0, 3, 6 and 9 episodes done, then the
	// terminal one. Three are read before the drop, so the resumed stream still has at least
	// the terminal view even when the first stream opens after the first progress event.
	args := startArgs(uniqueKey(t), 9, map[string]any{"episode_ms": 700, "fail_rate": 0})
	args["concurrency"] = 1
	v := b.tkStart(t, 0, ana, "start_eval", args)
	first := jobEvents(t, jobEventsURL(b.url(0), v.TaskID), b.token(ana), "")
	var views []jobcore.JobView
	var last sseEvent
	for len(views) < 3 {
		last = first.next(t, 30*time.Second)
		var jv jobcore.JobView
		must(t, json.Unmarshal(last.data, &jv))
		views = append(views, jv)
	}
	first.close()
	resumed := jobEvents(t, jobEventsURL(b.url(1), v.TaskID), b.token(ana), last.id)
	before := len(views)
	for {
		ev, ok := <-resumed.events
		if !ok {
			break
		}
		last = ev
		var jv jobcore.JobView
		must(t, json.Unmarshal(ev.data, &jv))
		views = append(views, jv)
	}
	if len(views) == before {
		t.Fatalf("the resumed stream delivered no view (before the drop: %+v)", views)
	}
	t.Logf("%d views before the drop, %d after it", before, len(views)-before)
	for i := 1; i < len(views); i++ {
		a, c := views[i-1], views[i]
		if a.Status == c.Status && a.Progress.Done == c.Progress.Done && a.Progress.Failed == c.Progress.Failed && a.UpdatedAt.Equal(c.UpdatedAt) {
			t.Fatalf("view %d repeats view %d: %+v", i, i-1, c)
		}
		if c.Progress.Done < a.Progress.Done {
			t.Fatalf("progress went back at %d: %d < %d", i, c.Progress.Done, a.Progress.Done)
		}
	}
	if end := views[len(views)-1]; end.Status != workflows.StatusSucceeded || end.Progress.Done != 9 {
		t.Fatalf("last view %+v", end)
	}
	// Resumed at the end: nothing more, and the stream ends. Another principal's position, or a
	// tampered one, is no position: that stream starts afresh with the (terminal) view.
	if again := jobEvents(t, jobEventsURL(b.url(0), v.TaskID), b.token(ana), last.id); again.status != http.StatusOK {
		t.Fatalf("resume at the end: %d %s", again.status, again.body)
	} else {
		again.ended(t, 20*time.Second)
	}
	for name, c := range map[string]struct{ tok, id string }{
		"admin's":  {b.token(ops), last.id},
		"tampered": {b.token(ana), last.id[:len(last.id)-2] + "AA"},
		"garbage":  {b.token(ana), "jge1.t1.nope"},
	} {
		s := jobEvents(t, jobEventsURL(b.url(1), v.TaskID), c.tok, c.id)
		var jv jobcore.JobView
		if ev := s.next(t, 20*time.Second); json.Unmarshal(ev.data, &jv) != nil || jv.Status != workflows.StatusSucceeded {
			t.Fatalf("%s position: %s", name, ev.data)
		}
		s.ended(t, 20*time.Second)
	}
}

// freshSeals matches what a job view issues afresh on every read: sealed handles (jgh1.) and
// episode or download links (jgd1.), and the links' expiries (also inside a view's JSON text,
// where the quotes are escaped).
var freshSeals = regexp.MustCompile(`jg[hd]1\.[A-Za-z0-9_.-]+|\\*"[a-z_]*url_expires_at\\*":\\*"[0-9TZ:.+-]*\\*"`)
