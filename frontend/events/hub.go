// hub.go shares the wait on a run's history among every stream of this replica that
// follows the run: one long poll per run, however many listeners (follow.go renders per
// listener, since what a caller sees of a job is the caller's).

package events

import (
	"context"
	"errors"
	"sync"

	"github.com/jobgate/jobgate/frontend/jobstore"
)

// historyHub holds the runs some stream of this replica follows.
type historyHub struct {
	f       *Follower
	mu      sync.Mutex
	watches map[runKey]*runWatch
}

type runKey struct{ id, run string }

// runWatch is one run's history as read so far; its reader goroutine lives while some stream
// holds it.
type runWatch struct {
	key    runKey
	cancel context.CancelFunc
	refs   int // guarded by historyHub.mu

	mu sync.Mutex
	st watchState
	// changed is closed (and replaced) whenever st changes.
	changed chan struct{}

	// The job as last described for the streams of this run (described): dj was read after
	// the history reached event dAt; dBusy is closed when a describe in flight ends.
	dmu   sync.Mutex
	dj    *jobstore.Job
	dAt   int64
	dBusy chan struct{}
}

// watchState is how far a run's history has been read.
type watchState struct {
	last     int64 // the last event read
	relevant int64 // the last event read that can change the job's view (viewEvent)
	caughtUp bool  // a read found no more events waiting (the reader now waits in Temporal)
	closed   bool  // the run is closed and its history read to the end
	err      error // the reader gave up (the run is gone): the stream finds the job anew
}

func newHistoryHub(f *Follower) *historyHub {
	return &historyHub{f: f, watches: map[runKey]*runWatch{}}
}

// watch returns the run's watch, starting its reader if no stream held it; release gives it
// back (the last release stops the reader).
func (h *historyHub) watch(id, run string) (w *runWatch, release func()) {
	k := runKey{id, run}
	h.mu.Lock()
	defer h.mu.Unlock()
	w = h.watches[k]
	if w == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w = &runWatch{key: k, cancel: cancel, changed: make(chan struct{})}
		h.watches[k] = w
		go h.read(ctx, w)
	}
	w.refs++
	var once sync.Once
	return w, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if w.refs--; w.refs == 0 {
				w.cancel()
				delete(h.watches, k)
			}
		})
	}
}

// read follows the run's history from its first event until it closes, the run is gone or no
// stream holds the watch any more; Temporal does the waiting (WaitHistory).
func (h *historyHub) read(ctx context.Context, w *runWatch) {
	var token []byte
	retry := followRetryMin
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, historyWaitMax)
		h.f.metrics.streamCalls.WithLabelValues("history_wait").Inc()
		page, err := h.f.store.WaitHistory(wctx, w.key.id, w.key.run, token)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, jobstore.ErrJobNotFound) || !h.f.followRetryable(ctx, err, &retry) {
				w.update(func(st *watchState) { st.err = err })
				return
			}
			continue
		}
		retry = followRetryMin
		token = page.Next
		w.update(func(st *watchState) {
			st.last = max(st.last, page.Last)
			st.relevant = max(st.relevant, page.Relevant)
			st.caughtUp = st.caughtUp || !page.Full
			st.closed = page.Next == nil
		})
		if page.Next == nil {
			return
		}
	}
}

// update changes the state and wakes every stream waiting on it.
func (w *runWatch) update(change func(*watchState)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	change(&w.st)
	close(w.changed)
	w.changed = make(chan struct{})
}

// state is the state now, and a channel closed at its next change.
func (w *runWatch) state() (watchState, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st, w.changed
}

// described returns the job as read (one Describe) after the run's history reached event last,
// shared by every stream of the run that renders for that event or an earlier one: N listeners
// of a job cost one Describe per change, not N. A describe started before last was seen is
// not used for it.
func (h *historyHub) described(ctx context.Context, w *runWatch, last int64) (*jobstore.Job, error) {
	w.dmu.Lock()
	for {
		if w.dj != nil && w.dAt >= last {
			c := *w.dj // callers may replace fields of their copy (inputRound)
			w.dmu.Unlock()
			return &c, nil
		}
		if busy := w.dBusy; busy != nil {
			w.dmu.Unlock()
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-busy:
			}
			w.dmu.Lock()
			continue
		}
		busy := make(chan struct{})
		w.dBusy = busy
		w.dmu.Unlock()
		h.f.metrics.streamCalls.WithLabelValues("describe").Inc()
		j, err := h.f.describe(ctx, w.key.id)
		w.dmu.Lock()
		w.dBusy = nil
		close(busy)
		if err != nil {
			w.dmu.Unlock()
			return nil, err
		}
		if w.dj == nil || w.dAt < last {
			w.dj, w.dAt = j, last
		}
	}
}

// describedKey carries a job described for a stream's render into the job core: describe
// answers from it instead of asking Temporal again (jobs.go).
type describedKey struct{}

// withDescribed is ctx carrying j as the job's current description.
func withDescribed(ctx context.Context, j *jobstore.Job) context.Context {
	return context.WithValue(ctx, describedKey{}, j)
}

// describedOf is the job a stream's render carries (withDescribed), if any.
func Described(ctx context.Context) (*jobstore.Job, bool) {
	j, ok := ctx.Value(describedKey{}).(*jobstore.Job)
	return j, ok
}
