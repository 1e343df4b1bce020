package events

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/wire"
)

// Defaults of the stream options.
const (
	StreamHeartbeatDefault     = 15 * time.Second
	MaxStreamsDefault          = 1000
	MaxStreamsPerCallerDefault = 20
	// streamRetryAfter is what a refused stream is told to wait.
	streamRetryAfter = 5 * time.Second
)

// streamLimits bounds the event streams this replica holds open: in all, and per caller.
type Limits struct {
	mu        sync.Mutex
	open      int
	perCaller map[string]int
	max, per  int
}

func NewLimits(max, per int) *Limits {
	return &Limits{perCaller: map[string]int{}, max: max, per: per}
}

// acquire takes a slot for p's stream; release gives it back. A refusal is quota_exceeded.
func (l *Limits) Acquire(p authz.Principal) (release func(), te *wire.ToolError) {
	key := p.Tenant + "\x00" + p.Subject
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.perCaller[key] >= l.per:
		return nil, streamQuota(fmt.Sprintf("you have %d event streams open, the most one caller may hold on a server; close one or retry later", l.per))
	case l.open >= l.max:
		return nil, streamQuota("this server holds as many event streams as it may; retry later (another replica may take it)")
	}
	l.open++
	l.perCaller[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.open--
			if l.perCaller[key]--; l.perCaller[key] <= 0 {
				delete(l.perCaller, key)
			}
		})
	}, nil
}

func streamQuota(msg string) *wire.ToolError {
	return &wire.ToolError{Code: wire.CodeQuotaExceeded, Message: msg, Retryable: true, RetryAfterMS: streamRetryAfter.Milliseconds()}
}

// sseWriter writes one Server-Sent Events response; safe for concurrent use. Its handler
// closes it before returning, so a heartbeat still running writes nothing after that.
type SSE struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	rc     *http.ResponseController
	closed bool
}

// errSSEClosed: a write after close.
var errSSEClosed = errors.New("event stream closed")

// close waits for a write in progress and refuses every later one.
func (s *SSE) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

// startSSE sends the stream's headers (200, text/event-stream, no caching or proxy buffering).
func StartSSE(w http.ResponseWriter) *SSE {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	s := &SSE{w: w, rc: http.NewResponseController(w)}
	// A server's WriteTimeout would cut a long stream off: lift it for this response (serve sets
	// none; an embedder may). Its ReadTimeout does not matter once the body is read.
	_ = s.rc.SetWriteDeadline(time.Time{})
	w.WriteHeader(http.StatusOK)
	_ = s.rc.Flush()
	return s
}

// event writes one event: its id (a sealed position; may be empty) and data (one line of JSON).
func (s *SSE) Event(id string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errSSEClosed
	}
	buf := make([]byte, 0, len(id)+len(data)+32)
	if id != "" {
		buf = append(append(append(buf, "id: "...), id...), '\n')
	}
	buf = append(buf, "event: message\n"...)
	buf = append(append(append(buf, "data: "...), data...), "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// comment writes an SSE comment: the heartbeat that keeps an idle stream open through proxies.
func (s *SSE) comment(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errSSEClosed
	}
	if _, err := s.w.Write([]byte(": " + text + "\n\n")); err != nil {
		return err
	}
	return s.rc.Flush()
}

// heartbeat writes a comment every interval until ctx ends or a write fails (then it cancels
// the stream: the client is gone).
func (s *SSE) Heartbeat(ctx context.Context, cancel context.CancelFunc, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s.comment("keepalive") != nil {
				cancel()
				return
			}
		}
	}
}
