// Package receiver is a test receiver for jobgate's http eval suites: it implements the receiver
// contract (README "HTTP suites") and can be told to misbehave, so tests can prove that every
// episode's effect happens exactly once however the network, the receiver or the worker fails.
//
// POST /episodes with an Idempotency-Key applies the key's effect once — one line appended to
// effects.jsonl in the receiver's directory — and answers {"score": Score(key)}; the same key
// again answers the stored score without a second effect. GET /episodes/<escaped key> answers the
// stored score, or 404 if the key was never applied. Every request to /episodes is recorded in
// attempts.jsonl. State lives in the directory, so a restarted receiver keeps its applied keys.
//
// Faults (methods, or POST /control from another process): drop the connection after applying,
// stall before answering, or answer an injected status without applying.
package receiver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Paths the receiver serves.
const (
	EpisodesPath = "/episodes"
	ControlPath  = "/control"
)

// Files in the receiver's directory.
const (
	EffectsFile  = "effects.jsonl"
	AttemptsFile = "attempts.jsonl"
)

// Headers jobgate sends.
const (
	IdempotencyKeyHeader = "Idempotency-Key"
	AttemptHeader        = "Jobgate-Attempt"
)

// Outcomes of a recorded attempt.
const (
	OutcomeApplied    = "applied"         // POST: the key's effect happened now
	OutcomeReplayed   = "replayed"        // POST: the key was applied before; its stored score answered
	OutcomeFound      = "found"           // GET: stored score answered
	OutcomeNotFound   = "not_found"       // GET: never applied, 404
	OutcomeInjected   = "injected_status" // a FailNext status answered, nothing applied
	OutcomeAbandoned  = "abandoned"       // the client went away during a stall, nothing applied
	OutcomeBadRequest = "bad_request"     // no key, bad body or path, nothing applied
	OutcomeError      = "error"           // the receiver could not persist the effect, 500
)

const (
	maxBodyBytes      = 1 << 20          // of a POST body
	maxStall          = time.Hour        // of one stall
	maxKeyBytes       = 4096             // of an Idempotency-Key
	controlBodyBytes  = 4096             // of a control request
	readHeaderTimeout = 10 * time.Second // of the servers Start runs
	stateFileMode     = 0o644            // of the state files
)

// Attempt is one request to /episodes as the receiver saw it.
type Attempt struct {
	At     time.Time `json:"at"`
	Method string    `json:"method"`
	Key    string    `json:"key"`
	// Attempt is the Jobgate-Attempt header (0 if absent); BodyAttempt the POST body's "attempt".
	Attempt     int    `json:"attempt,omitempty"`
	BodyAttempt int    `json:"body_attempt,omitempty"`
	Outcome     string `json:"outcome"`
	// Status answered; 0 when no answer was sent (dropped or abandoned).
	Status int `json:"status,omitempty"`
	// Dropped: the connection was closed instead of answering (after applying, for a POST).
	Dropped bool    `json:"dropped,omitempty"`
	Score   float64 `json:"score,omitempty"`
}

// Effect is one applied effect, one line of effects.jsonl.
type Effect struct {
	At      time.Time `json:"at"`
	Key     string    `json:"key"`
	Score   float64   `json:"score"`
	Attempt int       `json:"attempt,omitempty"`
}

// Score is the deterministic score the receiver gives key: within [0, 1), three decimals.
func Score(key string) float64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return math.Round(float64(h.Sum64()%1000)) / 1000
}

// Receiver is an http.Handler implementing the receiver contract, with fault injection.
// Only one Receiver may use a directory at a time.
type Receiver struct {
	dir string

	mu         sync.Mutex
	scores     map[string]float64 // applied keys and their stored scores
	effects    map[string]int     // effects per key, from effects.jsonl
	attempts   []Attempt
	allowDup   bool
	dropNext   int
	dropKeys   map[string]int
	stallNext  int
	stallFor   time.Duration
	holdNext   int
	holdFor    time.Duration
	failNext   int
	failStatus int
	stalling   int
	handlers   int        // ServeHTTP calls running
	idle       *sync.Cond // on mu: handlers reached 0
}

// New opens (or creates) the receiver state in dir: applied keys survive a restart.
func New(dir string) (*Receiver, error) {
	if dir == "" {
		return nil, errors.New("receiver: a state directory is required")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	r := &Receiver{dir: dir, scores: map[string]float64{}, effects: map[string]int{},
		dropKeys: map[string]int{}}
	r.idle = sync.NewCond(&r.mu)
	err := readLines(filepath.Join(dir, EffectsFile), func(line []byte) {
		var e Effect
		if json.Unmarshal(line, &e) == nil && e.Key != "" {
			r.effects[e.Key]++
			if _, ok := r.scores[e.Key]; !ok {
				r.scores[e.Key] = e.Score
			}
		}
	})
	if err != nil {
		return nil, err
	}
	err = readLines(filepath.Join(dir, AttemptsFile), func(line []byte) {
		var a Attempt
		if json.Unmarshal(line, &a) == nil {
			r.attempts = append(r.attempts, a)
		}
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// readLines calls fn for every complete line of path and cuts off a torn last line (a crash
// mid-append), so the next append starts on a line of its own. A missing file is empty.
func readLines(path string, fn func([]byte)) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	complete := b
	if i := bytes.LastIndexByte(b, '\n'); i+1 < len(b) {
		complete = b[:i+1]
		if err := os.Truncate(path, int64(i+1)); err != nil {
			return fmt.Errorf("receiver: %w", err)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(complete))
	sc.Buffer(make([]byte, 0, 64<<10), 2*maxBodyBytes)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			fn(line)
		}
	}
	return sc.Err()
}

// Dir is the receiver's state directory.
func (r *Receiver) Dir() string { return r.dir }

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

// Effects is how many times each key's effect was applied, over the directory's whole life.
func (r *Receiver) Effects() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.effects))
	for k, n := range r.effects {
		out[k] = n
	}
	return out
}

// Attempts is every recorded request to /episodes, oldest first, over the directory's whole life.
func (r *Receiver) Attempts() []Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Attempt(nil), r.attempts...)
}

// AttemptsFor is Attempts for one key.
func (r *Receiver) AttemptsFor(key string) []Attempt {
	var out []Attempt
	for _, a := range r.Attempts() {
		if a.Key == key {
			out = append(out, a)
		}
	}
	return out
}

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

// record appends at to attempts.jsonl and to the in-memory list, before any answer is sent: a
// client that got an answer finds its attempt recorded.
func (r *Receiver) record(at Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = appendLine(filepath.Join(r.dir, AttemptsFile), at, false)
	r.attempts = append(r.attempts, at)
}

// appendLine appends v as one JSON line; sync makes it durable before returning.
func appendLine(path string, v any, sync bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, stateFileMode)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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

// Server is a receiver listening on a TCP address.
type Server struct {
	// URL is the episodes endpoint, http://<addr>/episodes: a suite's "url".
	URL string
	// Addr is the address listened on (with the port chosen when addr asked for port 0).
	Addr string

	r         *Receiver
	srv       *http.Server
	done      chan error
	cancel    context.CancelFunc
	closeOnce sync.Once
}

// Start serves r on addr ("127.0.0.1:0" picks a free port) until Close.
func (r *Receiver) Start(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	// Every request's context ends when the server closes, so no stall outlives Close.
	base, cancel := context.WithCancel(context.Background())
	s := &Server{
		URL:  "http://" + ln.Addr().String() + EpisodesPath,
		Addr: ln.Addr().String(),
		r:    r,
		srv: &http.Server{Handler: r, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: time.Minute,
			BaseContext: func(net.Listener) context.Context { return base }},
		done:   make(chan error, 1),
		cancel: cancel,
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server, ends stalls and waits for every handler to finish writing state, so
// the directory can be removed or reopened right after.
// Calling it again is harmless.
func (s *Server) Close() error {
	s.cancel()
	err := s.srv.Close()
	s.closeOnce.Do(func() {
		if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	})
	s.r.mu.Lock()
	for s.r.handlers > 0 {
		s.r.idle.Wait()
	}
	s.r.mu.Unlock()
	return err
}
