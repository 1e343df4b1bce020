// Package events is the machinery of jobgate's event streams (GET /jobs/<handle>/events and
// subscriptions/listen): a Follower follows a job's Temporal history through the job store —
// one shared long poll per run on a replica (hub.go) — and re-renders the job when its view may
// have changed, yielding an event only when the rendered state's digest differs from the last
// one sent; Limits bounds the streams a replica holds open; SSE writes Server-Sent Events.
//
// What a stream sends is rendered by the caller's RenderFunc — the frontend's own get_* or
// tasks/get code — so every event re-checks the caller's access. The package holds no job
// state beyond the runs being followed right now: a sealed position is all a reconnecting
// client brings.
//
// It imports jobstore, handle and wire; never the frontend, a Temporal package or a store
// implementation.
package events
