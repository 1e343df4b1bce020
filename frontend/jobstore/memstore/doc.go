// Package memstore is an in-memory jobstore.Store for tests: it keeps jobs as Temporal would
// describe them (ExecInfo, Put), evaluates every jobstore.Filter itself, and records the calls
// a test may assert on. A test says what the workflow would do (OnFirstState, OnResume) and
// may script failures (ListErr, OnCount, StartErr).
//
// It imports jobstore and, to describe runs exactly as Temporal's store does, the decoder of
// frontend/temporalstore; never the frontend.
package memstore
