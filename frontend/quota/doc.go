// Package quota admits or refuses job starts under their tenant's limits (authz.Limits): an
// Admitter per replica measures the tenant's and the owner's figures in the job store
// (jobstore.Store counts, shared per tenant and per owner in flights), adds this replica's
// reservations, and decides; quota.go states how and what holds across replicas.
//
// It imports jobstore, authz and frontend/wire; never a Temporal package, a store
// implementation or the frontend.
package quota
