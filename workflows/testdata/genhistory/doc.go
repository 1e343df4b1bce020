// Command genhistory records the Eval workflow histories in workflows/testdata against an
// embedded Temporal server, for the replay tests in workflows/eval_test.go. Rerun it after a
// deliberate, versioned change to the workflow:
//
//	go run ./workflows/testdata/genhistory -out workflows/testdata
//
// It lives under testdata so `go build ./...`, `go vet ./...` and `go test ./...` skip it.
package main
