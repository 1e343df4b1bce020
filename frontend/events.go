// events.go is the job event source behind GET /jobs/<handle>/events (events_http.go) and the
// notifications/tasks of subscriptions/listen (events_listen.go): for one job and a resume
// position it waits on the job's Temporal history and yields what the stream sends — the
// job view, or the task — whenever that changes, with the history position it was read at.

package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jobgate/jobgate/frontend/handle"
)

// rendered is what a stream sends for a job at one moment.
type rendered struct {
	payload json.RawMessage
	// digest identifies the state payload shows (without what changes on every read, such as
	// a freshly sealed handle): the same digest twice is the same event.
	digest   string
	terminal bool
}

// renderFunc renders the job for the stream's caller, through the job core (get_*'s or
// tasks/get's own code), so every event re-checks the caller against the job. An error ends
// the stream; a *ToolError says the caller may no longer see the job (or Temporal failed).
type renderFunc func(ctx context.Context) (rendered, error)

// Timing of a follow: the bound of one history wait (Temporal answers a long poll within its
// own interval, about 20s, so this only bounds a hung call) and the back-off after a failed one.
const (
	historyWaitMax = 70 * time.Second
	followRetryMin = 500 * time.Millisecond
	followRetryMax = 15 * time.Second
)

// followJob follows job id from pos (the zero JobPos: from nothing sent). It reads the current
// run's history to its end and then waits in Temporal for it to grow (store.WaitHistory: no
// poll loop here); after every page it renders the job, and calls emit with what it rendered
// and the new position when the digest differs from the one last sent — so a resumed stream
// sends what changed since pos and nothing twice. A run that continued as new is followed into
// the next one. It returns nil once the job is terminal (emitted, or already sent before pos),
// emit's or render's error, or ctx's.
func (f *Frontend) followJob(ctx context.Context, id string, pos handle.JobPos, render renderFunc, emit func(rendered, handle.JobPos) error) error {
	var (
		run   string // the run whose history is being read; "" until the current one is known
		token []byte
		last  int64 // the last event of run read so far
		retry = followRetryMin
	)
	for {
		if run == "" {
			j, err := f.describe(ctx, id)
			if err != nil {
				if !f.followRetryable(ctx, err, &retry) {
					return err
				}
				continue
			}
			run, token, last = j.runID, nil, 0
		}
		wctx, cancel := context.WithTimeout(ctx, historyWaitMax)
		f.metrics.streamCalls.WithLabelValues("history_wait").Inc()
		page, err := f.store.WaitHistory(wctx, id, run, token)
		cancel()
		if err != nil {
			if errors.Is(err, errJobNotFound) {
				run = "" // purged, or reset: describe says what there is now
				if !f.followRetryable(ctx, errStoreUnavailable, &retry) {
					return err
				}
				continue
			}
			if !f.followRetryable(ctx, err, &retry) {
				return err
			}
			continue
		}
		retry = followRetryMin
		closed := page.next == nil
		token = page.next
		if page.last > 0 {
			last = page.last
		} else if !closed {
			continue // the wait's interval passed without news
		}
		if pos.Digest != "" && run == pos.Run && last == pos.Event && !closed {
			continue // exactly where the resumed stream left off: nothing to render
		}
		f.metrics.streamCalls.WithLabelValues("render").Inc()
		r, err := render(ctx)
		if err != nil {
			return err
		}
		next := handle.JobPos{Run: run, Event: last, Digest: r.digest}
		if r.digest != pos.Digest {
			if err := emit(r, next); err != nil {
				return err
			}
		}
		pos = next
		if r.terminal {
			return nil
		}
		if closed {
			// The run ended without the job ending: it continued as new (evals do, per
			// segment). Describe finds the next run; its history is read from the start.
			prev := run
			run = ""
			if j, err := f.describe(ctx, id); err == nil && j.runID == prev {
				// Describe still shows the closed run as current (not yet visible): wait a little.
				if !f.followRetryable(ctx, errStoreUnavailable, &retry) {
					return ctx.Err()
				}
			}
		}
	}
}

// followRetryable waits out a Temporal failure worth retrying (unreachable, overloaded, a wait
// cut short) with jittered exponential back-off and reports true; false when err is not one
// (or ctx ended).
func (f *Frontend) followRetryable(ctx context.Context, err error, retry *time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	if !errors.Is(err, errStoreUnavailable) && !errors.Is(err, context.DeadlineExceeded) && !isTemporalUnavailable(err) {
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

// viewDigest digests a JSON object without the members named in volatile (a job view's
// handle is sealed afresh, with a new expiry, on every read).
func viewDigest(payload json.RawMessage, volatile ...string) string {
	var m map[string]json.RawMessage
	b := []byte(payload)
	if len(volatile) > 0 && json.Unmarshal(payload, &m) == nil && m != nil {
		for _, k := range volatile {
			delete(m, k)
		}
		if mb, err := json.Marshal(m); err == nil { // map keys sorted: a canonical order
			b = mb
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:handle.EventDigestLen/2])
}

// streamTarget fingerprints what a stream watches (kind of stream and the jobs, in order): an
// event position of another stream is not used (handle.EventPos.Target).
func streamTarget(stream string, ids []string) string {
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
const eventPosTTL = 24 * time.Hour
