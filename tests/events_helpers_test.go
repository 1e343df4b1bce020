package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sseEvent is one Server-Sent Event as a client reads it.
type sseEvent struct {
	id, name string
	data     []byte
	at       time.Time // when the client read it
}

// sseStream is an open SSE response, read by its own goroutine: events arrive on events, the
// end of the body (nil, or the read error) on done.
type sseStream struct {
	status     int
	header     http.Header
	body       []byte // the whole body, when the answer was not a stream
	events     chan sseEvent
	done       chan error
	heartbeats atomic.Int64
	cancel     context.CancelFunc
}

// openSSE sends req and, for a 200 text/event-stream answer, reads its events until the body
// ends or close is called.
func openSSE(t testing.TB, req *http.Request) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(req.Context())
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		cancel()
		t.Fatalf("open stream: %v", err)
	}
	s := &sseStream{status: resp.StatusCode, header: resp.Header, events: make(chan sseEvent, 1024), done: make(chan error, 1), cancel: cancel}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		s.body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		close(s.events)
		s.done <- nil
		return s
	}
	t.Cleanup(s.close)
	go func() {
		defer resp.Body.Close()
		defer close(s.events)
		r := bufio.NewReaderSize(resp.Body, 1<<16)
		var ev sseEvent
		var data bytes.Buffer
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				s.done <- err
				return
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if data.Len() > 0 || ev.id != "" {
					ev.data, ev.at = bytes.Clone(data.Bytes()), time.Now()
					s.events <- ev
				}
				ev, data = sseEvent{}, bytes.Buffer{}
			case strings.HasPrefix(line, ":"):
				s.heartbeats.Add(1)
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(strings.TrimPrefix(line, "data: "))
			}
		}
	}()
	return s
}

func (s *sseStream) close() { s.cancel() }

// next returns the next event, failing the test when none comes within d or the stream ends.
func (s *sseStream) next(t testing.TB, d time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatalf("the stream ended: %v", <-s.done)
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no event within %s", d)
	}
	return sseEvent{}
}

// ended waits for the stream's end (the server closed it) and fails on any further event.
func (s *sseStream) ended(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if ok {
			t.Fatalf("an event after the end: %s", ev.data)
		}
	case <-time.After(d):
		t.Fatalf("the stream did not end within %s", d)
	}
}

// jobEventsURL is GET /jobs/<handle>/events on the replica of mcpURL.
func jobEventsURL(mcpURL, h string) string {
	return strings.TrimSuffix(mcpURL, "/mcp") + "/jobs/" + h + "/events"
}

// jobEvents opens GET /jobs/<handle>/events with tok; lastID is sent as Last-Event-ID.
func jobEvents(t testing.TB, url, tok, lastID string) *sseStream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	return openSSE(t, req)
}

// listen opens a 2026-07-28 subscriptions/listen for taskIds with tok, declaring the Tasks
// extension when caps is nil; lastID is sent as Last-Event-ID.
func listen(t testing.TB, url, tok string, taskIDs []string, caps map[string]any, lastID string) *sseStream {
	t.Helper()
	if caps == nil {
		caps = tkCaps()
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": tkID.Add(1), "method": "subscriptions/listen",
		"params": map[string]any{"notifications": map[string]any{"taskIds": taskIDs}, "_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "listen-test", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": caps,
		}}})
	must(t, err)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	return openSSE(t, req)
}

// rpcNote is a JSON-RPC message read off a listen stream: a notification or the final result.
type rpcNote struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
}

func decodeNote(t testing.TB, ev sseEvent) rpcNote {
	t.Helper()
	var n rpcNote
	if err := json.Unmarshal(ev.data, &n); err != nil {
		t.Fatalf("event data is not JSON-RPC: %s", ev.data)
	}
	return n
}
