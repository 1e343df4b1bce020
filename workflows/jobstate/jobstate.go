// Package jobstate holds the plain words of a job's state that workflows record and clients
// read: its status, its progress, the reason it failed and a succeeded eval's summary. It imports nothing of jobgate, so
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

// EvalSummary is the summary a succeeded eval ends with: the head of its result as the workflow
// records it (workflows.EvalResult) and as get_eval shows it (wire.EvalResultView), embedded in
// both so the two cannot drift.
type EvalSummary struct {
	Episodes   int     `json:"episodes" jsonschema:"episodes the run was asked for"`
	Scored     int     `json:"scored" jsonschema:"episodes that returned a score"`
	Passed     int     `json:"passed" jsonschema:"scored episodes at or above the suite's pass threshold"`
	Failed     int     `json:"failed" jsonschema:"episodes that failed after their retries"`
	MeanScore  float64 `json:"mean_score" jsonschema:"mean of the scores"`
	StdErr     float64 `json:"std_err" jsonschema:"standard error of the mean score"`
	ApprovedBy string  `json:"approved_by,omitempty" jsonschema:"who approved the run, when it needed approval"`
}
