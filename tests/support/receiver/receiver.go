package receiver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
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
