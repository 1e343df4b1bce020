// Package webhookrecv is a test receiver for jobgate's notifications (activities/notify.go): it
// checks every request's Standard Webhooks signature with the endpoint's secret, records every
// attempt, and accepts each logical event (webhook-id) once, as the spec asks receivers to do,
// so tests can prove one logical event per transition however deliveries are retried.
//
// State lives in a directory: attempts.jsonl (every request: webhook-id, whether the signature
// verified, what was answered) and events.jsonl (each webhook-id's first accepted body, once).
// A restarted receiver on the same directory keeps deduplicating.
//
// Faults: FailFirst answers 500 to the first n validly signed requests; StallFirst holds the
// first n until the sender hangs up (a worker killed mid-delivery).
//
// Test support: only tests and its cmd/webhookrecv import it, never non-test code; it imports
// no jobgate package (it checks signatures as any receiver would).
package webhookrecv

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Attempt is one request as received.
type Attempt struct {
	WebhookID string    `json:"webhook_id"`
	Valid     bool      `json:"valid"`           // the signature verified
	Error     string    `json:"error,omitempty"` // why it did not
	Status    int       `json:"status"`          // what was answered; 0 when the sender hung up first
	At        time.Time `json:"at"`
}

// Event is one accepted logical event.
type Event struct {
	WebhookID string          `json:"webhook_id"`
	Body      json.RawMessage `json:"body"`
}

// Receiver verifies, records and deduplicates deliveries.
type Receiver struct {
	dir string
	wh  *standardwebhooks.Webhook
	// FailFirst and StallFirst are the faults (see the package doc); set before serving.
	FailFirst, StallFirst int

	mu    sync.Mutex
	seen  map[string]bool
	valid int
}

// New opens (or creates) the state directory dir; secret is the endpoint's signing secret.
func New(dir string, secret []byte) (*Receiver, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	wh, err := standardwebhooks.NewWebhookRaw(secret)
	if err != nil {
		return nil, err
	}
	r := &Receiver{dir: dir, wh: wh, seen: map[string]bool{}}
	evs, err := ReadEvents(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		r.seen[e.WebhookID] = true
	}
	return r, nil
}

// ServeHTTP handles one delivery.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	a := Attempt{WebhookID: req.Header.Get(standardwebhooks.HeaderWebhookID), At: time.Now().UTC()}
	if err == nil {
		err = r.wh.Verify(body, req.Header)
	}
	if err != nil {
		a.Error = err.Error()
		a.Status = http.StatusUnauthorized
		r.record(a, nil)
		http.Error(w, "bad signature", a.Status)
		return
	}
	a.Valid = true
	r.mu.Lock()
	r.valid++
	n := r.valid
	r.mu.Unlock()
	switch {
	case n <= r.StallFirst:
		r.record(a, nil) // status 0: held until the sender goes away
		<-req.Context().Done()
		return
	case n <= r.StallFirst+r.FailFirst:
		a.Status = http.StatusInternalServerError
		r.record(a, nil)
		http.Error(w, "injected failure", a.Status)
		return
	}
	a.Status = http.StatusNoContent
	r.record(a, body)
	w.WriteHeader(a.Status)
}

// record appends a to attempts.jsonl and, for an accepted body of a new webhook-id, the event.
func (r *Receiver) record(a Attempt, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	appendJSON(filepath.Join(r.dir, "attempts.jsonl"), a)
	if body != nil && !r.seen[a.WebhookID] {
		r.seen[a.WebhookID] = true
		appendJSON(filepath.Join(r.dir, "events.jsonl"), Event{WebhookID: a.WebhookID, Body: body})
	}
}

func appendJSON(path string, v any) {
	b, _ := json.Marshal(v)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}

// ReadAttempts reads dir's attempts.jsonl (none yet: empty).
func ReadAttempts(dir string) ([]Attempt, error) {
	return readJSONL[Attempt](filepath.Join(dir, "attempts.jsonl"))
}

// ReadEvents reads dir's events.jsonl (none yet: empty).
func ReadEvents(dir string) ([]Event, error) {
	return readJSONL[Event](filepath.Join(dir, "events.jsonl"))
}

func readJSONL[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			continue // a line cut by a kill: the rest still counts
		}
		out = append(out, v)
	}
	return out, sc.Err()
}
