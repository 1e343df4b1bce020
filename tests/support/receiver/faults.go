// faults.go holds the receiver's fault injection: the settings (as methods and as POST /control),
// and how they are taken and applied to one request.

package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// AllowDuplicates makes POST apply every request, a repeated key included: a receiver without
// idempotency, to prove the caller never re-sends an operation it could reconcile.
func (r *Receiver) AllowDuplicates(on bool) {
	r.mu.Lock()
	r.allowDup = on
	r.mu.Unlock()
}

// DropNext closes the connection without answering for the next n requests to /episodes
// (a POST is applied first). n <= 0 clears it.
func (r *Receiver) DropNext(n int) {
	r.mu.Lock()
	r.dropNext = max(n, 0)
	r.mu.Unlock()
}

// DropKey closes the connection without answering for the next n requests carrying key.
func (r *Receiver) DropKey(key string, n int) {
	r.mu.Lock()
	if n > 0 {
		r.dropKeys[key] = n
	} else {
		delete(r.dropKeys, key)
	}
	r.mu.Unlock()
}

// HoldAfterApplyNext makes the next n POSTs apply their effect, then wait d (or until the
// caller goes away) before answering: the window in which a worker can die after the effect.
func (r *Receiver) HoldAfterApplyNext(n int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holdNext, r.holdFor = n, d
}

// StallNext makes the next n requests to /episodes wait d (at most an hour) before they are
// handled; a client that goes away meanwhile gets nothing applied.
func (r *Receiver) StallNext(n int, d time.Duration) {
	r.mu.Lock()
	r.stallNext, r.stallFor = max(n, 0), min(max(d, 0), maxStall)
	r.mu.Unlock()
}

// FailNext answers status (400-599; else 503) to the next n requests to /episodes, applying nothing.
func (r *Receiver) FailNext(n int, status int) {
	if status < 400 || status > 599 {
		status = http.StatusServiceUnavailable
	}
	r.mu.Lock()
	r.failNext, r.failStatus = max(n, 0), status
	r.mu.Unlock()
}

// Stalling is how many requests are in a stall right now.
func (r *Receiver) Stalling() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stalling
}

// fault is what the receiver was told to do to one request.
type fault struct {
	status int
	stall  time.Duration
	hold   time.Duration // after applying, before answering
	drop   bool
}

// takeFault consumes the faults that apply to the next request for key. Holds after applying
// concern only POSTs (which apply); a reconciling GET never consumes one.
func (r *Receiver) takeFault(key string, post bool) fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	var f fault
	if r.failNext > 0 {
		r.failNext--
		f.status = r.failStatus
		return f
	}
	if r.stallNext > 0 {
		r.stallNext--
		f.stall = r.stallFor
	}
	if post && r.holdNext > 0 {
		r.holdNext--
		f.hold = r.holdFor
	}
	if r.dropNext > 0 {
		r.dropNext--
		f.drop = true
	} else if n := r.dropKeys[key]; n > 0 {
		if n == 1 {
			delete(r.dropKeys, key)
		} else {
			r.dropKeys[key] = n - 1
		}
		f.drop = true
	}
	return f
}

// stall waits d unless the request or the receiver ends first; false when it did.
func (r *Receiver) stall(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	r.mu.Lock()
	r.stalling++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.stalling--
		r.mu.Unlock()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done(): // the client went away, or the server closed
		return false
	}
}

// preface applies the faults that come before handling (an injected status, a stall) to a
// request for at.Key, recording and answering when one ends it; ok says to go on.
func (r *Receiver) preface(w http.ResponseWriter, req *http.Request, at *Attempt) (fault, bool) {
	f := r.takeFault(at.Key, req.Method == http.MethodPost)
	if f.status != 0 {
		at.Outcome, at.Status = OutcomeInjected, f.status
		r.record(*at)
		writeJSON(w, f.status, map[string]string{"error": "injected failure"})
		return f, false
	}
	if !r.stall(req.Context(), f.stall) {
		at.Outcome = OutcomeAbandoned
		r.record(*at)
		hangUp(w) // never an empty answer: the stall was cut short, nothing was handled
		return f, false
	}
	return f, true
}

// Control is the body of POST /control; absent fields leave a setting alone.
type Control struct {
	DropNext        *int   `json:"drop_next,omitempty"`
	DropKey         string `json:"drop_key,omitempty"`
	DropKeyTimes    int    `json:"drop_key_times,omitempty"` // default 1
	StallNext       *int   `json:"stall_next,omitempty"`
	Stall           string `json:"stall,omitempty"` // duration, like "5s"
	FailNext        *int   `json:"fail_next,omitempty"`
	FailStatus      int    `json:"fail_status,omitempty"` // default 503
	AllowDuplicates *bool  `json:"allow_duplicates,omitempty"`
}

// control serves POST /control (set faults), GET /control (status), GET /control/effects and
// GET /control/attempts, for a receiver running as its own process.
func (r *Receiver) control(w http.ResponseWriter, req *http.Request, sub string) {
	switch {
	case sub == "/effects" && req.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, r.Effects())
	case sub == "/attempts" && req.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, r.Attempts())
	case sub == "" && req.Method == http.MethodGet:
		r.mu.Lock()
		st := map[string]any{"dir": r.dir, "drop_next": r.dropNext, "drop_keys": len(r.dropKeys),
			"stall_next": r.stallNext, "stall": r.stallFor.String(), "fail_next": r.failNext,
			"fail_status": r.failStatus, "stalling": r.stalling, "allow_duplicates": r.allowDup,
			"applied": len(r.scores), "attempts": len(r.attempts)}
		r.mu.Unlock()
		writeJSON(w, http.StatusOK, st)
	case sub == "" && req.Method == http.MethodPost:
		var c Control
		dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, controlBodyBytes))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad control body: " + truncate(err.Error(), 200)})
			return
		}
		if err := r.Apply(c); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "control: GET /control, /control/effects, /control/attempts or POST /control"})
	}
}

// Apply sets the faults c names, after validating all of it.
func (r *Receiver) Apply(c Control) error {
	var stall time.Duration
	if c.Stall != "" {
		d, err := time.ParseDuration(c.Stall)
		if err != nil || d < 0 || d > maxStall {
			return fmt.Errorf("stall must be a duration within 0..%s", maxStall)
		}
		stall = d
	}
	for _, n := range []*int{c.DropNext, c.StallNext, c.FailNext} {
		if n != nil && *n < 0 {
			return errors.New("counts must not be negative")
		}
	}
	if c.DropKeyTimes < 0 || len(c.DropKey) > maxKeyBytes {
		return errors.New("drop_key_times must not be negative; drop_key at most 4096 bytes")
	}
	if c.FailStatus != 0 && (c.FailStatus < 400 || c.FailStatus > 599) {
		return errors.New("fail_status must be within 400..599")
	}
	if c.DropNext != nil {
		r.DropNext(*c.DropNext)
	}
	if c.DropKey != "" {
		r.DropKey(c.DropKey, max(c.DropKeyTimes, 1))
	}
	if c.StallNext != nil {
		r.StallNext(*c.StallNext, stall)
	}
	if c.FailNext != nil {
		r.FailNext(*c.FailNext, c.FailStatus)
	}
	if c.AllowDuplicates != nil {
		r.AllowDuplicates(*c.AllowDuplicates)
	}
	return nil
}
