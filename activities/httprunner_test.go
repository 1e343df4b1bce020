package activities

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/tests/support/receiver"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

const httpJobID = "acme/eval/run-1"

// httpHarness runs http episodes against a real receiver over loopback, one
// TestActivityEnvironment per attempt, the way a worker would.
type httpHarness struct {
	t     *testing.T
	rcv   *receiver.Receiver
	srv   *receiver.Server
	a     *Activities
	suite contract.Suite

	mu         sync.Mutex
	heartbeats []httpAttempt // details of the heartbeats the test environment saw
}

func newHTTPHarness(t *testing.T, url string, mod func(*contract.Suite)) *httpHarness {
	t.Helper()
	h := &httpHarness{t: t}
	if url == "" {
		rcv, err := receiver.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		srv, err := rcv.Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		h.rcv, h.srv, url = rcv, srv, srv.URL
	}
	s := contract.Suite{Name: "rx", Kind: contract.SuiteHTTP, URL: url, RequestTimeout: contract.Duration(5 * time.Second), PassThreshold: 0.25}
	if mod != nil {
		mod(&s)
	}
	c := contract.Catalog{}
	if err := c.Add(s); err != nil {
		t.Fatal(err)
	}
	h.suite = c[s.Name]
	h.a = &Activities{Suites: c, HeartbeatEvery: 20 * time.Millisecond}
	return h
}

func httpIn(i int) contract.EpisodeInput {
	return contract.EpisodeInput{JobID: httpJobID, Suite: "rx", Index: i, OperationID: fmt.Sprintf("%s#%d", httpJobID, i),
		Params: map[string]any{"level": "hard"}}
}

// env is one attempt's environment; prior, when set, is the heartbeat an earlier attempt left.
func (h *httpHarness) env(ctx context.Context, prior *httpAttempt) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quietLogger)
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(h.a)
	// runAt plays any attempt number, as after a worker death that lost every heartbeat.
	env.RegisterActivityWithOptions(func(ctx context.Context, in contract.EpisodeInput, attempt int32) (contract.EpisodeResult, error) {
		res, err := h.a.runHTTPAttempt(ctx, h.suite, in, attempt, nil)
		res.Passed = err == nil && res.Score >= h.suite.PassThreshold // as RunEpisode does
		return res, err
	}, activity.RegisterOptions{Name: "runAt"})
	if ctx != nil {
		env.SetWorkerOptions(worker.Options{BackgroundActivityContext: ctx})
	}
	if prior != nil {
		env.SetHeartbeatDetails(*prior)
	}
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) {
		var hb httpAttempt
		if d.HasValues() && d.Get(&hb) == nil {
			h.mu.Lock()
			h.heartbeats = append(h.heartbeats, hb)
			h.mu.Unlock()
		}
	})
	return env
}

func result(v converter.EncodedValue, err error) (contract.EpisodeResult, error) {
	var res contract.EpisodeResult
	if err == nil {
		err = v.Get(&res)
	}
	return res, err
}

func (h *httpHarness) run(in contract.EpisodeInput, prior *httpAttempt) (contract.EpisodeResult, error) {
	return result(h.env(nil, prior).ExecuteActivity(h.a.RunEpisode, in))
}

func (h *httpHarness) runAt(in contract.EpisodeInput, attempt int32) (contract.EpisodeResult, error) {
	return result(h.env(nil, nil).ExecuteActivity("runAt", in, attempt))
}

func (h *httpHarness) lastHeartbeat() (httpAttempt, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.heartbeats) == 0 {
		return httpAttempt{}, false
	}
	return h.heartbeats[len(h.heartbeats)-1], true
}

func (h *httpHarness) outcomes(key string) string {
	var out []string
	for _, a := range h.rcv.AttemptsFor(key) {
		s := fmt.Sprintf("%s#%d %s", a.Method, a.Attempt, a.Outcome)
		if a.Dropped {
			s += " dropped"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func (h *httpHarness) wantOutcomes(key, want string) {
	h.t.Helper()
	if got := h.outcomes(key); got != want {
		h.t.Fatalf("receiver saw %q, want %q", got, want)
	}
}

func (h *httpHarness) wantEffects(key string, n int) {
	h.t.Helper()
	if got := h.rcv.Effects()[key]; got != n {
		h.t.Fatalf("%s applied %d times, want %d", key, got, n)
	}
}

func (h *httpHarness) wantScore(res contract.EpisodeResult, err error, key string) {
	h.t.Helper()
	if err != nil {
		h.t.Fatalf("episode: %v", err)
	}
	want := receiver.Score(key)
	if res.Score != want || res.Passed != (want >= h.suite.PassThreshold) {
		h.t.Fatalf("got %+v, want score %v", res, want)
	}
}

// appErr asserts err is an application error of type typ with the given retryability.
func appErr(t *testing.T, err error, typ string, retryable bool) *temporal.ApplicationError {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		t.Fatalf("want %s, got %T %v", typ, err, err)
	}
	if ae.Type() != typ || ae.NonRetryable() == retryable {
		t.Fatalf("want %s (retryable %v), got %s (non-retryable %v): %v", typ, retryable, ae.Type(), ae.NonRetryable(), err)
	}
	return ae
}

func TestHTTPEpisode_HappyPath(t *testing.T) {
	h := newHTTPHarness(t, "", nil)
	in := httpIn(3)
	res, err := h.run(in, nil)
	h.wantScore(res, err, in.OperationID)
	h.wantEffects(in.OperationID, 1)
	h.wantOutcomes(in.OperationID, "POST#1 applied")
	if a := h.rcv.AttemptsFor(in.OperationID)[0]; a.BodyAttempt != 1 {
		t.Fatalf("body attempt: %+v", a)
	}
	// The attempt was marked uncertain before it was sent.
	h.mu.Lock()
	first := h.heartbeats[0]
	h.mu.Unlock()
	if first != (httpAttempt{Phase: httpPhaseSending, Key: in.OperationID, Attempt: 1}) {
		t.Fatalf("first heartbeat: %+v", first)
	}
}

func TestHTTPEpisode_SameOperationIDTwiceOneEffect(t *testing.T) {
	h := newHTTPHarness(t, "", nil)
	in := httpIn(0)
	r1, err1 := h.run(in, nil)
	r2, err2 := h.run(in, nil)
	h.wantScore(r1, err1, in.OperationID)
	h.wantScore(r2, err2, in.OperationID)
	h.wantEffects(in.OperationID, 1)
	h.wantOutcomes(in.OperationID, "POST#1 applied, POST#1 replayed")
}

func TestHTTPEpisode_DroppedAnswerIsReconciledNotResent(t *testing.T) {
	h := newHTTPHarness(t, "", nil)
	h.rcv.AllowDuplicates(true) // a second POST would be a second effect: only reconciling prevents it
	// A first episode leaves a kept-alive connection, which Go's transport would silently re-send
	// an Idempotency-Key request on if it could.
	warm := httpIn(100)
	res, err := h.run(warm, nil)
	h.wantScore(res, err, warm.OperationID)
	h.rcv.DropNext(1)
	in := httpIn(1)
	_, err = h.run(in, nil)
	appErr(t, err, errTypeEpisodeRequestFailed, true)
	hb, ok := h.lastHeartbeat()
	if !ok || hb.Phase != httpPhaseSending || hb.Key != in.OperationID {
		t.Fatalf("last heartbeat %+v: the retry would not know the send is uncertain", hb)
	}
	// The retry gets that heartbeat (here as attempt 1 again: the details alone must suffice).
	res, err = h.run(in, &hb)
	h.wantScore(res, err, in.OperationID)
	h.wantEffects(in.OperationID, 1)
	h.wantOutcomes(in.OperationID, "POST#1 applied dropped, GET#1 found")
}

func TestHTTPEpisode_RetryWithoutHeartbeatStillReconciles(t *testing.T) {
	h := newHTTPHarness(t, "", nil)
	h.rcv.AllowDuplicates(true)
	warm := httpIn(100) // a kept-alive connection, as in TestHTTPEpisode_DroppedAnswerIsReconciledNotResent
	res, err := h.runAt(warm, 1)
	h.wantScore(res, err, warm.OperationID)
	// Attempt 1 was applied, its answer lost, and the worker died before any heartbeat reached
	// the server: attempt 2 starts with no details at all.
	h.rcv.DropNext(1)
	in := httpIn(2)
	_, err = h.runAt(in, 1)
	appErr(t, err, errTypeEpisodeRequestFailed, true)
	res, err = h.runAt(in, 2)
	h.wantScore(res, err, in.OperationID)
	h.wantEffects(in.OperationID, 1)
	h.wantOutcomes(in.OperationID, "POST#1 applied dropped, GET#2 found")

	// Never applied: the retry finds 404 and sends.
	in = httpIn(4)
	res, err = h.runAt(in, 3)
	h.wantScore(res, err, in.OperationID)
	h.wantOutcomes(in.OperationID, "GET#3 not_found, POST#3 applied")
	if a := h.rcv.AttemptsFor(in.OperationID)[1]; a.BodyAttempt != 3 {
		t.Fatalf("body attempt: %+v", a)
	}
}

// episodeWorkflow runs one episode with a real retry policy, so attempts count up and heartbeat
// details carry over as they do on a server.
func episodeWorkflow(ctx workflow.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
	var a *Activities
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 4,
			NonRetryableErrorTypes: []string{contract.ErrTypeEpisodeFailed, contract.ErrTypeSuiteMissing, contract.ErrTypeEpisodeRejected}},
	})
	var res contract.EpisodeResult
	err := workflow.ExecuteActivity(ctx, a.RunEpisode, in).Get(ctx, &res)
	return res, err
}

func (h *httpHarness) runWorkflow(in contract.EpisodeInput) (contract.EpisodeResult, error) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quietLogger)
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(episodeWorkflow)
	env.RegisterActivity(h.a)
	env.ExecuteWorkflow(episodeWorkflow, in)
	if !env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
	var res contract.EpisodeResult
	err := env.GetWorkflowError()
	if err == nil {
		err = env.GetWorkflowResult(&res)
	}
	return res, err
}

func TestHTTPEpisode_RetriesUnderARetryPolicy(t *testing.T) {
	t.Run("DroppedAnswer", func(t *testing.T) {
		h := newHTTPHarness(t, "", nil)
		h.rcv.AllowDuplicates(true)
		h.rcv.DropNext(1)
		in := httpIn(5)
		res, err := h.runWorkflow(in)
		h.wantScore(res, err, in.OperationID)
		h.wantEffects(in.OperationID, 1)
		h.wantOutcomes(in.OperationID, "POST#1 applied dropped, GET#2 found")
	})
	t.Run("5xxThenSuccess", func(t *testing.T) {
		h := newHTTPHarness(t, "", nil)
		h.rcv.FailNext(1, http.StatusServiceUnavailable)
		in := httpIn(6)
		res, err := h.runWorkflow(in)
		h.wantScore(res, err, in.OperationID)
		h.wantEffects(in.OperationID, 1)
		h.wantOutcomes(in.OperationID, "POST#1 injected_status, GET#2 not_found, POST#2 applied")
	})
	t.Run("4xxIsFinal", func(t *testing.T) {
		h := newHTTPHarness(t, "", nil)
		h.rcv.FailNext(5, http.StatusUnprocessableEntity)
		in := httpIn(7)
		_, err := h.runWorkflow(in)
		appErr(t, err, contract.ErrTypeEpisodeRejected, false)
		h.wantOutcomes(in.OperationID, "POST#1 injected_status")
	})
}

func TestHTTPEpisode_5xxIsRetryable(t *testing.T) {
	h := newHTTPHarness(t, "", nil)
	in := httpIn(8)
	for _, code := range []int{500, 502, 503, http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests} {
		h.rcv.FailNext(1, code)
		_, err := h.run(in, nil)
		ae := appErr(t, err, errTypeEpisodeUnavailable, true)
		if !strings.Contains(ae.Error(), fmt.Sprint(code)) {
			t.Fatalf("%d: %v", code, err)
		}
	}
	h.wantEffects(in.OperationID, 0)
	res, err := h.run(in, nil)
	h.wantScore(res, err, in.OperationID)
	h.wantEffects(in.OperationID, 1)
}

func TestHTTPEpisode_4xxIsRejected(t *testing.T) {
	h := newHTTPHarness(t, "", nil)
	in := httpIn(9)
	for _, code := range []int{400, 401, 403, 404, 413, 422} {
		h.rcv.FailNext(1, code)
		_, err := h.run(in, nil)
		ae := appErr(t, err, contract.ErrTypeEpisodeRejected, false)
		if msg := ae.Error(); !strings.Contains(msg, fmt.Sprint(code)) || !strings.Contains(msg, "injected failure") {
			t.Fatalf("%d: message lacks status or body: %v", code, msg)
		}
	}
	h.wantEffects(in.OperationID, 0)
}

func TestHTTPEpisode_StallBeyondRequestTimeout(t *testing.T) {
	h := newHTTPHarness(t, "", func(s *contract.Suite) { s.RequestTimeout = contract.Duration(200 * time.Millisecond) })
	h.rcv.StallNext(1, time.Hour)
	in := httpIn(10)
	began := time.Now()
	_, err := h.run(in, nil)
	ae := appErr(t, err, errTypeEpisodeRequestTimeout, true)
	if took := time.Since(began); took > 2*time.Second || !strings.Contains(ae.Error(), "request_timeout") {
		t.Fatalf("after %s: %v", took, err)
	}
	testenv.Eventually(t, 5*time.Second, "the receiver to see the client go", func() bool { return h.outcomes(in.OperationID) == "POST#1 abandoned" })
	// The retry reconciles first: nothing was applied, so it sends.
	res, err := h.runAt(in, 2)
	h.wantScore(res, err, in.OperationID)
	h.wantEffects(in.OperationID, 1)
	h.wantOutcomes(in.OperationID, "POST#1 abandoned, GET#2 not_found, POST#2 applied")
}

func TestHTTPEpisode_CancelDuringStallReturnsPromptly(t *testing.T) {
	h := newHTTPHarness(t, "", func(s *contract.Suite) { s.RequestTimeout = contract.Duration(time.Minute) })
	h.rcv.StallNext(1, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := h.env(ctx, nil)
	done := make(chan error, 1)
	in := httpIn(11)
	go func() {
		_, err := result(env.ExecuteActivity(h.a.RunEpisode, in))
		done <- err
	}()
	testenv.Eventually(t, 5*time.Second, "the request to stall", func() bool { return h.rcv.Stalling() == 1 })
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		// The test environment reports the activity's ctx.Err() as an activity error.
		if err == nil || !(errors.Is(err, context.Canceled) || temporal.IsCanceledError(err) ||
			strings.Contains(err.Error(), context.Canceled.Error())) {
			t.Fatalf("want a cancellation, got %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("cancel was not honoured within 2s")
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("took %s", took)
	}
	testenv.Eventually(t, 5*time.Second, "the receiver to see the client go", func() bool { return h.outcomes(in.OperationID) == "POST#1 abandoned" })
	h.wantEffects(in.OperationID, 0)
}

func TestHTTPEpisode_UnreachableIsRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	h := newHTTPHarness(t, "http://"+addr+"/episodes", nil)
	_, err = h.run(httpIn(0), nil)
	appErr(t, err, errTypeEpisodeRequestFailed, true)
	_, err = h.runAt(httpIn(0), 2) // the reconcile GET fails the same way
	appErr(t, err, errTypeEpisodeRequestFailed, true)
}
