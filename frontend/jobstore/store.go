package jobstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

// Store is the job core's only way to the jobs: start, read, cancel, answer and list them.
// It speaks the core's terms (job, run ID, memo fields, search attributes, the core's own error
// values below), so the core never sees a Temporal type or inspects a serviceerror. The
// Temporal implementation (temporalstore/store_temporal.go, built from Options.Temporal) is the only
// production one; unit tests of the core use the in-memory fake (jobstore/memstore).
//
// Calls do not add their own deadline: the core bounds each with TemporalTimeout (or, for
// Resume and a start that awaits its first state, its own bound) through ctx.
type Store interface {
	// Start starts the job's workflow under s.id and returns its run ID. When the ID names a job
	// already (running, or closed and still retained) nothing is started and the error is
	// ErrAlreadyStarted. With s.awaitFirst the call also waits, until ctx ends, for the job's
	// first state (its input request open, running, or ended; see workflows.UpdateFirstState);
	// a ctx that ends first yields errFirstStateTimeout, and the job is started all the same.
	Start(ctx context.Context, s StartRequest) (runID string, err error)
	// FirstState waits, until ctx ends, for the run's first state (the update Start sends
	// with awaitFirst; a second one is deduplicated).
	FirstState(ctx context.Context, id, runID string) error
	// Describe reads the job's current run (ErrJobNotFound when there is none).
	Describe(ctx context.Context, id string) (*Job, error)
	// Result decodes the closed successful run's result into ptr.
	Result(ctx context.Context, id, runID string, ptr any) error
	// Cancel requests cancellation of the job's current run; ErrJobNotFound when it is closed
	// or gone.
	Cancel(ctx context.Context, id, identity, reason string) error
	// Resume delivers req to the run through the jobgate.resume update and waits for it to
	// complete. A refusal by the workflow is a *resumeRejected; errUpdateTimeout when no worker
	// took it in time; ErrJobNotFound when the run is closed or gone.
	Resume(ctx context.Context, id, runID, updateID string, req workflows.ResumeRequest) error
	// QueryEpisodes asks an eval's current run where its episode log stands
	// (workflows.QueryEpisodes): a worker answers it, replaying the run if it must.
	QueryEpisodes(ctx context.Context, id string, q workflows.EpisodesQuery) (workflows.EpisodesQueryResult, error)
	// List reads one page of the runs f selects, at most pageSize, after token (nil: the first
	// page), in the store's order (Temporal's default: unfinished runs first, newest start
	// first, then closed runs, most recently closed first). next is empty after the last page
	// (a full page may be followed by an empty one). A token the store rejects is errPageToken.
	List(ctx context.Context, f Filter, pageSize int, token []byte) (jobs []*Job, next []byte, err error)
	// Story narrates the job's history, first run to current (describe_job); ErrJobNotFound
	// when there is no such job.
	Story(ctx context.Context, kind workflows.Kind, req StoryRequest) (*StoryResult, error)
	// Count counts the runs f selects.
	Count(ctx context.Context, f Filter) (int, error)
	// SlotsIndexed reports whether the store indexes a start's slots (workflows.SAJobSlots),
	// so that counts can select on them; false while its namespace lacks the attribute
	// (`jobgate setup` adds it) or cannot be asked.
	SlotsIndexed(ctx context.Context) bool
	// WaitHistory reads the run's history after token (nil: from its first event); once
	// caught up it waits, in the store, until the history grows or the run closes
	// (temporalstore/store_history.go). ErrJobNotFound when there is no such run.
	WaitHistory(ctx context.Context, id, runID string, token []byte) (HistoryPage, error)
	// Retention is how long closed jobs are kept, when the store says.
	Retention(ctx context.Context) (time.Duration, bool)
	// CheckHealth reports whether the store answers (readyz).
	CheckHealth(ctx context.Context) error
}

// Filter selects runs for Store.List and Count: a run is selected when every field holds;
// a field's zero value holds for every run. Values are the core's own — a verified principal's
// tenant and subject, registered kinds, contract statuses, the IDs of jobs it started — never a
// caller's text; validate says whether every store can match them exactly. The store alone
// turns a filter into its query language (the Temporal store: temporalstore/store_query.go).
type Filter struct {
	// Tenant: runs of this tenant's jobs. Required: every selection is one tenant's.
	Tenant string
	// Owner: runs of this subject's jobs; "" any owner.
	Owner string
	// Owners: runs of one of these subjects' jobs (with Owner, both hold); empty any owner.
	// A count of a group of owners bounds each one's (quota's owner groups).
	Owners []string
	// IDs: runs of these job IDs only; nil any ID. ExcludeIDs: none of these; nil none left out.
	IDs, ExcludeIDs []string
	// Runs: which runs by execution state; RunsAll (zero) every run, including a job's earlier
	// runs that continued as new.
	Runs RunSelect
	// Kinds: runs of jobs of one of these kinds; nil any kind.
	Kinds []string
	// Status: runs in this contract status; "" any. A closed run's is how it closed
	// (succeeded, failed, cancelled); an unfinished run's is the phase its workflow last
	// reported (workflows.SAJobStatus: queued, running, awaiting_input, cancelling), so a
	// cancel the workflow has not seen yet is not cancelling here (job.status() says it is).
	Status workflows.Status
	// Answerers: runs whose open input request names one of these answerers
	// (workflows.Answerer* values, the JobAnswerer a workflow sets while awaiting input); nil
	// any run, one without an open request included.
	Answerers []string
	// ApproverNot, with Answerers: a run whose answerer is workflows.AnswererApprover (an
	// approver other than the owner) is selected only when its owner is not this subject;
	// "" no such condition.
	ApproverNot string
	// StartedSince (>=) and StartedBefore (<) bound the run's start; ClosedSince (>=) its close,
	// so it selects closed runs only. Zero: unbounded.
	StartedSince, StartedBefore, ClosedSince time.Time
	// SlotsMin and SlotsMax bound (inclusive) the slots the store indexed at the run's start
	// (StartRequest.slots, workflows.SAJobSlots); 0: unbounded. Either bound leaves out runs
	// without indexed slots. NoSlots selects only those (started before the attribute existed,
	// or on a namespace without it); it goes with neither bound.
	SlotsMin, SlotsMax int
	NoSlots            bool
}

// RunSelect selects runs by execution state.
type RunSelect int

const (
	// RunsAll selects every run.
	RunsAll RunSelect = iota
	// RunsLatest leaves out runs closed by continue-as-new: each job once, by its latest run.
	RunsLatest
	// RunsUnfinished selects runs not closed yet (queued, awaiting input, running, cancelling).
	RunsUnfinished
	// RunsContinued selects runs closed by continue-as-new.
	RunsContinued
)

// validate reports whether every store matches f exactly: errOwnerUnmatchable for a subject
// (Owner, ApproverNot) the Temporal store cannot match; errQueryValue (with the field) for
// any other value that is not one the filter allows.
func (f Filter) Validate() error {
	if !StoreValue(f.Tenant) {
		return fmt.Errorf("tenant: %w", ErrQueryValue)
	}
	for _, s := range append([]string{f.Owner, f.ApproverNot}, f.Owners...) {
		switch {
		case s == "":
		case !StoreValue(s):
			return fmt.Errorf("sub: %w", ErrQueryValue)
		case !OwnerMatchable(s):
			return ErrOwnerUnmatchable
		}
	}
	for _, id := range append(append([]string(nil), f.IDs...), f.ExcludeIDs...) {
		if !StoreValue(id) {
			return fmt.Errorf("job id: %w", ErrQueryValue)
		}
	}
	if f.Runs < RunsAll || f.Runs > RunsContinued {
		return fmt.Errorf("runs: %w", ErrQueryValue)
	}
	for _, k := range f.Kinds {
		if _, ok := workflows.LookupKind(k); !ok {
			return fmt.Errorf("kind: %w", ErrQueryValue)
		}
	}
	if f.Status != "" && !slices.Contains(Statuses, f.Status) {
		return fmt.Errorf("status: %w", ErrQueryValue)
	}
	for _, a := range f.Answerers {
		if a != workflows.AnswererOwner && a != workflows.AnswererApprover && a != workflows.AnswererApproverOrOwner {
			return fmt.Errorf("answerer: %w", ErrQueryValue)
		}
	}
	if f.SlotsMin < 0 || f.SlotsMax < 0 || (f.SlotsMax > 0 && f.SlotsMin > f.SlotsMax) || (f.NoSlots && (f.SlotsMin > 0 || f.SlotsMax > 0)) {
		return fmt.Errorf("slots: %w", ErrQueryValue)
	}
	return nil
}

// errQueryValue is returned when a filter value cannot be matched by a store.
var ErrQueryValue = errors.New("value cannot be used in a visibility query")

// errOwnerUnmatchable: the caller's subject cannot be matched by the visibility store.
var ErrOwnerUnmatchable = errors.New("subject cannot be matched by the visibility store")

// StoreValue reports whether s can be a filter's string value: non-empty printable UTF-8. No
// identity we accept is anything else, so such a value is refused rather than escaped.
func StoreValue(s string) bool { return authz.Printable(s) }

// ownerMatchable reports whether a filter can select the jobs of owner sub. Temporal's
// visibility query converter (server v1.32.1) loses two kinds of subject:
//   - it reads a string literal's value with strings.Trim(v, "'") (common/sqlquery.ParseValue),
//     so single quotes at either end of the value are dropped;
//   - its SQL stores escape keyword values MySQL-style (\ → \\, " → \") and hand them to
//     SQLite or PostgreSQL, which read backslashes literally.
//
// Such a subject's owner condition never matches, so the core refuses its own listing rather
// than answer it wrongly, and counts no owner quotas for it. (Filtering rows in the frontend
// instead would put another principal's row position — run ID, start and close time — into
// the caller's cursor.) The contract holds for every store, so that the in-memory one refuses
// what the Temporal one cannot answer.
func OwnerMatchable(sub string) bool {
	return !strings.ContainsAny(sub, `\"`) && !strings.HasPrefix(sub, "'") && !strings.HasSuffix(sub, "'")
}

// StartRequest is what Start needs: the job's identity, its workflow input and its first memo.
type StartRequest struct {
	ID       string // workflow ID (jobID)
	Kind     string // workflows.Kind name
	Workflow string // the kind's workflow type name
	Input    any
	Tenant   string
	Owner    string
	// memo is the job's first memo (input hash, created_at, progress, slots).
	Memo map[string]any
	// summary and details label the job in the Temporal Web UI.
	Summary, Details string
	Fairness         workflows.Fairness
	// slots is the episode concurrency the job holds while unfinished (0 for kinds that hold
	// none): the store indexes it (workflows.SAJobSlots) when its namespace can.
	Slots int
	// awaitFirst: wait for the job's first state (see Store.Start).
	AwaitFirst bool
}

// The store's own error values (the core maps them to tool errors).
var (
	ErrAlreadyStarted    = errors.New("job store: the job ID names a job already")
	ErrJobNotFound       = errors.New("job store: no such job")
	ErrPageToken         = errors.New("job store: page token rejected")
	ErrUpdateTimeout     = errors.New("job store: no worker processed the update in time")
	ErrFirstStateTimeout = errors.New("job store: the job's first state did not arrive in time")
	// ErrStoreUnavailable marks the store unreachable or overloaded (asToolError: unavailable).
	ErrStoreUnavailable = errors.New("job store unavailable")
	// ErrTenantForgotten is a start for a tenant whose payload keys were deleted (`jobgate
	// tenant forget`): nothing can be sealed for it, so nothing starts (asToolError: forbidden).
	ErrTenantForgotten = errors.New("job store: the tenant was forgotten (its data deleted); no job starts for it")
)

// resumeRejected is the workflow's refusal of a resume: kind is one of workflows.Reject*.
type ResumeRejected struct{ Kind, Msg string }

func (e *ResumeRejected) Error() string { return "resume rejected (" + e.Kind + "): " + e.Msg }
