// Package jobstate holds the plain words of a job's state that workflows record and clients
// read: its status, its progress and the reason it failed. It imports nothing of jobgate, so
// the wire types (frontend/wire) can use them without linking workflows, and workflows keeps
// its names for them as aliases (workflows.Status is jobstate.Status).
package jobstate

import "time"

// Status is the job status the contract exposes.
type Status string

// The statuses of CONTRACT.md's job view.
const (
	StatusQueued        Status = "queued"
	StatusRunning       Status = "running"
	StatusAwaitingInput Status = "awaiting_input"
	StatusSucceeded     Status = "succeeded"
	StatusFailed        Status = "failed"
	StatusCancelling    Status = "cancelling"
	StatusCancelled     Status = "cancelled"
)

// Terminal reports whether no further transition can happen.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Progress is the job's progress as of its last memo update.
type Progress struct {
	Done    int       `json:"done" jsonschema:"units done (episodes scored, rows exported)"`
	Failed  int       `json:"failed" jsonschema:"units that failed (episodes; 0 for exports)"`
	Total   int       `json:"total" jsonschema:"units in the job; 0 while not yet known"`
	Unit    string    `json:"unit,omitempty" jsonschema:"what done, failed and total count: episodes or rows"`
	Message string    `json:"message,omitempty" jsonschema:"what the job is doing"`
	AsOf    time.Time `json:"as_of" jsonschema:"when the job last reported progress"`
}

// JobError is the machine-readable reason a job failed or was cancelled.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
