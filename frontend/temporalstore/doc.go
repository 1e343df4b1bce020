// Package temporalstore is the job store over Temporal (jobstore.Store): the only package of
// the frontend that calls client.Client, writes visibility queries (store_query.go), reads
// histories (store_history.go, story_temporal.go) or inspects Temporal's errors. It turns
// Temporal's unreachable and overloaded answers into jobstore.ErrStoreUnavailable, so the core
// never sees a serviceerror.
//
// It never imports the frontend, its quotas or its pages.
package temporalstore
