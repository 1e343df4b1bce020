package workflows

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// progressLog is what the notification activities were asked, in order: every job.progress
// window (its input) and every delivery (its event and the workflow that sent it).
type progressLog struct {
	mu      sync.Mutex
	entries []string
	windows []contract.NotifyProgressInput
	sent    []contract.NotifyEvent
	senders []string
}

func (l *progressLog) snapshot() ([]string, []contract.NotifyProgressInput, []contract.NotifyEvent, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.entries...), append([]contract.NotifyProgressInput(nil), l.windows...),
		append([]contract.NotifyEvent(nil), l.sent...), append([]string(nil), l.senders...)
}

// progressHarness runs an eval of n episodes at concurrency 2, each taking episode (workflow
// time), for a tenant wanting events. Each job.progress window answers "next in 5s" and marks
// the endpoint sent with the window's number; done (if > 0) ends the windows at that one.
func progressHarness(t *testing.T, episode time.Duration, done int, events ...string) (*harness, *progressLog) {
	return progressHarnessSlow(t, episode, 0, done, events...)
}

// progressHarnessSlow is progressHarness whose windows each take window (workflow time).
func progressHarnessSlow(t *testing.T, episode, window time.Duration, done int, events ...string) (*harness, *progressLog) {
	l := &progressLog{}
	w := &Workflows{Resume: testWorkflows.Resume, Notify: wantsOf{"acme": events}}
	h := &harness{jobHarness: newJobHarness(t, KindEval, testJobID, w, testActs, func(env *testsuite.TestWorkflowEnvironment) {
		RegisterNotify(env, &activities.Notifier{})
		env.OnActivity(contract.NotifyActivityName, mock.Anything, mock.Anything).Return(
			func(ctx context.Context, in contract.NotifyInput) (contract.NotifyResult, error) {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.entries = append(l.entries, in.Event.Type)
				l.sent = append(l.sent, in.Event)
				l.senders = append(l.senders, activity.GetInfo(ctx).WorkflowType.Name)
				return contract.NotifyResult{}, nil
			})
		env.OnActivity(contract.NotifyProgressActivityName, mock.Anything, mock.Anything).After(window).Return(
			func(_ context.Context, in contract.NotifyProgressInput) (contract.NotifyProgressResult, error) {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.entries = append(l.entries, authz.EventJobProgress)
				l.windows = append(l.windows, in)
				n := len(l.windows)
				return contract.NotifyProgressResult{NextIn: Duration(5 * time.Second), Done: done > 0 && n >= done,
					Sent: map[string]contract.ProgressMark{"recv": {Key: fmt.Sprint(n)}}}, nil
			})
		// A notifier no longer running (or never started here): the server answers not found.
		env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything).
			Return(errors.New("unknown external workflow execution"))
		env.OnActivity(testActs.RunEpisode, mock.Anything, mock.Anything).After(episode).
			Return(contract.EpisodeResult{Score: 1, Passed: true}, nil)
	})}
	return h, l
}

// progressInput is an eval of n episodes at concurrency 2 that needs no approval.
func progressInput(n int) EvalInput {
	in := evalInput(n, 2)
	in.Approval.Threshold = 0
	return in
}

// TestNotifyProgress_WindowsThenFinished: a tenant wanting job.progress gets one window every
// 5s while the job runs (30s of episodes: about seven), each window given what the last one
// sent; the job's end goes out once, from the notifier, after its last window, under the
// job.finished event ID; nothing follows it.
func TestNotifyProgress_WindowsThenFinished(t *testing.T) {
	h, l := progressHarness(t, 10*time.Second, 0, authz.EventJobProgress, authz.EventJobFinished)
	h.execute(progressInput(6)) // 2 at a time, 10s each: 30s
	h.resultInto(&EvalResult{})
	entries, windows, sent, senders := l.snapshot()
	require.NotEmpty(t, entries)
	assert.Equal(t, authz.EventJobFinished, entries[len(entries)-1], "job.finished is the last thing sent: %v", entries)
	require.Len(t, sent, 1, "one job.finished: %v", entries)
	assert.Equal(t, NotifyEventID(testJobID, testRunID, authz.EventJobFinished, ""), sent[0].ID)
	assert.Equal(t, string(StatusSucceeded), sent[0].Status)
	assert.Equal(t, NotifyProgressWorkflowName, senders[0], "the notifier, not a separate child, sends the end")
	t.Logf("sent in order: %v", entries)
	assert.GreaterOrEqual(t, len(windows), 6, "a window every 5s over 30s of episodes: %d", len(windows))
	assert.LessOrEqual(t, len(windows), 9, "no more than one window per 5s: %d", len(windows))
	for i, w := range windows {
		assert.Equal(t, testJobID, w.JobID)
		assert.Equal(t, testRunID, w.FirstRunID)
		assert.Equal(t, "acme", w.Tenant)
		assert.Equal(t, "eval", w.Kind)
		if i > 0 {
			assert.Equal(t, fmt.Sprint(i), w.Sent["recv"].Key, "window %d is given what window %d sent", i+1, i)
		}
	}
}

// TestNotifyProgress_WithoutFinished: a tenant wanting job.progress but not job.finished gets
// its windows and no end event; a tenant wanting neither starts no notifier at all.
func TestNotifyProgress_WithoutFinished(t *testing.T) {
	h, l := progressHarness(t, 10*time.Second, 0, authz.EventJobProgress)
	h.execute(progressInput(4))
	h.resultInto(&EvalResult{})
	entries, windows, sent, _ := l.snapshot()
	assert.NotEmpty(t, windows)
	assert.Empty(t, sent, "%v", entries)

	h2, l2 := progressHarness(t, 10*time.Second, 0, authz.EventJobFinished)
	h2.execute(progressInput(4))
	h2.resultInto(&EvalResult{})
	_, windows2, sent2, senders2 := l2.snapshot()
	assert.Empty(t, windows2, "no job.progress window for a tenant that does not want it")
	require.Len(t, sent2, 1)
	assert.Equal(t, NotifyWorkflowName, senders2[0], "job.finished goes out the usual way")
}

// TestNotifyProgress_NotifierStoppedOnItsOwn: a notifier that stopped before the job ended
// (its window read the job as ended, or no endpoint wants job.progress any more) is gone when
// the job signals; the job then sends job.finished the usual way, once.
func TestNotifyProgress_NotifierStoppedOnItsOwn(t *testing.T) {
	h, l := progressHarness(t, 10*time.Second, 2, authz.EventJobProgress, authz.EventJobFinished)
	h.execute(progressInput(6))
	h.resultInto(&EvalResult{})
	entries, windows, sent, senders := l.snapshot()
	assert.Len(t, windows, 2, "%v", entries)
	require.Len(t, sent, 1, "%v", entries)
	assert.Equal(t, NotifyWorkflowName, senders[0])
	assert.Equal(t, NotifyEventID(testJobID, testRunID, authz.EventJobFinished, ""), sent[0].ID)
}

// TestNotifyProgress_LaterRunEndsTheNotifier: a run after continue-as-new starts no notifier
// of its own; the first run's is carried in the state (here absent from the environment, so
// the signal fails and job.finished goes out the usual way: never lost).
func TestNotifyProgress_LaterRunEndsTheNotifier(t *testing.T) {
	h, l := progressHarness(t, time.Second, 0, authz.EventJobProgress, authz.EventJobFinished)
	in := progressInput(6)
	in.State = &EvalState{Next: 3, Scored: 3, Passed: 3, Sum: 3, SumSq: 3, Runs: 1, ProgressNotify: true}
	h.execute(in)
	res := &EvalResult{}
	h.resultInto(res)
	assert.Equal(t, 6, res.Scored)
	_, windows, sent, senders := l.snapshot()
	assert.Empty(t, windows, "a later run starts no notifier")
	require.Len(t, sent, 1)
	assert.Equal(t, NotifyWorkflowName, senders[0])
}

// TestNotifyProgress_CancelledJob: a cancelled job's notifier still sends its end (cancelled,
// with the error code) after its last window; the job's cancel does not cancel the notifier.
func TestNotifyProgress_CancelledJob(t *testing.T) {
	h, l := progressHarness(t, 10*time.Second, 0, authz.EventJobProgress, authz.EventJobFinished)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 12*time.Second)
	h.execute(progressInput(6))
	require.True(t, h.env.IsWorkflowCompleted())
	entries, windows, sent, senders := l.snapshot()
	assert.NotEmpty(t, windows)
	require.Len(t, sent, 1, "%v", entries)
	assert.Equal(t, string(StatusCancelled), sent[0].Status)
	assert.Equal(t, ErrCodeCancelled, sent[0].ErrorCode)
	assert.Equal(t, NotifyProgressWorkflowName, senders[0])
	assert.Equal(t, authz.EventJobFinished, entries[len(entries)-1])
}

// TestNotifyProgress_EndStopsTheWindowInFlight: the job ends while a window is still
// delivering (each takes 4s here): the notifier stops it (a cancel; on a real server the
// activity lets its request in flight answer first, tests/notify_progress_test.go) and sends
// job.finished last, once, with no window after it.
func TestNotifyProgress_EndStopsTheWindowInFlight(t *testing.T) {
	h, l := progressHarnessSlow(t, 10*time.Second, 4*time.Second, 0, authz.EventJobProgress, authz.EventJobFinished)
	h.execute(progressInput(4)) // ends at 20s; windows start at 0, 9, 18: the last is in flight
	h.resultInto(&EvalResult{})
	entries, windows, sent, _ := l.snapshot()
	t.Logf("sent in order: %v", entries)
	assert.Equal(t, 3, h.count(contract.NotifyProgressActivityName), "windows started")
	assert.Len(t, windows, 2, "the window in flight was stopped before it answered")
	require.Len(t, sent, 1)
	assert.Equal(t, authz.EventJobFinished, entries[len(entries)-1])
}

// notifierEnv runs the NotifyProgress workflow alone; window answers each window by its
// number (1, 2, …), and every job.finished delivery is recorded.
func notifierEnv(t *testing.T, window func(n int) (contract.NotifyProgressResult, error)) (*testsuite.TestWorkflowEnvironment, *progressLog) {
	l := &progressLog{}
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	RegisterNotify(env, &activities.Notifier{})
	env.OnActivity(contract.NotifyActivityName, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.NotifyInput) (contract.NotifyResult, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.entries = append(l.entries, in.Event.Type)
			l.sent = append(l.sent, in.Event)
			return contract.NotifyResult{}, nil
		})
	env.OnActivity(contract.NotifyProgressActivityName, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.NotifyProgressInput) (contract.NotifyProgressResult, error) {
			l.mu.Lock()
			l.entries = append(l.entries, authz.EventJobProgress)
			l.windows = append(l.windows, in)
			n := len(l.windows)
			l.mu.Unlock()
			return window(n)
		})
	return env, l
}

// TestNotifyProgress_Notifier: the notifier's own loop. The end signal during the wait for the
// next window ends it at once (no further window), then job.finished goes out; a window that
// fails is skipped and the next comes as long after as the window before asked, with what was
// last sent.
func TestNotifyProgress_Notifier(t *testing.T) {
	in := contract.NotifyProgressInput{Tenant: "acme", JobID: testJobID, FirstRunID: testRunID, Kind: "eval", Owner: "ann"}
	fin := &contract.NotifyEvent{ID: "evt_fin", Type: authz.EventJobFinished, Status: "succeeded"}

	t.Run("EndWhileWaiting", func(t *testing.T) {
		env, l := notifierEnv(t, func(n int) (contract.NotifyProgressResult, error) {
			return contract.NotifyProgressResult{NextIn: Duration(5 * time.Second)}, nil
		})
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalJobEnded, JobEnded{Finished: fin}) }, 12*time.Second)
		env.ExecuteWorkflow(NotifyProgressWorkflowName, in)
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		entries, windows, sent, _ := l.snapshot()
		assert.Len(t, windows, 3, "windows at 0, 5 and 10s; the end at 12s stops the wait: %v", entries)
		require.Len(t, sent, 1)
		assert.Equal(t, "evt_fin", sent[0].ID)
		assert.Equal(t, authz.EventJobFinished, entries[len(entries)-1])
	})

	t.Run("FailedWindowSkipped", func(t *testing.T) {
		var env *testsuite.TestWorkflowEnvironment
		var at []time.Duration
		var start time.Time
		env, l := notifierEnv(t, func(n int) (contract.NotifyProgressResult, error) {
			at = append(at, env.Now().Sub(start))
			switch n {
			case 1:
				return contract.NotifyProgressResult{NextIn: Duration(5 * time.Second),
					Sent: map[string]contract.ProgressMark{"recv": {Key: "k1"}}}, nil
			case 2:
				return contract.NotifyProgressResult{}, errors.New("worker lost")
			case 3:
				return contract.NotifyProgressResult{NextIn: Duration(10 * time.Second)}, nil
			case 4:
				return contract.NotifyProgressResult{}, errors.New("worker lost")
			}
			return contract.NotifyProgressResult{Done: true}, nil
		})
		start = env.Now()
		env.ExecuteWorkflow(NotifyProgressWorkflowName, in)
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		_, windows, sent, _ := l.snapshot()
		require.Len(t, windows, 5)
		assert.Equal(t, "k1", windows[2].Sent["recv"].Key, "the window after a failed one gets what was last sent")
		assert.Empty(t, sent, "no end signal: the notifier stops when a window reads the job as ended")
		require.Len(t, at, 5)
		// A failed window waits as long as the window before it asked.
		assert.Equal(t, []time.Duration{5 * time.Second, 5 * time.Second, 10 * time.Second, 10 * time.Second},
			[]time.Duration{at[1] - at[0], at[2] - at[1], at[3] - at[2], at[4] - at[3]})
	})
}

// TestNotifyProgress_Export: the notifier is every kind's (started where the job first runs):
// an export's windows name its kind, and its end goes out from the notifier after them.
func TestNotifyProgress_Export(t *testing.T) {
	l := &progressLog{}
	w := &Workflows{Resume: testWorkflows.Resume, Notify: wantsOf{"acme": {authz.EventJobProgress, authz.EventJobFinished}}}
	h := newExportHarnessWith(t, w, func(env *testsuite.TestWorkflowEnvironment) {
		RegisterNotify(env, &activities.Notifier{})
		env.OnActivity(contract.NotifyActivityName, mock.Anything, mock.Anything).Return(
			func(ctx context.Context, in contract.NotifyInput) (contract.NotifyResult, error) {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.entries = append(l.entries, in.Event.Type)
				l.sent = append(l.sent, in.Event)
				l.senders = append(l.senders, activity.GetInfo(ctx).WorkflowType.Name)
				return contract.NotifyResult{}, nil
			})
		env.OnActivity(contract.NotifyProgressActivityName, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in contract.NotifyProgressInput) (contract.NotifyProgressResult, error) {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.entries = append(l.entries, authz.EventJobProgress)
				l.windows = append(l.windows, in)
				return contract.NotifyProgressResult{NextIn: Duration(5 * time.Second)}, nil
			})
	})
	h.partMock.After(10 * time.Second)
	h.execute(exportInput(false))
	h.result()
	entries, windows, sent, senders := l.snapshot()
	t.Logf("sent in order: %v", entries)
	require.NotEmpty(t, windows)
	assert.Equal(t, "export", windows[0].Kind)
	assert.Equal(t, exportJobID, windows[0].JobID)
	require.Len(t, sent, 1)
	assert.Equal(t, NotifyProgressWorkflowName, senders[0])
	assert.Equal(t, string(StatusSucceeded), sent[0].Status)
	assert.Equal(t, authz.EventJobFinished, entries[len(entries)-1])
}

// TestNotifyProgress_Replay: the recorded job.progress run (testdata/genprogress) replays: the
// job's two runs (eval_progress_run*.json, in TestEval_Replay) and its notifier, whose history
// holds two windows, the end signal cutting the wait for a third, and job.finished.
func TestNotifyProgress_Replay(t *testing.T) {
	replay(t, "notify_progress.json", "acme/eval/replay-progress/progress/"+progressFirstRun(t), NotifyProgressWorkflowName, NotifyProgress)
}

// progressFirstRun is the recorded job's first run ID (the notifier's ID ends with it).
func progressFirstRun(t *testing.T) string {
	h := loadHistory(t, "eval_progress_run1.json")
	return h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetOriginalExecutionRunId()
}
