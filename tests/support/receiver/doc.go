// Package receiver is a test receiver for jobgate's http eval suites: it implements the receiver
// contract (activities/README.md, "HTTP suites") and can be told to misbehave, so tests can prove
// that every episode's effect happens exactly once however the network, the receiver or the
// worker fails.
//
// POST /episodes with an Idempotency-Key applies the key's effect once — one line appended to
// effects.jsonl in the receiver's directory — and answers {"score": Score(key)}; the same key
// again answers the stored score without a second effect. GET /episodes/<escaped key> answers the
// stored score, or 404 if the key was never applied. Every request to /episodes is recorded in
// attempts.jsonl. State lives in the directory, so a restarted receiver keeps its applied keys.
//
// Faults (methods, or POST /control from another process): drop the connection after applying,
// stall before answering, or answer an injected status without applying.
//
// # Happy path
//
//	r, err := receiver.New(t.TempDir())
//	srv, err := r.Start("127.0.0.1:0") // srv.URL is the suite's "url"
//	defer srv.Close()
//	r.DropNext(1)                      // apply the next episode, then hang up
//	// … run an eval of an http suite against srv.URL …
//	r.Effects()                        // applied keys: each must be 1
//	r.AttemptsFor(key)                 // what the worker sent for one operation ID
//
// # Guarantees
//
//   - A key's effect is applied at most once, also across restarts on the same directory
//     (unless AllowDuplicates turns that off to show what a naive receiver would do).
//   - Close ends stalls and waits until every handler has written its state, so the directory
//     can be reopened or removed right after.
//
// Test support: only tests and its cmd/receiver import it, never non-test code; it imports no
// jobgate package (it speaks the protocol as any receiver would).
package receiver
