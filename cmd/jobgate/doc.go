// Command jobgate is an MCP server for durable, multi-tenant jobs on Temporal.
//
//	jobgate dev      whole stack in one process (embedded Temporal + Web UI, worker, frontend)
//	jobgate serve    the stateless MCP frontend, against any Temporal
//	jobgate worker   the Temporal worker that runs the jobs
//	jobgate setup    register jobgate's search attributes in your own Temporal (once)
//	jobgate token    mint an HS256 token for development
//	jobgate login    sign in at the server's identity provider (device code, or --browser)
//	jobgate whoami   who the client commands act as; jobgate logout revokes and forgets it
//	jobgate jobs       list, show, watch and download jobs through the MCP endpoint
//	jobgate approvals  list and answer the input requests waiting for you (approvers)
//	jobgate temporal   the embedded Temporal server and Web UI as a process of their own
//	jobgate completion bash|zsh|fish, jobgate version
//
// # Happy path
//
// `jobgate dev` prints tokens and an MCP client config; an agent starts, polls and answers
// jobs with the MCP tools; a person uses the client commands with their own token:
//
//	export JOBGATE_TOKEN=$(jobgate token --tenant acme --sub steward --scope jobs:approve)
//	jobgate approvals list
//	jobgate approvals approve <handle> --comment "ok"
//	JOBGATE_TOKEN=$(jobgate token) jobgate jobs download <handle>
//
// In production, `jobgate setup` prepares the namespace once, then any number of `serve`
// replicas and `worker`s run against the same Temporal namespace and task queue. main only
// parses flags and calls package app, which holds the wiring.
//
// # Guarantees
//
//   - Every server flag has a JOBGATE_* environment variable; `jobgate <command> -h` lists
//     flags, variables and defaults.
//   - The client commands (jobs, approvals) are plain MCP clients of --url (JOBGATE_URL) with
//     the caller's own bearer token (--token, --token-file or JOBGATE_TOKEN, else the stored
//     `jobgate login` of --url): they can do nothing the caller's token cannot do through the tools.
//   - login stores tokens only once the access token is a JWT naming the server's resource and
//     carrying the tenant; the store (user config dir, tokens.json, 0600) is replaced atomically,
//     so a failed login or refresh never leaves half a sign-in.
//   - approvals approve/reject read the job first, print exactly what is being answered and bind
//     the answer to that scope digest, so a request that changed meanwhile is refused.
//   - jobs download keeps a file only once its SHA-256 matches the export's manifest and the
//     server's Repr-Digest.
//   - A job is named by its handle or its job ID (the server resolves either for the caller).
//     Every client command takes --json (registered by newClientCommand): stdout then holds
//     only the tool's structured result as the server sent it.
//   - Exit status: 0 ok; 1 refused by the server (a tool error) or the job failed; 2 usage or
//     connection error.
//
// Only main.go imports cmd/app (the server subcommands); the client commands import
// frontend/wire, frontend/handle and workflows/jobstate, never frontend or workflows
// (TestClientCodeImportsWireNotServer).
package main
