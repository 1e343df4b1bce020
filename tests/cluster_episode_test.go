package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/receiver"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// remoteSuite is an http suite over a receiver, with tight timeouts for the chaos tests.
func remoteSuite(url string) string {
	return `{"suites":[{"name":"remote","kind":"http","url":"` + url + `","approval_threshold":0,"heartbeat_timeout":"2s",` +
		`"request_timeout":"5s","max_attempts":10}]}`
}

func startReceiver(t *testing.T) (*receiver.Receiver, *receiver.Server) {
	t.Helper()
	r, err := receiver.New(t.TempDir())
	must(t, err)
	srv, err := r.Start("127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return r, srv
}

// retriedAttempts counts activity attempts after the first in a job's history (its latest run)
// on the cluster's own Temporal.
func (c *cluster) retriedAttempts(t testing.TB, jobID string) int {
	t.Helper()
	return retriedAttempts(history(t, c.tc, jobID))
}

// exactlyOnce checks the receiver applied each of the job's n episodes exactly once.
func (c *cluster) exactlyOnce(t testing.TB, r *receiver.Receiver, jobID string, n int) {
	t.Helper()
	effects := r.Effects()
	for i := range n {
		key := operationID(t, c.tc, jobID, i)
		if effects[key] != 1 {
			t.Errorf("episode %s applied %d times at the receiver", key, effects[key])
		}
	}
	if len(effects) != n {
		t.Errorf("receiver has %d keys, want %d", len(effects), n)
	}
}

// TestClusterWorkerDiesMidEpisode: the worker running http episodes is SIGKILLed while requests
// are in flight; after the heartbeat timeout another worker retries them (attempt > 1 in
// history), reconciling first, and the receiver applies every episode exactly once.
func TestClusterWorkerDiesMidEpisode(t *testing.T) {
	testenv.Heavy(t, "spawns a Temporal server, jobgate processes and a proxy")
	t.Parallel()
	r, srv := startReceiver(t)
	r.StallNext(1000, 700*time.Millisecond) // every POST takes a while, so kills land mid-request
	c := newCluster(t, 1, remoteSuite(srv.URL))
	cs := c.via(ana)
	const n = 20
	v := mustView(t, call(t, cs, "start_eval", map[string]any{"idempotency_key": uniqueKey(t), "suite": "remote", "episodes": n, "concurrency": 4}))
	eventually(t, 60*time.Second, "episodes done and requests in flight", func() bool {
		return mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v.Handle})).Progress.Done >= 4 && r.Stalling() > 0
	})
	c.workers[0].kill(t)
	c.startWorker()
	f := waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 2*time.Minute)
	if f.Progress.Done != n || f.Progress.Failed != 0 {
		t.Fatalf("totals: %+v", f.Progress)
	}
	retried := c.retriedAttempts(t, v.JobID)
	if retried == 0 {
		t.Fatal("no episode was retried: the kill proved nothing")
	}
	c.exactlyOnce(t, r, v.JobID, n)
	gets := 0
	for _, a := range r.Attempts() {
		if a.Method == http.MethodGet {
			gets++
		}
	}
	if gets == 0 {
		t.Fatal("retries never reconciled with the receiver")
	}
	t.Logf("%d retried attempts, %d reconciling GETs, %d effects for %d episodes", retried, gets, len(r.Effects()), n)
}

// TestClusterLostConfirmations: the receiver applies and then drops the answer (lost
// confirmation), or holds it while the worker is killed after the effect; the retries reconcile
// and nothing is applied twice or lost.
func TestClusterLostConfirmations(t *testing.T) {
	testenv.Heavy(t, "spawns a Temporal server, jobgate processes and a proxy")
	t.Parallel()
	r, srv := startReceiver(t)
	c := newCluster(t, 1, remoteSuite(srv.URL))
	cs := c.via(ana)
	const n = 12

	r.DropNext(3)
	v := mustView(t, call(t, cs, "start_eval", map[string]any{"idempotency_key": uniqueKey(t) + "-drop", "suite": "remote", "episodes": n, "concurrency": 3}))
	if f := waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 2*time.Minute); f.Progress.Done != n {
		t.Fatalf("dropped confirmations: %+v", f.Progress)
	}
	c.exactlyOnce(t, r, v.JobID, n)

	// Applied, answer held, worker killed: the effect happened, the workflow never heard.
	r.HoldAfterApplyNext(2, time.Minute)
	v2 := mustView(t, call(t, cs, "start_eval", map[string]any{"idempotency_key": uniqueKey(t) + "-kill", "suite": "remote", "episodes": n, "concurrency": 2}))
	eventually(t, 60*time.Second, "effects applied and answers held", func() bool { return r.Stalling() == 2 })
	c.workers[0].kill(t)
	c.startWorker()
	f := waitStatus(t, cs, v2.Handle, workflows.StatusSucceeded, 2*time.Minute)
	if f.Progress.Done+f.Progress.Failed != n || f.Progress.Failed != 0 {
		t.Fatalf("after the kill: %+v", f.Progress)
	}
	effects := r.Effects()
	for i := range n {
		if k := operationID(t, c.tc, v2.JobID, i); effects[k] != 1 {
			t.Errorf("episode %s applied %d times", k, effects[k])
		}
	}
	if c.retriedAttempts(t, v2.JobID) == 0 {
		t.Fatal("no retried attempt after the kill")
	}
}
