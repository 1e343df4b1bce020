// Package frontend is jobgate's stateless MCP edge: HTTP, bearer auth, Tasks, streams, and the
// wiring of the job core (frontend/jobcore) to them.
//
// # The happy path
//
// An agent POSTs tools/call start_eval to /mcp with a bearer token. The go-sdk middleware verifies
// the token (authz.Verifier) and puts the principal on the request; the front door (frontDoor, one
// parse of the body) answers 400 to a body the SDK would read differently, and 403 with an
// insufficient_scope challenge if the token holds none of the tool's scopes. Each kind of job is
// a KindSpec (EvalKind, ExportKind, listed once in DefaultKinds) that supplies its start tool,
// options, result view, routes and quota needs; the tool list is built by looping over the kinds.
// start_eval checks the start permission and the idempotency key once (startTool), decodes its
// arguments strictly, validates them against the suite catalog, asks the quota admission
// (frontend/quota) whether the tenant may start it, and asks the job store (frontend/jobstore;
// Temporal is its one production implementation, frontend/temporalstore) to start the
// workflow <tenant>/eval/<owner>/<idempotency_key> with the argument digest in its memo and the
// tenant/owner/kind/status search attributes. It returns only once Temporal has
// durably recorded the start, with a signed handle naming the job. A job that at once waits for
// its owner, started by a client that takes elicitations, is started with Update-With-Start so
// the answer carries the open request without polling.
//
// Later, on any replica, get_eval opens the handle (signature, then tenant, then expiry),
// describes the workflow through the store, re-checks the caller with authz.Decide, and renders
// the job view (jobcore/jobs.go) from the execution status, search attributes and memo alone, so it
// answers while no worker runs. resume_eval seals the answer (handle/resumeseal) and sends a Temporal
// Update whose validator opens the seal and re-checks principal, input_id and scope_digest;
// cancel_eval requests workflow cancellation. tasks/* (the Tasks extension) are methods
// registered with the SDK that run the same get and cancel tools; how a kind's open request
// reads there is jobcore/core.go (taskInput). FixtureKind (jobcore/fixture.go) serves the MCP conformance suite's
// Tasks fixtures as jobs; only `jobgate dev --conformance-fixtures` lists it.
//
// A client that would rather be told than poll opens GET /jobs/<handle>/events
// (events_http.go) or, with the Tasks extension, subscriptions/listen (events_listen.go, served
// by the front door). Both are one event source (events/follow.go): the run's history long poll,
// shared per run by the streams of a replica (events/hub.go), triggers a re-render through the
// same get_* / tasks/get code, sent when it differs from the last event; every event's id is a
// sealed position (handle.EventPos) that resumes the stream on any replica. Streams hold no job
// state: a position is all a reconnecting client brings, and Temporal is all the server reads.
//
// # Guarantees
//
//   - No job state lives in the process: the Frontend holds configuration only.
//   - Identity comes only from the verified token; handles are addresses, not permissions.
//   - Unknown jobs and jobs the caller may not see produce byte-identical not_found results.
//   - Keys are per owner. Same key and arguments return the same job; other arguments are
//     idempotency_key_reused, and nothing starts. Temporal's workflow-ID uniqueness makes this hold across replicas.
//   - Tool errors carry {code, message, retryable} and, on a kind's tools, the kind as a field;
//     Temporal being unreachable is `unavailable`. The JSON shapes clients decode live in
//     frontend/wire (the names here are aliases of them).
//   - Logs carry tool, tenant, sub, job_id and latency; never a token or a handle.
//
// # Where things live
//
// This package is the MCP edge — the HTTP routes, bearer auth and the front door, the Tasks
// extension's methods, subscriptions/listen and GET /jobs/<handle>/events, the pages' port —
// and wires the rest: frontend/jobcore (the kinds, their tools and views, start, get, cancel
// and resume, MRTR answers, lists, approvals and describe_job), frontend/jobstore (the
// typed store, its in-memory twin and the suite both pass), frontend/temporalstore (the only
// package here that calls Temporal), frontend/quota (admission), frontend/events (stream
// machinery), frontend/telemetry (metrics, spans, readiness), frontend/mcpbody (the front
// door's strict parse), frontend/handle (every signed token; handle/resumeseal the answer seal
// the worker opens), frontend/wire (what clients decode), frontend/pages (the people's pages),
// frontend/mcpapp (the MCP Apps approval card, for hosts that declare the extension; apps.go).
// None of them imports this package (TestLayers).
//
// README.md in this directory is the reference for what the frontend answers beyond the tool
// table: the MRTR and Tasks surfaces, job event streams, list cursors, downloads, fairness,
// quotas and metrics.
package frontend
