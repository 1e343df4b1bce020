package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type proxy struct {
	backends []*url.URL
	next     atomic.Uint64
	client   *http.Client
	perBack  []atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "listen address")
	backends := flag.String("backends", "", "comma-separated backend base URLs, e.g. http://127.0.0.1:8081,http://127.0.0.1:8082")
	flag.Parse()
	p := &proxy{conns: map[net.Conn]struct{}{}}
	for _, b := range strings.Split(*backends, ",") {
		u, err := url.Parse(strings.TrimSpace(b))
		if err != nil || u.Host == "" {
			log.Fatalf("bad backend %q", b)
		}
		p.backends = append(p.backends, u)
	}
	if len(p.backends) == 0 {
		log.Fatal("--backends is required")
	}
	p.perBack = make([]atomic.Int64, len(p.backends))
	p.client = &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
	}}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: p, ConnState: p.track, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("lbproxy %s\n", ln.Addr()) // the test reads the bound address from here
	os.Stdout.Sync()
	go func() { _ = srv.Serve(ln) }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	_ = srv.Close()
}

func (p *proxy) track(c net.Conn, s http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch s {
	case http.StateNew:
		p.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(p.conns, c)
	}
}

// drop closes every client connection, in flight or idle, without answering.
func (p *proxy) drop() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		_ = c.Close()
		n++
	}
	return n
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/__lb/drop":
		// Answer first on a connection of its own, then drop everyone (this one included).
		p.mu.Lock()
		n := len(p.conns)
		p.mu.Unlock()
		w.Header().Set("Connection", "close")
		fmt.Fprintf(w, "dropping %d connections\n", n)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		go func() { time.Sleep(10 * time.Millisecond); p.drop() }()
		return
	case "/__lb/stats":
		counts := make([]int64, len(p.backends))
		for i := range p.perBack {
			counts[i] = p.perBack[i].Load()
		}
		_ = json.NewEncoder(w).Encode(counts)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadGateway)
		return
	}
	start := p.next.Add(1)
	var last error
	for i := range p.backends {
		idx := int((start + uint64(i)) % uint64(len(p.backends)))
		resp, err := p.forward(r, body, p.backends[idx])
		if err != nil {
			last = err
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				continue // never reached the backend: safe to try the next
			}
			break // reached it and failed midway: the client must decide (like a real LB)
		}
		p.perBack[idx].Add(1)
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		copyFlushing(w, resp.Body)
		return
	}
	http.Error(w, fmt.Sprintf("no backend answered: %v", last), http.StatusBadGateway)
}

func (p *proxy) forward(r *http.Request, body []byte, to *url.URL) (*http.Response, error) {
	u := *to
	u.Path = strings.TrimRight(to.Path, "/") + r.URL.Path
	u.RawQuery = r.URL.RawQuery
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	req.Header.Del("Connection")
	// A pooled connection to a backend that just died fails on first use. Like a real load
	// balancer that retries a request its upstream never answered, let the transport retry
	// such a request on a fresh connection (net/http does so only for a reused connection that
	// failed before any response, and only for requests it may replay): to a dead backend that
	// fresh connection is a dial error, and ServeHTTP moves on to the next backend. The key is
	// present with no value, so nothing of it goes on the wire.
	req.Header["X-Idempotency-Key"] = nil
	return p.client.Do(req)
}

// copyFlushing copies an answer as it arrives, flushing after every read: a Server-Sent Events
// stream (job events, subscriptions/listen) must reach the client event by event, as through
// nginx with proxy_buffering off.
func copyFlushing(w http.ResponseWriter, body io.Reader) {
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
