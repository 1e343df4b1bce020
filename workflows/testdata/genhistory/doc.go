// Command genhistory records the Eval workflow histories in workflows/testdata against an
// embedded Temporal server, for the replay tests in workflows/eval_test.go. Rerun it after a
// deliberate, versioned change to the workflow:
//
//	go run ./workflows/testdata/genhistory -out workflows/testdata
//
// eval_approved_v2.json and eval_rejected_v2.json are eval_approved.json and eval_rejected.json
// of a run after issue 18 (decision record, rejection memo, notification versions), copied
// under those names so the older recordings keep replaying too.
//
// eval_episodes_run1.json and eval_episodes_run2.json record the episode log (issue 21: the
// WriteEpisodes activity behind changeEvalEpisodes) across continue-as-new, and
// eval_episodes_log.jsonl the log those runs wrote (history names only its count and digest;
// WriteEpisodes read the outcomes with each run's jobgate.episodes query, as cmd/app wires it).
// `-only episodes` records just those three, leaving the older recordings as they are.
//
// It lives under testdata so `go build ./...`, `go vet ./...` and `go test ./...` skip it.
package main
