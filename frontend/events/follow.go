// follow.go is the job event source behind GET /jobs/<handle>/events (frontend/events_http.go) and the
// notifications/tasks of subscriptions/listen (frontend/events_listen.go): for one job and a resume
// position it waits on the job's Temporal history and yields what the stream sends — the
// job view, or the task — whenever that changes, with the history position it was read at.

package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/prometheus/client_golang/prometheus"
)

// rendered is what a stream sends for a job at one moment.
type Rendered struct {
	Payload json.RawMessage
	// digest identifies the state payload shows (without what changes on every read, such as
	// a freshly sealed handle): the same digest twice is the same event.
	Digest   string
	Terminal bool
}

// renderFunc renders the job for the stream's caller, through the job core (get_*'s or
// tasks/get's own code), so every event re-checks the caller against the job. An error ends
// the stream; a *ToolError says the caller may no longer see the job (or Temporal failed).
type RenderFunc func(ctx context.Context) (Rendered, error)

// Timing of a follow: the bound of one history wait (Temporal answers a long poll within its
// own interval, about 20s, so this only bounds a hung call) and the back-off after a failed one.
const (
	historyWaitMax = 70 * time.Second
	followRetryMin = 500 * time.Millisecond
	followRetryMax = 15 * time.Second
)

// Follower follows jobs for this replica's event streams: it shares each followed run's
// history wait among the streams (hub.go) and re-renders a job when its history says
// its view may have changed.
type Follower struct {
	store jobstore.Store
	// describeJob is the job core's describe of a job (bounded, not found as the core says it).
	describeJob func(ctx context.Context, id string) (*jobstore.Job, error)
	metrics     followMetrics
	hub         *historyHub
}

// followMetrics are the counters a Follower adds to.
type followMetrics struct {
	// streamCalls counts the work done for streams (history_wait, describe, render).
	streamCalls *prometheus.CounterVec
}

// NewFollower follows jobs in store, describing them with describe and counting its work in
// calls (by what: history_wait, describe, render).
func NewFollower(store jobstore.Store, describe func(ctx context.Context, id string) (*jobstore.Job, error), calls *prometheus.CounterVec) *Follower {
	f := &Follower{store: store, describeJob: describe, metrics: followMetrics{streamCalls: calls}}
	f.hub = newHistoryHub(f)
	return f
}

func (fo *Follower) describe(ctx context.Context, id string) (*jobstore.Job, error) {
	return fo.describeJob(ctx, id)
}

// isStreamRender reports whether ctx is a stream's re-render (streamRenderKey).
func IsRender(ctx context.Context) bool { return ctx.Value(streamRenderKey{}) != nil }

// followJob follows job id from pos (the zero JobPos: from nothing sent). It watches the
// current run's history through the replica's hub (one long poll per run, shared by every
// stream of the replica: hub.go; no poll loop here); once the history is read to its
// end, and after every event that can change the job's view, it renders the job and calls
// emit with what it rendered and the new position when the digest differs from the one last
// sent — so a resumed stream sends what changed since pos and nothing twice. A run that
// continued as new is followed into the next one. It returns nil once the job is terminal
// (emitted, or already sent before pos), emit's or render's error, or ctx's.
func (fo *Follower) FollowJob(ctx context.Context, id string, pos handle.JobPos, render RenderFunc, emit func(Rendered, handle.JobPos) error) error {
	retry := followRetryMin
	var failedRun string // a run whose watch gave up: finding it current again ends the stream
	for {
		j, err := fo.describe(ctx, id)
		if err != nil {
			if !fo.followRetryable(ctx, err, &retry) {
				return err
			}
			continue
		}
		if j.RunID == failedRun {
			return fmt.Errorf("job %s: its history cannot be read", id)
		}
		next, err := fo.followRun(ctx, j.RunID, id, pos, render, emit)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errRunClosed):
			pos = next // continued as new: the next run
		case errors.Is(err, errRunUnreadable):
			pos, failedRun = next, j.RunID
			if !fo.followRetryable(ctx, jobstore.ErrStoreUnavailable, &retry) {
				return ctx.Err()
			}
		default:
			return err
		}
	}
}

var (
	errRunClosed     = errors.New("the run closed without the job ending")
	errRunUnreadable = errors.New("the run's history could not be read")
)

// followRun is followJob on one run; it returns the position reached with errRunClosed when
// the run closed without the job ending (continue-as-new), or errRunUnreadable.
func (fo *Follower) followRun(ctx context.Context, run, id string, pos handle.JobPos, render RenderFunc, emit func(Rendered, handle.JobPos) error) (handle.JobPos, error) {
	w, release := fo.hub.watch(id, run)
	defer release()
	rendered := int64(-1) // the relevant event the last render saw
	closedSeen := false   // a render saw the run closed
	if pos.Digest != "" && pos.Run == run {
		rendered = pos.Event // a resumed stream: nothing to render until something after it
	}
	for {
		st, changed := w.state()
		if st.err != nil {
			return pos, fmt.Errorf("%w: %w", errRunUnreadable, st.err)
		}
		// A closed run is rendered once here in any case: a stream resumed after the job's
		// end learns that it ended (the digest keeps the last view from being sent twice).
		if (st.caughtUp || st.closed) && (st.relevant > rendered || st.closed && !closedSeen) {
			rendered, closedSeen = st.last, st.closed
			j, err := fo.hub.described(ctx, w, st.last)
			if err != nil {
				return pos, err
			}
			fo.metrics.streamCalls.WithLabelValues("render").Inc()
			r, err := render(context.WithValue(withDescribed(ctx, j), streamRenderKey{}, true))
			if err != nil {
				return pos, err
			}
			next := handle.JobPos{Run: run, Event: st.last, Digest: r.Digest}
			if r.Digest != pos.Digest {
				if err := emit(r, next); err != nil {
					return pos, err
				}
			}
			pos = next
			if r.Terminal {
				return pos, nil
			}
		}
		if st.closed {
			return pos, errRunClosed
		}
		select {
		case <-ctx.Done():
			return pos, ctx.Err()
		case <-changed:
		}
	}
}

// followRetryable waits out a Temporal failure worth retrying (unreachable, overloaded, a wait
// cut short) with jittered exponential back-off and reports true; false when err is not one
// (or ctx ended).
func (fo *Follower) followRetryable(ctx context.Context, err error, retry *time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	if !errors.Is(err, jobstore.ErrStoreUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	d := *retry/2 + rand.N(*retry/2+1)
	*retry = min(*retry*2, followRetryMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// viewDigest digests a JSON object without the members named in volatile: a name, or a path
// of names joined by "." into nested objects. Members no path names keep their bytes.
func ViewDigest(payload json.RawMessage, volatile ...string) string {
	b := []byte(payload)
	if len(volatile) > 0 {
		if mb, ok := dropMembers(payload, volatile); ok {
			b = mb
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:handle.EventDigestLen/2])
}

// dropMembers re-encodes the object obj without the members paths name (map keys sorted: a
// canonical order); false when obj is not an object.
func dropMembers(obj json.RawMessage, paths []string) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil || m == nil {
		return nil, false
	}
	nested := map[string][]string{}
	for _, p := range paths {
		if head, rest, ok := strings.Cut(p, "."); ok {
			nested[head] = append(nested[head], rest)
		} else {
			delete(m, p)
		}
	}
	for head, rest := range nested {
		if v, ok := m[head]; ok {
			if vb, ok := dropMembers(v, rest); ok {
				m[head] = vb
			}
		}
	}
	mb, err := json.Marshal(m)
	return mb, err == nil
}

// streamTarget fingerprints what a stream watches (kind of stream and the jobs, in order): an
// event position of another stream is not used (handle.EventPos.Target).
func StreamTarget(stream string, ids []string) string {
	h := sha256.New()
	h.Write([]byte(stream))
	for _, id := range ids {
		h.Write([]byte{0})
		h.Write([]byte(id))
	}
	return stream + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}

// eventPosTTL is how long an event position can resume a stream; past it a reconnecting
// client starts afresh (it is sent the current state once more).
const EventPosTTL = 24 * time.Hour

// streamRenderKey marks the context of a stream's re-render: the tool code it runs logs no
// call and counts no tool metric for it (tools.go).
type streamRenderKey struct{}
