// server.go holds Server: a receiver listening on a TCP address, and its shutdown.

package receiver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

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
