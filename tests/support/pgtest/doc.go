// Package pgtest runs a real, throwaway PostgreSQL server for tests: initdb into a temporary
// directory, pg_ctl start on a free 127.0.0.1 port, every statement logged, and everything
// stopped and removed when the test ends.
//
// The PostgreSQL binaries (initdb, pg_ctl, postgres) must be on PATH. Without them, or with
// -short (a PostgreSQL server is too heavy for the fast loop), a test is skipped, except under
// CI=true, where it fails: CI must never pass by skipping (tests/support/testenv).
//
// It is a test-support package like net/http/httptest, and lives beside the dataset code whose
// tests need it (activities' export tests, and the integration tests in tests/): library tests
// never import tests/..., and an internal/ package could not be imported from tests/.
//
// # Happy path
//
//	pg := pgtest.Start(t)                 // a fresh server and database, stopped when t ends
//	pg.Exec(t, `CREATE TABLE customers (…)`)
//	// … point a dataset's dsn (or Temporal's persistence) at pg.DSN …
//	pg.Statements()                       // every statement the server received, from its log
//
// # Guarantees
//
//   - Each Start is its own server, data directory and port: tests never share state.
//   - Statements reads the server's own statement log, so a test can prove what was (or was
//     not) sent to the database, whoever sent it.
package pgtest
