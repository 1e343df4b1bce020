// Command webhookrecv runs the notification test receiver (package tests/support/webhookrecv) as
// its own process:
//
//	go run ./tests/support/webhookrecv/cmd/webhookrecv -addr 127.0.0.1:8090 -dir /tmp/wh -secret-file secret
//
// It prints "webhookrecv: listening on http://<addr>" once it accepts connections.
//
// Of jobgate it imports tests/support/webhookrecv and activities (ReadNotifySecret, so it reads a
// secret file exactly as the worker does).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/tests/support/webhookrecv"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	dir := flag.String("dir", "", "state directory: attempts.jsonl and events.jsonl (required)")
	secretFile := flag.String("secret-file", "", "the endpoint's signing secret, whsec_<base64> (required)")
	failFirst := flag.Int("fail-first", 0, "answer 500 to the first n validly signed requests")
	stallFirst := flag.Int("stall-first", 0, "hold the first n validly signed requests until the sender hangs up")
	flag.Parse()
	if *dir == "" || *secretFile == "" {
		fmt.Fprintln(os.Stderr, "webhookrecv: -dir and -secret-file are required")
		os.Exit(2)
	}
	if err := run(*addr, *dir, *secretFile, *failFirst, *stallFirst); err != nil {
		fmt.Fprintln(os.Stderr, "webhookrecv:", err)
		os.Exit(1)
	}
}

func run(addr, dir, secretFile string, failFirst, stallFirst int) error {
	raw, err := os.ReadFile(secretFile)
	if err != nil {
		return err
	}
	secret, err := activities.ReadNotifySecret(raw)
	if err != nil {
		return err
	}
	r, err := webhookrecv.New(dir, secret)
	if err != nil {
		return err
	}
	r.FailFirst, r.StallFirst = failFirst, stallFirst
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("webhookrecv: listening on http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
