// Package jobstore is the job core's one way to the jobs: the Store interface (start, describe,
// read a result, cancel, answer, list, count, wait on a history, narrate), the typed Filter a
// list or count selects runs with, the Job a store describes, and the store's error values.
//
// A Filter is a struct, never query text: the Temporal store (frontend/temporalstore) is the
// only package that turns one into a visibility query, and the in-memory store
// (frontend/jobstore/memstore) evaluates the same Filter itself, so core, quota and list logic
// can be tested against either.
//
// It imports of jobgate only authz, workflows and frontend/wire; it never imports a Temporal
// client or service package, a store implementation, or the frontend.
package jobstore
