package pages

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/frontend/handle"
)

// Paths of the job pages (JobsHandler).
const (
	PathApprovals = "/approvals"
	PathJobs      = "/jobs"
	// PathDownload + token serves a job's file to a signed-in person (Result.Download links).
	PathDownload = "/jobs/download/"
)

// ApprovalMaxAgeDefault is how recent a person's sign-in must be to approve a sensitive scope
// when JobsHandler is given no max age: five minutes.
const ApprovalMaxAgeDefault = 5 * time.Minute

// The answers the decision form offers (workflows.DecisionApprove and DecisionReject: the job
// core's test pins them equal, so this package need not link the workflows layer).
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// CommentMax is the longest comment a decision carries, in characters (the resume path's limit).
const CommentMax = 1000

// JobsPatterns are the net/http.ServeMux patterns JobsHandler serves.
func JobsPatterns() []string {
	return []string{"GET " + PathApprovals, "GET " + PathApprovals + "/{job}", "POST " + PathApprovals + "/{job}",
		"GET " + PathJobs, "GET " + PathJobs + "/{job}", "GET " + PathDownload + "{token}"}
}

// ApprovalPath is the path of a job's request page (for deep links in notifications): the job
// ID is one escaped path segment.
func ApprovalPath(jobID string) string { return PathApprovals + "/" + url.PathEscape(jobID) }

// JobPath is the path of a job's page in "my jobs".
func JobPath(jobID string) string { return PathJobs + "/" + url.PathEscape(jobID) }

// Jobs is what the job pages need of the job core: read and list jobs, answer an open request
// through the resume path, and serve a job's file, each for the signed-in person s as the job
// core's policy sees them. The frontend package implements it over its job store; this package
// never imports it (the core depends on the pages, not the reverse).
//
// An error the person can act on is a *JobsError; any other error means the job store cannot
// be reached (the page says "try again later" and logs the detail).
type Jobs interface {
	// Now is the job core's clock: how long a request has waited, how fresh a sign-in is.
	Now() time.Time
	// Logger is where the pages log what they only summarise to the person.
	Logger(ctx context.Context) *zap.Logger
	// Approvals lists a page of the open requests s may answer (list_approvals' query and rule,
	// four eyes included), newest first, from cursor ("" for the first page). ErrForbidden when
	// s may answer none (no jobs:approve); ErrStaleLink for a cursor that is not s's or expired.
	Approvals(ctx context.Context, s handle.Session, cursor string) (JobList, error)
	// List lists a page of s's jobs (list_jobs' rule) from cursor. ErrForbidden when s may not
	// list jobs; ErrStaleLink for a cursor that is not s's or expired.
	List(ctx context.Context, s handle.Session, cursor string) (JobList, error)
	// Job reads job id for s. ErrNotFound for a job that does not exist, is another tenant's or
	// that s may not read: the same error for every reason.
	Job(ctx context.Context, s handle.Session, id string) (*Job, error)
	// Result is job j's result as its kind shows it to s on the job page (rows and a download
	// link, an export's parts, an eval's episode log, also while it runs), and the decision
	// that ended it, if any; empty when there is nothing to show.
	Result(ctx context.Context, s handle.Session, j *Job) Result
	// Decide answers j's open request as s, surface page: the same update, validator, seal and
	// four-eyes rule as resume_*. j is the read the page checked the form against (its prompt is
	// the meaning the decision records as shown). It returns the job after the decision;
	// ErrRefused (with the reason) when the job core or the workflow refused it.
	Decide(ctx context.Context, s handle.Session, j *Job, d Decision) (*Job, error)
	// ServeDownload serves GET PathDownload{token} (a Result.Download link) to s, by the kind's
	// download rule: a link that is not s's, expired or tampered with is a bare 404.
	ServeDownload(w http.ResponseWriter, r *http.Request, s handle.Session)
}

// JobList is a page of jobs and the cursor of the next page ("" for the last).
type JobList struct {
	Jobs []Job
	Next string
}

// Job is a job as the pages show it: plain data, with the job core's policy answers for the
// person it was read for.
type Job struct {
	ID, Kind, Owner string
	// Status is the job's status as the tools name it ("awaiting_input", "succeeded", …).
	Status           string
	Created, Updated time.Time
	Progress         Progress
	// Error is a failed or cancelled job's error, "message (code)"; "" for none.
	Error string
	// Request is the open input request while the job awaits input, else nil.
	Request *Request
	// MayDecide: the person may answer the open request; else Refusal says why (without a
	// final period).
	MayDecide bool
	Refusal   string
	// MayOpen: the person may open the job's own page (its owner).
	MayOpen bool
	// ApprovalLink: the job's page links to its open request (the person may answer it, or
	// an approver must).
	ApprovalLink bool
	// Ref is the job core's own record of this read, opaque to the pages: Decide and Result get
	// it back, so a decision is checked and sealed against the very read the page showed.
	Ref any
}

// Progress is how far a job got: Done of Total Unit, and a message.
type Progress struct {
	Done, Total   int
	Unit, Message string
}

// Request is an open input request.
type Request struct {
	InputID, ScopeDigest string
	// Prompt is the request as the job wrote it; MeaningDigest its digest
	// (workflows.MeaningDigest), which the form sends back so the decision records the meaning
	// the page displayed, or is refused as stale.
	Prompt, MeaningDigest string
	// RequestedBy is who asked ("" when the request does not say: the job's owner).
	RequestedBy string
	// Scope is what approving allows, as the job declared it (dataset, columns, purpose, …).
	Scope     map[string]any
	ExpiresAt time.Time
	// Sensitive: the scope names a sensitive column, so approving needs a recent sign-in.
	Sensitive bool
	// Meaning is what approving means, in words, as the job's kind says it.
	Meaning []MeaningPart
}

// MeaningPart is a piece of a request's meaning; Strong marks a sensitive part.
type MeaningPart struct {
	Text   string
	Strong bool
}

// Result is what a job's page shows of its outcome.
type Result struct {
	Fields []Field
	// Download is a link (PathDownload + token) to the job's file for this person; "" for none.
	Download string
	// Episodes is an eval's episode log, drawn on its page (charts.go); nil for none.
	Episodes *Episodes
	// Parts are an export's parts, listed and drawn on its page; nil for none.
	Parts []Part
}

// Field is one labelled value of a result; Code shows it as code (a digest).
type Field struct {
	Label, Value string
	Code         bool
}

// Decision is a decision form as sent.
type Decision struct {
	InputID, ScopeDigest string
	Decision             string // DecisionApprove or DecisionReject
	Comment              string
}

// ErrorCode says what a JobsError means for the page.
type ErrorCode int

// The errors of Jobs a page answers by what they mean.
const (
	// ErrNotFound: no such job for this person (the one 404 page).
	ErrNotFound ErrorCode = iota + 1
	// ErrInvalid: the request was wrong; Message says how (400).
	ErrInvalid
	// ErrStaleLink: a page link (cursor) out of date or made for someone else (400).
	ErrStaleLink
	// ErrForbidden: the person's sign-in does not carry the scope the page needs (403).
	ErrForbidden
	// ErrRefused: a decision was not taken; Message says why (409).
	ErrRefused
)

// JobsError is an error of Jobs the pages show to the person.
type JobsError struct {
	Code    ErrorCode
	Message string
}

func (e *JobsError) Error() string { return e.Message }
