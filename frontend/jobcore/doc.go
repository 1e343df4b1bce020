// Package jobcore is the job core: the kinds of job (a KindSpec each, declared once in its own
// file: eval.go, export.go, fixture.go; DefaultKinds lists them), their MCP tools and job views,
// starting (idempotency, quota admission, the first state), reading, cancelling and answering
// jobs (MRTR's input_required answers included), list_jobs and list_approvals with their
// cursors, describe_job, an eval's episodes, and the download links and routes the kinds share
// (downloads.go). A Core holds the served kinds over the job store (frontend/jobstore) and the
// quota admission (frontend/quota).
//
// The MCP edge (package frontend) serves a Core: it registers the Core's tools on the MCP
// server, and adds the HTTP routes, bearer auth, the Tasks extension, listen and event streams.
// The core never imports the edge, the Temporal store or the front door (TestLayers); it names
// client.Client once, in Options, for the edge to hand to the Temporal store.
package jobcore
