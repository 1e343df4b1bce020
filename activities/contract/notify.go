package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// NotifyActivityName is the name workflows execute the delivery activity by; part of history.
const NotifyActivityName = "Notify"

// Delivery outcomes, the label of the deliveries metric and the value in NotifyResult.
const (
	OutcomeDelivered = "delivered" // the endpoint answered 2xx
	OutcomeRetry     = "retry"     // network error, 5xx, 408 or 429: the attempt fails and is retried
	OutcomeRejected  = "rejected"  // any other 4xx: the endpoint refuses the event; not retried
	OutcomeRefused   = "refused"   // the URL resolved to a disallowed address; not retried
	// OutcomeDropped: a job.progress delivery that did not land within its window; never
	// retried after it (the next window carries newer progress).
	OutcomeDropped = "dropped"
)

// NotifyEvent is one logical event. The workflow builds it (deterministically) and every retry
// sends the same one: ID is the webhook-id receivers dedupe on. It carries no row data and no
// handle: a person follows Link to the page and signs in there.
type NotifyEvent struct {
	// ID is stable for the logical event: derived from the workflow ID, the first run ID, and
	// the input ID or event type (see workflows).
	ID     string `json:"id"`
	Type   string `json:"type"` // authz.EventApprovalRequested, authz.EventJobFinished
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	Kind   string `json:"kind"`
	Owner  string `json:"owner,omitempty"`
	// Meaning is the request's text in words (approval.requested) or the job's end (job.finished).
	Meaning  string `json:"meaning"`
	InputID  string `json:"input_id,omitempty"`
	Approver string `json:"approver,omitempty"`
	Status   string `json:"status,omitempty"`
	// ErrorCode is a job.finished event's error code (the job view's error.code: e.g.
	// cancelled, rejected, input_expired, all_episodes_failed) when the job did not succeed,
	// so a receiver can branch on it without parsing Meaning.
	ErrorCode string    `json:"error_code,omitempty"`
	At        time.Time `json:"at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Progress is a job.progress event's progress (the job view's progress: counts and the
	// job's message, never rows); nil for the other types.
	Progress *EventProgress `json:"progress,omitempty"`
}

// EventProgress is a job's progress as a job.progress event carries it: the job view's
// progress object.
type EventProgress struct {
	Done    int       `json:"done"`
	Failed  int       `json:"failed"`
	Total   int       `json:"total"`
	Unit    string    `json:"unit,omitempty"`
	Message string    `json:"message,omitempty"`
	AsOf    time.Time `json:"as_of,omitzero"`
}

// EventID is the webhook-id of one logical event: the same on every retry, attempt and worker,
// distinct per job instance (first run ID), per type and per key (an input ID for
// approval.requested, the progress state for job.progress, "" for job.finished).
func EventID(jobID, firstRunID, eventType, key string) string {
	sum := sha256.Sum256([]byte(jobID + "|" + firstRunID + "|" + eventType + "|" + key))
	return "evt_" + hex.EncodeToString(sum[:16])
}

// NotifyInput is the delivery activity's input.
type NotifyInput struct {
	Event NotifyEvent `json:"event"`
}

// NotifyResult says how each endpoint's delivery ended, by endpoint name.
type NotifyResult struct {
	Outcomes map[string]string `json:"outcomes,omitempty"`
}

// NotifyProgressActivityName is the name the job.progress notifier executes one window by;
// part of history.
const NotifyProgressActivityName = "NotifyProgress"

// ProgressMark is what an endpoint was last sent of a job's progress.
type ProgressMark struct {
	// Key is the last state it took (or refused for good); "" before any.
	Key string `json:"key,omitempty"`
	// At is when its last delivery started: the next is due a window (progress_every) later.
	At time.Time `json:"at,omitzero"`
}

// NotifyProgressInput is the job.progress notifier's input (the workflow's and each window's):
// the job, and what each endpoint was last sent, carried across windows and continue-as-new.
type NotifyProgressInput struct {
	Tenant     string `json:"tenant"`
	JobID      string `json:"job_id"`
	FirstRunID string `json:"first_run_id"`
	Kind       string `json:"kind"`
	Owner      string `json:"owner,omitempty"`
	// Sent is by endpoint name.
	Sent map[string]ProgressMark `json:"sent,omitempty"`
}

// NotifyProgressResult is one window's outcome.
type NotifyProgressResult struct {
	Sent map[string]ProgressMark `json:"sent,omitempty"`
	// NextIn is when the next window is due (the notifier's timer): the nearest endpoint's,
	// never below authz.ProgressEveryMin.
	NextIn Duration `json:"next_in"`
	// Done: the job has ended, or no endpoint wants job.progress any more; no further window.
	Done bool `json:"done,omitempty"`
	// Outcomes are this window's deliveries, by endpoint (Outcome*; dropped when a delivery did
	// not land within its window).
	Outcomes map[string]string `json:"outcomes,omitempty"`
}
