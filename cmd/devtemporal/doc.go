// Package devtemporal embeds a real Temporal server (SQLite persistence) and,
// optionally, the Temporal Web UI, for the one-command dev stack and for
// integration tests.
//
// # Happy path
//
//	srv, err := devtemporal.Start(ctx, devtemporal.Options{
//		DataDir: ".jobgate", // empty: in memory
//		UIPort:  devtemporal.UIDisabled,
//		SearchAttributes: map[string]enumspb.IndexedValueType{
//			"JobTenant": enumspb.INDEXED_VALUE_TYPE_KEYWORD, // … every attribute jobgate uses
//		},
//	})
//	defer srv.Stop()
//	c, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Namespace: srv.Namespace()})
//
// Start returns once the frontend answers and the namespace and search attributes are usable in
// visibility queries; UIURL is the Web UI's base URL ("" when it is disabled). jobgate
// dev, jobgate temporal and the tests all start it this way; Options.TLS serves the frontend
// with TLS or mutual TLS (certificates from package devpki). Options.UICodecEndpoint gives the UI
// a remote codec; Options.UIAuth has it sign people in with OpenID Connect and pass their access
// token to that codec (which must then be https), as a deployed Web UI is configured.
//
// # Guarantees
//
//   - It is the real server (go.temporal.io/server, the version pinned in go.mod), not a test
//     double: every service in one process, on loopback ports.
//   - A DataDir survives restarts (the SQLite file, WAL mode) and is locked while a server uses
//     it, so two processes never share one database.
//   - Task queue fairness is on (matching.enableFairness) except on Options.UnfairTaskQueues,
//     and workflow updates are enabled, as jobgate needs.
//   - Stop releases the ports, the database and the lock; calling it again is harmless.
//
// It links the whole Temporal server: only cmd/app and tests import it, and frontend, workflows
// and activities must never import it.
package devtemporal
