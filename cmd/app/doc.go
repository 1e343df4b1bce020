// Package app wires jobgate's commands. Each command is a Main struct with Run(ctx) and
// Close(), so end-to-end tests start the real wiring on :0 in-process.
//
// # Happy path
//
// cmd/jobgate parses a command's flags into its config ([ServeConfig], [WorkerConfig],
// [SetupConfig], …; [BindEnv] gives every flag its JOBGATE_* variable), builds a logger
// ([NewLogger]) and runs the Main:
//
//   - [ServeMain] builds the frontend (token verifier, handle and resume keyrings, catalogs,
//     artifact store, tenants file, Temporal client), binds its listener and serves in the
//     background; Run returns once the listener is bound, Addr says where.
//   - [WorkerMain] connects to Temporal, registers the workflows and activities of the kinds
//     it serves (--kinds) on its task queue, and polls (dev also polls every task queue a suite
//     names, ServeSuiteQueues).
//   - [DevMain] starts the embedded Temporal server and Web UI (package devtemporal), a worker
//     and a frontend in one process, with dev secrets and the demo datasets in its data dir,
//     and prints ready-to-use tokens.
//   - [TemporalMain] runs the embedded server alone; [Setup] makes a namespace of an
//     operator's own Temporal ready (search attributes; retention checked against the datasets).
//
// Tests set the Main's fields that replace what the config would build (a ready Temporal
// client, a verifier, keyrings, a listener) and run the same code the binary runs.
//
// # Kinds
//
// No command names a job kind outside the kind's own files. The worker side of a kind is
// worker_<kind>.go, listed in workerKinds (worker_kinds.go); its serve side (flags, and the
// frontend.KindSpec built from them) and its dev side are serve_<kind>.go, listed in
// serveKinds (serve_kinds.go). A kind with no options of its own needs neither: the
// workflows and frontend registries serve it with its defaults. Code configures a kind
// through ServeConfig.KindSpecs. The conformance fixtures' kind is dev's only
// (serve_fixture.go: `jobgate dev --conformance-fixtures`; no serve spec, no --kinds name).
//
// # Guarantees
//
//   - Wiring only: no job logic lives here; blob drivers, metrics exporters and the dev
//     identity provider are chosen here and injected into the packages below.
//   - Start-up fails with an error naming the flag and its variable for a missing or bad
//     secret, key file, catalog, tenants file or TLS file; serve refuses DEV-ONLY secrets and
//     a worker DEV-ONLY resume keys unless --dev-deployment says this is a dev deployment.
//   - A TLS failure against Temporal ends start-up at once with what to fix; other
//     connection failures are retried (serve starts without Temporal and reports it on /readyz).
//   - Close stops what Run started; serve first drains in-flight requests (for up to 10 s).
//
// README.md in this directory is the long form of the Temporal TLS and API-key options.
//
// It is the one package that wires both sides (frontend; workflows, activities and the blob
// drivers; cmd/devtemporal). Only cmd/jobgate and cmd/app/replay import it; frontend, workflows
// and activities must never import it.
package app
