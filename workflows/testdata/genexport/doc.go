// Command genexport records Export workflow histories for the replay tests in
// workflows/export_test.go, against an embedded Temporal server, real activities, the demo
// SQLite dataset and a file artifact store:
//
//	go run ./workflows/testdata/genexport -out workflows/testdata -name export_v1.json
//
// export_v0.json was recorded with this program at 972cb3d, before artifacts, the retention
// child and operation IDs were scoped by the job's first run: it proves that jobs started by
// older workers still replay (workflow.GetVersion keeps them on the legacy prefix and child
// ID). export_v2.json was recorded with -approve: a sensitive column too, approved by a
// steward through a sealed resume (meaning prompt, decision record, notification versions).
// -scenario records the others: reask (export_reask.json: the dataset's config changes while
// the job awaits approval; after the approval its plan reports the change and it asks again),
// cancel-waiting, cancel-parts (a part held at its first statement by the query hook while the
// job is cancelled) and retention (the retention child, its artifact kept 2 s, saved once it
// deleted). -approve is -scenario approve.
// It lives under testdata so `go build ./...`, `go vet ./...` and `go test ./...` skip it.
package main
