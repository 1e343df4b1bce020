// Package testenv holds what the module's tests share about their environment, once: the gate
// for tests that are too heavy for the fast loop (`go test -short ./...`) or need something
// outside Go (PostgreSQL, Node.js) — skipped on a developer's machine, failed under CI=true,
// where a skip would let CI pass without them — and Eventually, the one way tests wait for a
// condition. Tests import it (library tests included: it imports nothing of jobgate); production
// code never does. The name follows Go's own internal/testenv. It sits in activities, the lowest
// layer, beside pgtest and receiver, because the top level is fixed and library tests may not
// import tests/....
package testenv
