// Package workflows holds jobgate's deterministic workflow code and the types the frontend and
// worker share with it: task queue, workflow and update names, search attribute keys, memo keys,
// statuses and the input and result structs of every kind.
//
// # Happy path
//
// A frontend starts one workflow per job, ID "<tenant>/<kind>/<owner>/<idempotency_key>", of
// the kind's registered type ("jobgate.Eval", "jobgate.Export"), with the kind's input: the
// caller's normalized arguments (whose digest is the idempotency fingerprint), the tenant and
// owner from the verified token, and what the frontend resolved from its catalogs at start
// (approval policy, episode or export limits, fairness key and weight). A worker registers each
// kind it serves (its workflow, its auxiliary workflows such as "jobgate.ExportRetention", and
// its activities) with a [Registry]. [FixtureKind] (the MCP conformance suite's Tasks fixtures)
// is looked up like a kind but not in [Kinds]: only `jobgate dev --conformance-fixtures`
// registers it.
//
// Every run then goes the same way, through the kind-independent job run in job.go:
//
//  1. It checks that the tenant of its input is the tenant of its workflow ID, before anything
//     is recorded, and registers the "jobgate.resume" update and the cancel watcher.
//  2. It keeps the JobStatus search attribute and the memo (progress, open input request,
//     error) current, so get_* answers from Describe alone, while no worker runs.
//  3. When the job needs an answer (an owner's approval, an export's four-eyes approval), it
//     opens one input request: the memo's needs_input and the JobAnswerer search attribute say
//     who may answer; the job waits until an accepted answer, expiry or cancel.
//  4. Notifications (notify.go, notify_progress.go): approval.requested while a request is
//     open, job.finished from an abandoned child, and for tenants that want job.progress one
//     abandoned notifier child per job that reads the job each window and, told the job ended
//     (a signal), sends job.finished after its last window.
//  5. It does its work through activities (package activities) and records a small result:
//     an eval's tallies, an export's manifest (references and digests, never rows). An eval
//     continues as new every EpisodesPerRun episodes, carrying its tallies; before it does, and
//     when it ends, the WriteEpisodes activity puts the run's episode outcomes in the artifact
//     store, and only their count and digest go on (eval_episodes.go). The outcomes never enter
//     history: the activity's input names the run and the count, and the activity reads them
//     with the run's query jobgate.episodes (which the frontend's list_episodes reads too)
//     while the run waits for it.
//  6. An eval tallies what its episodes cost and how long they took (eval_budget.go). With a
//     budget it starts an episode only when that episode's worst case still fits, and at the
//     budget opens an input request (step 3) to its owner: approved, it raises the budget by
//     extend_by and goes on; declined or unanswered, it ends succeeded, stopped: "budget".
//     With stop_when it stops scheduling once the mean score's standard error (which assumes
//     independent episodes) is small enough, and succeeds, stopped: "precision". Both are
//     decided from history alone, behind GetVersion "eval-budget".
//
// # Guarantees
//
//   - Determinism: workflow code reads time, randomness and configuration only through the
//     workflow API and its input; behaviour that needs keys or I/O (opening a resume seal) is
//     injected through an interface ([ResumeVerifier]) wired in cmd, never a package global.
//   - Replay: histories recorded by older code (workflows/testdata, with the programs that
//     record them) replay unchanged; a changed command goes behind workflow.GetVersion.
//   - An answer reaches history only through the update validator: it opens the frontend's seal
//     first (resume keys only frontends and workers hold), then checks the sealed principal,
//     input_id and scope_digest against the open request. A rejected answer leaves no event, and
//     nothing the answer authorizes runs before it is accepted.
//   - Everything a job leaves outside Temporal (episode operation IDs, export objects, the
//     retention child) is scoped by its first run ID, so a job that reuses a purged job's
//     workflow ID never meets the old job's leftovers.
//   - Names that are part of history (workflow, update, search attribute, memo keys) never
//     change.
//
// What a job looks like in the Temporal Web UI, and saved queries over the search attributes,
// are in README.md in this directory.
//
// Of jobgate it imports only activities/contract, authz and workflows/jobstate. It must never
// import activities (which links the SQL drivers; TestContractIsALeaf pins it), frontend or cmd,
// and nothing that does I/O: it is deterministic code that histories replay.
package workflows
