// Command receiver runs the jobgate test receiver (package tests/support/receiver) as its own process:
//
//	go run ./tests/support/receiver/cmd/receiver -addr 127.0.0.1:8089 -dir /tmp/receiver
//
// It prints the episodes URL to put in an http suite's "url", keeps its state in -dir (restart it
// with the same -dir and it remembers what it applied), and takes faults on POST /control.
//
// It imports only tests/support/receiver of jobgate.
package main
