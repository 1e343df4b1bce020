package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jobgate/jobgate/tests/support/receiver"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8089", "address to listen on")
	dir := flag.String("dir", "", "state directory: effects.jsonl and attempts.jsonl (required)")
	dup := flag.Bool("allow-duplicates", false, "apply every POST, a repeated Idempotency-Key included")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "receiver: -dir is required")
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*addr, *dir, *dup); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(addr, dir string, dup bool) error {
	r, err := receiver.New(dir)
	if err != nil {
		return err
	}
	r.AllowDuplicates(dup)
	srv, err := r.Start(addr)
	if err != nil {
		return err
	}
	fmt.Printf("receiver: episodes at %s, control at http://%s%s, state in %s\n",
		srv.URL, srv.Addr, receiver.ControlPath, dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return srv.Close()
}
