// Package gen is what the history generators (genhistory, genexport) share: an embedded
// Temporal server with jobgate's search attributes and a worker serving one kind, starting a
// job as a frontend does, and saving a run's history for the replay tests. It lives under
// testdata with them, so `go build ./...`, `go vet ./...` and `go test ./...` skip it;
// .ci/run vets it by name so it keeps building.
package gen
