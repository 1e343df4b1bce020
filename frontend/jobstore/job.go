package jobstore

import (
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// runState is the state of a job's workflow run as the store reports it; the contract status
// derives from it (job.status). Its values name the failure in a view's error code, spelt as
// views always have: Temporal's status name in lower case, without separators ("timedout").
type RunState string

const (
	RunUnknown        RunState = "unspecified"
	RunRunning        RunState = "running"
	RunCompleted      RunState = "completed"
	RunFailed         RunState = "failed"
	RunTerminated     RunState = "terminated"
	RunTimedOut       RunState = "timedout"
	RunCanceled       RunState = "canceled"
	RunContinuedAsNew RunState = "continuedasnew"
)

// job is what one Describe tells about a job.
type Job struct {
	ID, RunID  string
	FirstRunID string // the job's first run (scopes what it keeps outside Temporal)
	Tenant     string
	Owner      string
	Kind       string
	Exec       RunState
	SAStatus   workflows.Status
	InputHash  string
	CreatedAt  time.Time
	StartedAt  time.Time
	ClosedAt   time.Time
	Progress   workflows.Progress
	Slots      int                   // memo slots: the episode concurrency an eval holds while unfinished
	Usage      *workflows.Usage      // memo usage: what the job used, once it ended (nil before, and for jobs from before usage)
	NeedsInput *workflows.NeedsInput // may be shared with other calls (see needsInputCache): never modify
	JobErr     *workflows.JobError
	// decision is the record of the answer that rejected the job (memo); nil otherwise.
	Decision *workflows.DecisionRecord
	// cancelRequested: a cancel is recorded but the workflow may not have run since (no worker).
	CancelRequested bool
	// needsInputJSON is needsInput's NeedsInputView as JSON, when the store decoded it (needsInputCache.decode).
	NeedsInputJSON []byte
	// Forgotten: the job's payloads are sealed under keys that were deleted (`jobgate tenant
	// forget`); the store answers it as an unknown job and lists it nowhere.
	Forgotten bool
}

func (j *Job) PolicyJob() authz.Job {
	if j.Exec != RunRunning {
		return workflows.PolicyJob(j.Tenant, j.Owner, nil)
	}
	return workflows.PolicyJob(j.Tenant, j.Owner, j.NeedsInput)
}

// closedStatus is the contract status of a run that closed as exec: false while it runs (or
// when it continued as new, which ends no job).
func ClosedStatus(exec RunState) (workflows.Status, bool) {
	switch exec {
	case RunCompleted:
		return workflows.StatusSucceeded, true
	case RunFailed, RunTerminated, RunTimedOut:
		return workflows.StatusFailed, true
	case RunCanceled:
		return workflows.StatusCancelled, true
	}
	return "", false
}

// status derives the contract status: the execution status is the truth once closed; while
// running, the JobStatus search attribute the workflow keeps says which phase it is in.
func (j *Job) Status() workflows.Status {
	if s, closed := ClosedStatus(j.Exec); closed {
		return s
	}
	if j.CancelRequested {
		return workflows.StatusCancelling
	}
	switch j.SAStatus {
	case workflows.StatusRunning, workflows.StatusAwaitingInput, workflows.StatusCancelling:
		return j.SAStatus
	}
	return workflows.StatusQueued
}

// historyPage is one answer of Store.WaitHistory.
type HistoryPage struct {
	// last is the ID of the last event of the page; 0 when the page had none (the wait ended
	// without news, or the page was empty).
	Last int64
	// next continues after this page; nil when the run is closed and its history read to the end.
	Next []byte
	// relevant is the ID of the page's last event that can change a job's view (viewEvent);
	// 0 when none did.
	Relevant int64
	// full: the page holds as many events as a page may, so more may be waiting to be read.
	Full bool
}

// storyRequest is what the store needs to narrate a job's history (Store.Story).
type StoryRequest struct {
	ID       string
	MaxLines int
	// full: error messages as recorded (admins); otherwise types and job-view messages only.
	Full bool
	// jobErr is the job's error as its view shows it (sanitized), for the end line.
	JobErrCode, JobErrMsg string
}

// storyResult is the narrated history.
type StoryResult struct {
	Lines        []wire.StoryLine
	Cut          string
	Runs, Events int
	// Actions are the Temporal actions the events read show (temporalstore/actions.go).
	Actions        int
	Started, Ended time.Time
}

// listStatuses are the contract statuses, in their documented order (list_jobs accepts them).
var (
	Statuses = []workflows.Status{
		workflows.StatusQueued, workflows.StatusRunning, workflows.StatusAwaitingInput, workflows.StatusSucceeded,
		workflows.StatusFailed, workflows.StatusCancelling, workflows.StatusCancelled,
	}
)

// needsInputViewOf renders an open input request.
func NeedsInputViewOf(ni *workflows.NeedsInput) wire.NeedsInputView {
	return wire.NeedsInputView{InputID: ni.InputID, Prompt: ni.Prompt, AnswerSchema: ni.AnswerSchema,
		ScopeDigest: ni.ScopeDigest, Scope: ni.Scope, Approver: ni.Approver, SelfApproval: ni.AllowSelf,
		RequestedBy: ni.RequestedBy, ExpiresAt: ni.ExpiresAt}
}
