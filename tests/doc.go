// Package tests holds jobgate's integration suites: a real embedded Temporal server, the real
// frontend and worker wiring (cmd/app) on loopback ports, and the go-sdk MCP client.
//
// # Happy path
//
// TestMain starts one embedded Temporal server (package devtemporal) for the package. A test
// asks the harness (harness_test.go) for an isolated deployment: its own task queue, two
// frontend replicas sharing keys and token secret, and, when it needs one, a worker, all the
// real wiring of package app on loopback ports. It mints tokens for principals of its tenants,
// connects the real go-sdk MCP client to either replica, calls the tools, and asserts what
// Temporal stored: history, visibility, memo, artifacts, logs. Suites that need more start real
// processes (`jobgate` binaries, tests/lbproxy, tests/support/receiver, tests/temporalpg), real
// PostgreSQL servers (tests/support/pgtest), or Node clients (tests/tsclient, tests/conformance).
//
// # Guarantees
//
//   - Real parts only: never a mock of Temporal, of HTTP or of the MCP client.
//   - Tests wait on stored state, not on sleeps.
//   - A missing dependency (PostgreSQL, Node) skips a test locally and fails it under CI=true:
//     CI never passes by skipping.
//
// README.md in this directory records what the suites proved (what survives what) and the
// benchmark figures.
//
// No package imports it; it may import any package of the module, and starts what it cannot
// import (jobgate binaries, tests/lbproxy, tests/temporalpg) as processes.
package tests
