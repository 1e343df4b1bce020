// Package devpki makes throwaway certificate authorities and the server and client
// certificates they sign, so tests (and dev set-ups) can run Temporal with TLS and mutual TLS
// without committing key material. Keys are ECDSA P-256; nothing here is meant for production.
//
// # Happy path
//
//	ca, err := devpki.NewCA("test CA")
//	srv, err := ca.Server("127.0.0.1", "localhost") // for devtemporal.Options.TLS
//	cli, err := ca.Client("jobgate")                 // for --temporal-tls-cert-file/-key-file
//	certFile, keyFile, err := cli.WriteFiles(dir, "jobgate")
//	caFile, err := ca.WriteFile(dir, "ca")           // for --temporal-tls-ca-file
//
// # Guarantees
//
//   - Every call makes fresh keys; nothing is read from or written to disk except by the
//     Write* methods, into the directory given.
//   - ClientValid makes a client certificate with a chosen validity window, so tests can
//     present an expired or not-yet-valid certificate.
//
// It imports only the standard library, never a jobgate package; only tests and dev set-ups
// import it.
package devpki
