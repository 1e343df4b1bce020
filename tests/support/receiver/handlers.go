// handlers.go holds the receiver's HTTP handlers: ServeHTTP's routing, POST and GET of
// /episodes, and how an answer is sent or withheld.

package receiver

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ServeHTTP serves /episodes and /control.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.handlers++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.handlers--; r.handlers == 0 {
			r.idle.Broadcast()
		}
		r.mu.Unlock()
	}()
	p := req.URL.EscapedPath()
	switch {
	case p == EpisodesPath || p == EpisodesPath+"/":
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST an episode here"})
			return
		}
		r.post(w, req)
	case strings.HasPrefix(p, EpisodesPath+"/"):
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "GET a stored result here"})
			return
		}
		r.get(w, req, strings.TrimPrefix(p, EpisodesPath+"/"))
	case p == ControlPath || strings.HasPrefix(p, ControlPath+"/"):
		r.control(w, req, strings.TrimPrefix(p, ControlPath))
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
	}
}

func headerAttempt(req *http.Request) int {
	n, _ := strconv.Atoi(req.Header.Get(AttemptHeader))
	return n
}

func (r *Receiver) post(w http.ResponseWriter, req *http.Request) {
	at := Attempt{At: time.Now().UTC(), Method: req.Method, Key: req.Header.Get(IdempotencyKeyHeader), Attempt: headerAttempt(req)}
	var body struct {
		JobID   *string        `json:"job_id"`
		Episode *int           `json:"episode"`
		Attempt *int           `json:"attempt"`
		Params  map[string]any `json:"params"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBodyBytes))
	switch {
	case at.Key == "" || len(at.Key) > maxKeyBytes:
		r.badRequest(w, at, "an Idempotency-Key header of 1-4096 bytes is required")
		return
	case err != nil:
		r.badRequest(w, at, "unreadable body")
		return
	case json.Unmarshal(raw, &body) != nil || body.JobID == nil || body.Episode == nil || body.Attempt == nil:
		r.badRequest(w, at, `body must be {"job_id", "episode", "attempt", "params"}`)
		return
	}
	at.BodyAttempt = *body.Attempt

	f, ok := r.preface(w, req, &at)
	if !ok {
		return
	}

	r.mu.Lock()
	score, ok := r.scores[at.Key]
	if ok && !r.allowDup {
		at.Outcome = OutcomeReplayed
	} else {
		if !ok {
			score = Score(at.Key)
		}
		e := Effect{At: time.Now().UTC(), Key: at.Key, Score: score, Attempt: at.BodyAttempt}
		if err := appendLine(filepath.Join(r.dir, EffectsFile), e, true); err != nil {
			r.mu.Unlock()
			at.Outcome, at.Status = OutcomeError, http.StatusInternalServerError
			r.record(at)
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "could not persist the effect"})
			return
		}
		r.scores[at.Key] = score
		r.effects[at.Key]++
		at.Outcome = OutcomeApplied
	}
	r.mu.Unlock()
	at.Score = score
	if !r.stall(req.Context(), f.hold) {
		// Applied, but the caller went away before the answer: exactly the uncertain case.
		at.Outcome = OutcomeApplied
		r.record(at)
		hangUp(w)
		return
	}
	r.answer(w, at, f.drop, score)
}

func (r *Receiver) get(w http.ResponseWriter, req *http.Request, escaped string) {
	at := Attempt{At: time.Now().UTC(), Method: req.Method, Attempt: headerAttempt(req)}
	key, err := url.PathUnescape(escaped)
	if err != nil || key == "" || strings.Contains(escaped, "/") || len(key) > maxKeyBytes {
		at.Key = truncate(escaped, 256)
		r.badRequest(w, at, "want GET /episodes/<one path-escaped Idempotency-Key>")
		return
	}
	at.Key = key
	f, ok := r.preface(w, req, &at)
	if !ok {
		return
	}
	r.mu.Lock()
	score, ok := r.scores[key]
	r.mu.Unlock()
	if !ok {
		at.Outcome, at.Status = OutcomeNotFound, http.StatusNotFound
		if f.drop {
			at.Status, at.Dropped = 0, true
			r.record(at)
			hangUp(w)
			return
		}
		r.record(at)
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "never applied"})
		return
	}
	at.Outcome, at.Score = OutcomeFound, score
	r.answer(w, at, f.drop, score)
}

// answer records at and sends {"score": score}, or hangs up when drop is set.
func (r *Receiver) answer(w http.ResponseWriter, at Attempt, drop bool, score float64) {
	if drop {
		at.Dropped = true
		r.record(at)
		hangUp(w)
		return
	}
	at.Status = http.StatusOK
	r.record(at)
	writeJSON(w, http.StatusOK, map[string]float64{"score": score})
}

// hangUp closes the connection without a response.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not HTTP/1 (no hijacking): net/http aborts the response without answering.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, like a crashed receiver
	}
	_ = conn.Close()
}

func (r *Receiver) badRequest(w http.ResponseWriter, at Attempt, msg string) {
	at.Outcome, at.Status = OutcomeBadRequest, http.StatusBadRequest
	r.record(at)
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
