// Command genfixture records the conformance fixture workflow's histories in workflows/testdata
// (fixture_*.json) against an embedded Temporal server, for TestFixture_Replay in
// workflows/fixture_test.go: multi_input answered one question at a time, slow_compute
// cancelled while it waits, and protocol_error_job. Rerun it after a deliberate, versioned
// change to the workflow:
//
//	go run ./workflows/testdata/genfixture -out workflows/testdata
//
// It lives under testdata so `go build ./...`, `go vet ./...` and `go test ./...` skip it.
package main
