// Package activities holds every side effect of a jobgate job: running eval episodes (a demo
// function, a command per episode, or a request to an http receiver), reading export datasets
// (SQLite or PostgreSQL), and writing, reading and deleting export artifacts in a blob bucket.
// Workflows reference these methods through a nil *Activities (var a *Activities); the worker
// registers a real one.
//
// # Happy path
//
// The worker loads the suite catalog ([LoadCatalog]: the built-in demo suite plus a
// {"suites":[...]} file), the dataset catalog ({"datasets":[...]}) and opens the artifact store
// ([OpenArtifactStore] on a gocloud.dev/blob URL such as file:///var/lib/jobgate/artifacts), fills
// an [Activities] with them and registers its methods for the kinds it serves.
//
// An eval runs [Activities.RunEpisode] once per episode. The episode's operation ID,
// "<job id>#<first run id>#<episode index>", is the same on every attempt, after a worker death
// and across continue-as-new. A command episode gets it as JOBGATE_OPERATION_ID in an
// allow-list environment; an http episode sends it as the Idempotency-Key of a POST and, on
// every retry, first asks the receiver (GET) whether it was applied.
//
// An export runs PlanExport (after approval: count the tenant's rows, check the dataset config
// the approval covered, cut key ranges), one ExportPart per range (keyset pages written as gzip
// members, the last key heartbeated), FinalizeExport (one artifact and its manifest of sizes and
// SHA-256 digests) and, on cancel or at the end of retention, DeleteExport.
//
// Notifications are [Notifier.Notify], its own type registered once per task queue (every kind
// uses it): one event (a stable ID the workflow derived) signed per Standard Webhooks and POSTed
// to the tenant's endpoints from the tenants file; a retry sends only to the endpoints not done.
// [Notifier.NotifyProgress] is one job.progress window: it reads the job through the injected
// Snapshot and sends its newest state to each endpoint whose progress_every has passed,
// retried only within that window.
//
// # Guarantees
//
//   - Side effects outside Temporal carry a stable, run-scoped operation ID; an uncertain
//     attempt is reconciled, never blindly repeated (an http POST is never re-sent without a GET
//     first).
//   - Every dataset read is filtered by the job's tenant, and table and column names come only
//     from the catalog (quoted), never from arguments; a key column is never sensitive.
//   - A retried part resumes at its heartbeated key and rewrites identical bytes, so the
//     artifact of a run with worker deaths is byte-identical to a clean run's.
//   - Every object of an export lives under its job instance's prefix ([ExportPrefix]), so a new
//     job under a reused workflow ID never reads or deletes an old one's objects.
//   - Workflow history holds references and digests only, never rows; errors quote at most a
//     bounded, operator-safe excerpt of what a receiver or command said.
//   - A notification carries no row data and no handle; every attempt of one event has the same
//     webhook-id; it only reaches URLs from operator config, and a non-public address only
//     where the endpoint allows it (checked on the address dialled).
//   - A command episode sees none of the worker's environment beyond PATH, HOME, LANG, LC_ALL,
//     TZ, the variables its suite names and its own JOBGATE_* episode variables.
//
// What callers share with these activities (their names, inputs, results and records, the
// suite and dataset catalogs) is package activities/contract, which imports no driver:
// workflows and the frontend import only it, so they never link pgx, SQLite or a blob driver.
// Of jobgate, activities imports only activities/contract and authz; it must never import
// workflows, frontend or cmd (workflows reach it by activity name, cmd wires it).
//
// README.md in this directory is the operator's reference: the catalog formats, what a command
// sees, the http receiver protocol, how an export runs and how notifications are delivered.
package activities
