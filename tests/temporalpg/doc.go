// Command temporalpg runs the pinned Temporal server (go.temporal.io/server, as in go.mod) on
// PostgreSQL, the way an operator runs their own Temporal, for the test that runs jobgate
// against it (tests/postgres_temporal_test.go). Nothing of jobgate's dev stack is involved.
//
//	temporalpg --pg-addr host:port --pg-user u [--pg-password p] --port 7233 ...
//
// It runs the four services (frontend, history, matching, worker) in one process with ringpop
// membership, the default store and visibility on postgres12, and the server's default dynamic
// config (--visibility-rps raises frontend.namespaceRPS.visibility from its default of 10, for a
// benchmark telling that limit apart from the store). The schemas must exist: create them with the module's own temporal-sql-tool
// (go build go.temporal.io/server/cmd/tools/sql), as the test does.
//
// A command, never imported: only the test that runs it links the Temporal server's PostgreSQL
// plugin. It imports no jobgate package.
package main
