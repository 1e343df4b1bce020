package frontend

import (
	"context"
	"errors"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

// jobStore is the job core's only way to the jobs: start, read, cancel, answer and list them.
// It speaks the core's terms (job, run ID, memo fields, search attributes, the core's own error
// values below), so the core never sees a Temporal type or inspects a serviceerror. The
// Temporal implementation (store_temporal.go, built from Options.Temporal) is the only
// production one; unit tests of the core use the in-memory fake (memstore_test.go).
//
// Calls do not add their own deadline: the core bounds each with TemporalTimeout (or, for
// Resume and a start that awaits its first state, its own bound) through ctx.
type jobStore interface {
	// Start starts the job's workflow under s.id and returns its run ID. When the ID names a job
	// already (running, or closed and still retained) nothing is started and the error is
	// errAlreadyStarted. With s.awaitFirst the call also waits, until ctx ends, for the job's
	// first state (its input request open, running, or ended; see workflows.UpdateFirstState);
	// a ctx that ends first yields errFirstStateTimeout, and the job is started all the same.
	Start(ctx context.Context, s storeStart) (runID string, err error)
	// FirstState waits, until ctx ends, for the run's first state (the update Start sends
	// with awaitFirst; a second one is deduplicated).
	FirstState(ctx context.Context, id, runID string) error
	// Describe reads the job's current run (errJobNotFound when there is none).
	Describe(ctx context.Context, id string) (*job, error)
	// Result decodes the closed successful run's result into ptr.
	Result(ctx context.Context, id, runID string, ptr any) error
	// Cancel requests cancellation of the job's current run; errJobNotFound when it is closed
	// or gone.
	Cancel(ctx context.Context, id, identity, reason string) error
	// Resume delivers req to the run through the jobgate.resume update and waits for it to
	// complete. A refusal by the workflow is a *resumeRejected; errUpdateTimeout when no worker
	// took it in time; errJobNotFound when the run is closed or gone.
	Resume(ctx context.Context, id, runID, updateID string, req workflows.ResumeRequest) error
	// QueryEpisodes asks an eval's current run where its episode log stands
	// (workflows.QueryEpisodes): a worker answers it, replaying the run if it must.
	QueryEpisodes(ctx context.Context, id string, q workflows.EpisodesQuery) (workflows.EpisodesQueryResult, error)
	// List runs one visibility page of q. A token the store rejects is errPageToken.
	List(ctx context.Context, q string, pageSize int, token []byte) (jobs []*job, next []byte, err error)
	// Story narrates the job's history, first run to current (describe_job); errJobNotFound
	// when there is no such job.
	Story(ctx context.Context, kind workflows.Kind, req storyRequest) (*storyResult, error)
	// Count counts the visibility records matching q.
	Count(ctx context.Context, q string) (int, error)
	// SlotsIndexed reports whether the store indexes a start's slots (workflows.SAJobSlots),
	// so that counts can select on them; false while its namespace lacks the attribute
	// (`jobgate setup` adds it) or cannot be asked.
	SlotsIndexed(ctx context.Context) bool
	// WaitHistory reads the run's history after token (nil: from its first event); once
	// caught up it waits, in the store, until the history grows or the run closes
	// (store_history.go). errJobNotFound when there is no such run.
	WaitHistory(ctx context.Context, id, runID string, token []byte) (historyPage, error)
	// Retention is how long closed jobs are kept, when the store says.
	Retention(ctx context.Context) (time.Duration, bool)
	// CheckHealth reports whether the store answers (readyz).
	CheckHealth(ctx context.Context) error
}

// storeStart is what Start needs: the job's identity, its workflow input and its first memo.
type storeStart struct {
	id       string // workflow ID (jobID)
	kind     string // workflows.Kind name
	workflow string // the kind's workflow type name
	input    any
	tenant   string
	owner    string
	// memo is the job's first memo (input hash, created_at, progress, slots).
	memo map[string]any
	// summary and details label the job in the Temporal Web UI.
	summary, details string
	fairness         workflows.Fairness
	// slots is the episode concurrency the job holds while unfinished (0 for kinds that hold
	// none): the store indexes it (workflows.SAJobSlots) when its namespace can.
	slots int
	// awaitFirst: wait for the job's first state (see jobStore.Start).
	awaitFirst bool
}

// The store's own error values (the core maps them to tool errors).
var (
	errAlreadyStarted    = errors.New("job store: the job ID names a job already")
	errJobNotFound       = errors.New("job store: no such job")
	errPageToken         = errors.New("job store: page token rejected")
	errUpdateTimeout     = errors.New("job store: no worker processed the update in time")
	errFirstStateTimeout = errors.New("job store: the job's first state did not arrive in time")
	// errStoreUnavailable marks the store unreachable or overloaded (asToolError: unavailable).
	errStoreUnavailable = errors.New("job store unavailable")
)

// resumeRejected is the workflow's refusal of a resume: kind is one of workflows.Reject*.
type resumeRejected struct{ kind, msg string }

func (e *resumeRejected) Error() string { return "resume rejected (" + e.kind + "): " + e.msg }

// newTemporalStore is the job store of opts.Temporal (opts with defaults applied).
func newTemporalStore(opts Options, ni *needsInputCache) *temporalStore {
	return &temporalStore{c: opts.Temporal, namespace: opts.Namespace, taskQueue: opts.TaskQueue, dc: opts.DataConverter, needsInputs: ni}
}

// startOptions is a start's store request for principal p.
func (f *Frontend) startOptions(p authz.Principal, id string, kind workflows.Kind, spec startSpec, memo map[string]any, awaitFirst bool) storeStart {
	return storeStart{id: id, kind: kind.Name, workflow: kind.WorkflowName, input: spec.input, tenant: p.Tenant, owner: p.Subject,
		memo: memo, summary: spec.summary, details: spec.details, fairness: f.fairness(p.Tenant), slots: spec.slots, awaitFirst: awaitFirst}
}
