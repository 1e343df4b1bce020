package activities

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.temporal.io/sdk/testsuite"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// TestNotifyProgressBody: a job.progress body is a Standard Webhooks event whose data carries
// the status, the progress object and the job page's link: states and a link, no handle.
func TestNotifyProgressBody(t *testing.T) {
	n := &Notifier{PublicURL: "https://jobgate.example"}
	ev := contract.NotifyEvent{ID: "evt_p", Type: authz.EventJobProgress, Tenant: "acme", JobID: "acme/eval/ana/k", Kind: "eval",
		Owner: "ana", Status: "running", Meaning: "The eval job of ana is running: 40 of 100 episodes done, 2 failed",
		At: time.Unix(1700000000, 0), Progress: &contract.EventProgress{Done: 40, Failed: 2, Total: 100, Unit: "episodes",
			Message: "running", AsOf: time.Unix(1700000000, 0)}}
	body, err := n.Body(ev, authz.NotifyFormatStandard)
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Type      string    `json:"type"`
		Timestamp time.Time `json:"timestamp"`
		Data      struct {
			EventID  string                 `json:"event_id"`
			Status   string                 `json:"status"`
			Link     string                 `json:"link"`
			Progress contract.EventProgress `json:"progress"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	d := msg.Data
	if msg.Type != authz.EventJobProgress || d.EventID != "evt_p" || d.Status != "running" ||
		d.Link != "https://jobgate.example/jobs/acme%2Feval%2Fana%2Fk" || !msg.Timestamp.Equal(ev.At) {
		t.Fatalf("body %s", body)
	}
	if p := d.Progress; p.Done != 40 || p.Failed != 2 || p.Total != 100 || p.Unit != "episodes" || p.Message != "running" || !p.AsOf.Equal(ev.At) {
		t.Fatalf("progress %+v in %s", p, body)
	}
	if strings.Contains(string(body), "handle") {
		t.Fatalf("body names a handle: %s", body)
	}
	slack, err := n.Body(ev, authz.NotifyFormatSlack)
	if err != nil || !strings.Contains(string(slack), "Job running: 40 of 100 episodes done, 2 failed") ||
		!strings.Contains(string(slack), `"url":"https://jobgate.example/jobs/acme%2Feval%2Fana%2Fk"`) {
		t.Fatalf("slack body %s (%v)", slack, err)
	}
}

// progressRecv records job.progress deliveries per endpoint path, answering status[path].
type progressRecv struct {
	mu     sync.Mutex
	status map[string]int
	got    map[string][]notifyHit
}

func (p *progressRecv) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got[r.URL.Path] = append(p.got[r.URL.Path], notifyHit{r.Header.Clone(), b})
	s := p.status[r.URL.Path]
	if s == 0 {
		s = http.StatusNoContent
	}
	w.WriteHeader(s)
}

func (p *progressRecv) hits(path string) []notifyHit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]notifyHit(nil), p.got[path]...)
}

func (p *progressRecv) setStatus(path string, s int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status[path] = s
}

// progressBody decodes a delivery's done count and checks its signature and webhook-id.
func progressDone(t *testing.T, wh *standardwebhooks.Webhook, h notifyHit) int {
	t.Helper()
	if err := wh.Verify(h.body, h.header); err != nil {
		t.Fatalf("delivery not verifiable: %v", err)
	}
	var msg struct {
		Type string `json:"type"`
		Data struct {
			EventID  string                 `json:"event_id"`
			Progress contract.EventProgress `json:"progress"`
		} `json:"data"`
	}
	if err := json.Unmarshal(h.body, &msg); err != nil || msg.Type != authz.EventJobProgress || msg.Data.EventID != h.header.Get("webhook-id") {
		t.Fatalf("delivery %s (%v)", h.body, err)
	}
	return msg.Data.Progress.Done
}

type progressFixture struct {
	t    *testing.T
	recv *progressRecv
	n    *Notifier
	env  *testsuite.TestActivityEnvironment
	wh   *standardwebhooks.Webhook
	now  time.Time
	snap JobSnapshot
	// closed makes the job read as closed (its workflow no longer runs).
	closed bool
	in     contract.NotifyProgressInput
}

// newProgressFixture: acme has two job.progress endpoints, /fast (5s windows) and /slow (the
// default 30s), and one approval-only endpoint; the job's state and the clock are the test's.
func newProgressFixture(t *testing.T) *progressFixture {
	f := &progressFixture{t: t, recv: &progressRecv{status: map[string]int{}, got: map[string][]notifyHit{}},
		now: time.Unix(1700000000, 0), in: contract.NotifyProgressInput{Tenant: "acme", JobID: "acme/eval/ana/k", FirstRunID: "run1", Kind: "eval", Owner: "ana"}}
	srv := httptest.NewServer(f.recv)
	t.Cleanup(srv.Close)
	secret := []byte("0123456789abcdef0123456789abcdef")
	f.wh, _ = standardwebhooks.NewWebhookRaw(secret)
	target := func(path, every string, events ...string) NotifyTarget {
		return NotifyTarget{NotifyEndpoint: authz.NotifyEndpoint{Name: path, URL: srv.URL + path, Events: events,
			ProgressEvery: every, AllowPrivate: true}, Secret: secret}
	}
	all := []NotifyTarget{target("/fast", "5s", authz.EventJobProgress), target("/slow", "", authz.EventJobProgress, authz.EventJobFinished),
		target("/approvals", "")}
	f.n = &Notifier{PublicURL: "https://jobgate.example", Now: func() time.Time { return f.now },
		Targets: func(tenant, event string) []NotifyTarget {
			var out []NotifyTarget
			for _, t := range all {
				if tenant == "acme" && t.Wants(event) {
					out = append(out, t)
				}
			}
			return out
		},
		Snapshot: func(_ context.Context, jobID, firstRunID string) (JobSnapshot, error) {
			if jobID != f.in.JobID || firstRunID != "run1" {
				t.Errorf("snapshot of %s/%s", jobID, firstRunID)
			}
			return f.snap, nil
		}}
	var s testsuite.WorkflowTestSuite
	f.env = s.NewTestActivityEnvironment()
	f.env.RegisterActivity(f.n.NotifyProgress)
	return f
}

// window runs one window at the fixture's clock with the job at done of 100, carrying Sent.
func (f *progressFixture) window(at time.Duration, status string, done int) contract.NotifyProgressResult {
	f.t.Helper()
	f.snap = JobSnapshot{Status: status, Closed: f.closed, Progress: contract.EventProgress{Done: done, Total: 100, Unit: "episodes", Message: status}}
	f.now = time.Unix(1700000000, 0).Add(at)
	v, err := f.env.ExecuteActivity(f.n.NotifyProgress, f.in)
	if err != nil {
		f.t.Fatal(err)
	}
	var res contract.NotifyProgressResult
	if err := v.Get(&res); err != nil {
		f.t.Fatal(err)
	}
	f.in.Sent = res.Sent
	return res
}

func (f *progressFixture) doneSeen(path string) []int {
	var out []int
	for _, h := range f.recv.hits(path) {
		out = append(out, progressDone(f.t, f.wh, h))
	}
	return out
}

// TestNotifyProgressWindowsCoalesce: each endpoint gets at most one delivery per window, the
// newest state when its window is due (states in between are never sent), nothing when the
// state did not change, and none once the job has ended; the webhook-id is the state's.
func TestNotifyProgressWindowsCoalesce(t *testing.T) {
	f := newProgressFixture(t)
	steps := []struct {
		at         time.Duration
		done       int
		next       time.Duration
		fast, slow []int // every delivery so far, by done count
	}{
		{0, 10, 5 * time.Second, []int{10}, []int{10}},                            // both due: the first state
		{2 * time.Second, 20, 5 * time.Second, []int{10}, []int{10}},              // neither due: coalesced
		{5 * time.Second, 30, 5 * time.Second, []int{10, 30}, []int{10}},          // /fast due: the newest (20 never sent)
		{10 * time.Second, 30, 5 * time.Second, []int{10, 30}, []int{10}},         // unchanged: nothing
		{30 * time.Second, 30, 5 * time.Second, []int{10, 30}, []int{10, 30}},     // /slow due
		{31 * time.Second, 40, 5 * time.Second, []int{10, 30, 40}, []int{10, 30}}, // /fast due (last sent at 5s); /slow not
	}
	for i, s := range steps {
		res := f.window(s.at, "running", s.done)
		if res.Done || res.NextIn.D() != s.next {
			t.Fatalf("step %d: result %+v, want next in %s", i, res, s.next)
		}
		if got := f.doneSeen("/fast"); !equalInts(got, s.fast) {
			t.Fatalf("step %d: /fast got %v, want %v", i, got, s.fast)
		}
		if got := f.doneSeen("/slow"); !equalInts(got, s.slow) {
			t.Fatalf("step %d: /slow got %v, want %v", i, got, s.slow)
		}
	}
	if h := f.recv.hits("/approvals"); len(h) != 0 {
		t.Fatalf("an endpoint without job.progress got %d", len(h))
	}
	// One logical event per state: both endpoints got done=30 under the same webhook-id,
	// derived from the job instance and the state.
	fast, slow := f.recv.hits("/fast"), f.recv.hits("/slow")
	want := contract.EventID("acme/eval/ana/k", "run1", authz.EventJobProgress, "running|30|0|100|running")
	if fast[1].header.Get("webhook-id") != want || slow[1].header.Get("webhook-id") != want || fast[0].header.Get("webhook-id") == want {
		t.Fatalf("webhook-ids %s %s %s, want %s for done=30", fast[0].header.Get("webhook-id"), fast[1].header.Get("webhook-id"),
			slow[1].header.Get("webhook-id"), want)
	}
	for _, end := range []string{"succeeded", "cancelled", "failed"} {
		if res := f.window(time.Hour, end, 100); !res.Done || len(res.Outcomes) != 0 {
			t.Fatalf("%s: result %+v, want done without a delivery", end, res)
		}
	}
	f.closed = true
	if res := f.window(2*time.Hour, "running", 100); !res.Done {
		t.Fatalf("closed job: %+v, want done", res)
	}
	if n := len(f.recv.hits("/fast")) + len(f.recv.hits("/slow")); n != 5 {
		t.Fatalf("%d deliveries, want 5: none after the job ended", n)
	}
	// A notifier started for another tenant's job reads nothing and sends nothing.
	f.in.Tenant = "globex"
	if res := f.window(3*time.Hour, "running", 50); !res.Done || len(f.recv.hits("/fast")) != 3 {
		t.Fatalf("another tenant's job: %+v", res)
	}
}

// TestNotifyProgressDroppedPastItsWindow: a delivery that cannot land within its window is
// retried (same webhook-id) until the window ends, then dropped, not queued; the endpoint gets
// the state again, under the same webhook-id, in its next window once it answers.
func TestNotifyProgressDroppedPastItsWindow(t *testing.T) {
	// Parallel: about 3 s of it is the retries' real backoff within the 5 s window, idle time
	// the package's other tests can use; its fixture (receiver, notifier, clock) is its own.
	t.Parallel()
	f := newProgressFixture(t)
	f.recv.setStatus("/fast", http.StatusServiceUnavailable)
	var mu sync.Mutex
	var observed []string
	f.n.Observe = func(e, o string) {
		mu.Lock()
		defer mu.Unlock()
		if e == "/fast" {
			observed = append(observed, o)
		}
	}
	start := time.Now()
	res := f.window(0, "running", 10)
	took := time.Since(start)
	if res.Outcomes["/fast"] != contract.OutcomeDropped || res.Outcomes["/slow"] != contract.OutcomeDelivered {
		t.Fatalf("outcomes %v", res.Outcomes)
	}
	hits := f.recv.hits("/fast")
	if len(hits) < 2 || took > 6*time.Second {
		t.Fatalf("%d attempts in %s: want retries within the 5s window, then the drop", len(hits), took)
	}
	id := hits[0].header.Get("webhook-id")
	for _, h := range hits {
		progressDone(t, f.wh, h)
		if h.header.Get("webhook-id") != id {
			t.Fatalf("webhook-id changed across retries: %s, %s", id, h.header.Get("webhook-id"))
		}
	}
	mu.Lock()
	if o := observed[len(observed)-1]; o != contract.OutcomeDropped || len(observed) != len(hits)+1 {
		t.Fatalf("observed %v for /fast, want a retry per attempt, then the drop", observed)
	}
	mu.Unlock()
	f.recv.setStatus("/fast", 0)
	if res := f.window(2*time.Second, "running", 10); len(res.Outcomes) != 0 {
		t.Fatalf("a dropped delivery was queued: %v", res.Outcomes)
	}
	if res := f.window(5*time.Second, "running", 10); res.Outcomes["/fast"] != contract.OutcomeDelivered {
		t.Fatalf("next window: %v", res.Outcomes)
	}
	hits = f.recv.hits("/fast")
	if last := hits[len(hits)-1].header.Get("webhook-id"); last != id {
		t.Fatalf("the same state was sent as another event: %s, want %s", last, id)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
