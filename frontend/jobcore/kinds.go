package jobcore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/workflows"
)

// KindSpec is one kind of job as a frontend serves it, declared once in the kind's own file:
// its start tool and arguments, its options, its result view and whatever else it serves
// (HTTP routes, the quota slots its jobs hold). Build one with EvalKind, ExportKind, …;
// Options.Kinds lists the kinds a frontend serves, and everything else loops over them.
type KindSpec interface {
	// Name is the kind's name as the workflows layer registers it (workflows.Kind.Name): the
	// suffix of its tools and the JobKind search attribute.
	Name() string
	// serve binds the kind to f, once, in New.
	Serve(f *Core) ServedKind
}

// servedKind is a kind bound to one Frontend: its tools and what else it serves.
type ServedKind struct {
	Name                       string
	start, get, cancel, resume ToolDef
	// reads and writes are the kind's further tools (beyond start, get, cancel and resume):
	// tools/list shows reads after the shared list tools, writes after every resume tool.
	Reads, Writes []ToolDef
	// routes are the kind's further HTTP routes (ServeMux pattern → handler); they are served
	// behind the bearer middleware, like /mcp.
	Routes map[string]http.Handler
	// maxSlots is set by a kind whose jobs hold episode slots while unfinished (quota
	// episodes_in_flight_per_tenant, memo "slots"): the most one of its jobs can hold.
	MaxSlots func() int
	// freshResult names the members of the kind's result sealed afresh on every read (download
	// links and their expiry): an event stream's digest leaves them out, so a read a second
	// later is not a new event (events/follow.go).
	FreshResult []string
	// pageResult renders a succeeded job's result for p on the people's job page
	// (frontend/pages, through frontend/pages_port.go): rows and a download link. nil shows none.
	PageResult func(ctx context.Context, p authz.Principal, j *jobstore.Job) pages.Result
	// taskInput renders the kind's open input requests for tasks/get and reads tasks/update's
	// answers; nil is the approval elicitation every job kind's request is (approvalInput).
	taskInput taskInput
	// Surfaces are the only surfaces a job's open request may be answered on (nil: any); nil
	// Surfaces: any, for every job of the kind (apps.go).
	Surfaces func(j *jobstore.Job) []string
}

// DefaultKinds is every kind with its default options (what a frontend serves when
// Options.Kinds is empty), each replaced by the spec of the same name in with, if any; a spec
// of another name is added at the end. This list is the one place a kind is registered in
// the frontend: a server configures the kinds it has options for and gets every other one.
func DefaultKinds(with ...KindSpec) []KindSpec {
	out := []KindSpec{EvalKind(EvalOptions{}), ExportKind(ExportOptions{})}
	for _, w := range with {
		i := slices.IndexFunc(out, func(k KindSpec) bool { return w != nil && k.Name() == w.Name() })
		if i < 0 {
			out = append(out, w)
		} else {
			out[i] = w
		}
	}
	return out
}

// serveKinds binds specs to f, refusing a kind the workflows layer does not know (its jobs
// could never start) and a kind listed twice (its tools would clash).
func ServeKinds(f *Core, specs []KindSpec) ([]ServedKind, error) {
	out := make([]ServedKind, 0, len(specs))
	seen := map[string]bool{}
	for _, spec := range specs {
		if spec == nil {
			return nil, fmt.Errorf("frontend: Kinds holds a nil kind")
		}
		name := spec.Name()
		if _, ok := workflows.LookupKind(name); !ok {
			return nil, fmt.Errorf("frontend: kind %q is not registered in workflows", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("frontend: kind %q is listed twice", name)
		}
		seen[name] = true
		out = append(out, spec.Serve(f))
	}
	return out, nil
}

// served binds kind k to f with its start tool: get, cancel and resume are the same for every kind.
func (k JobKind[R]) served(f *Core, start ToolDef) ServedKind {
	get, cancel, resume := k.jobTools(f)
	return ServedKind{Name: k.Name, start: start, get: get, cancel: cancel, resume: resume}
}

// startIn is what every start tool's arguments carry: the caller's idempotency key.
type startIn interface{ idempotencyKey() string }

// startTool is kind k's start_<kind> tool. The start permission and the idempotency key are
// checked here, once for every kind, before args validates the rest of the arguments and says
// what to start (spec.key is filled in from in).
func startTool[In startIn, R any](f *Core, k JobKind[R], t *mcp.Tool, args func(ctx context.Context, p authz.Principal, in In) (StartSpec, error)) ToolDef {
	t.Name = "start_" + k.Name
	return newKindTool(f, k.Name, authz.ActionStart, t, func(ctx context.Context, p authz.Principal, in In) (*KindView[R], error) {
		if authz.Decide(p, authz.ActionStart, authz.Job{}) != authz.Allow {
			return nil, ToolErr(CodeForbidden, "starting jobs needs jobs:write")
		}
		if err := checkKey(in.idempotencyKey()); err != nil {
			return nil, err
		}
		spec, err := args(ctx, p, in)
		if err != nil {
			return nil, err
		}
		spec.Key = in.idempotencyKey()
		return k.Start(ctx, f, p, spec)
	})
}

// jobKind is what one kind supplies to the job core: its name, how tools call its jobs, and how
// a succeeded job's result is rendered (R is the result type, with its own output schema).
// Idempotent start, describe, view, handle, cancel, resume and the 403 scope table are shared.
type JobKind[R any] struct {
	Name string // the kind's name (workflows.Kind.Name)
	Noun string // "eval run", "export": in tool titles and descriptions
	// result renders a succeeded job's result for the caller; decode reads the workflow result.
	Result func(ctx context.Context, f *Core, p authz.Principal, j *jobstore.Job, decode func(ptr any) error) (*R, error)
}

// view renders a job for the caller with a fresh handle and, once succeeded, its result.
func (k JobKind[R]) view(ctx context.Context, f *Core, p authz.Principal, j *jobstore.Job) (*KindView[R], error) {
	v := &KindView[R]{JobSummary: f.Summary(p, j)}
	if v.Status == workflows.StatusSucceeded {
		res, err := k.Result(ctx, f, p, j, func(ptr any) error { return f.readResult(ctx, j, ptr) })
		if err != nil {
			return nil, err
		}
		v.Result = res
	}
	return v, nil
}

// viewOr is the view of the job an action (cancel, resume) returned, or the action's error.
func (k JobKind[R]) viewOr(ctx context.Context, f *Core, p authz.Principal, j *jobstore.Job, err error) (*KindView[R], error) {
	if err != nil {
		return nil, err
	}
	return k.view(ctx, f, p, j)
}

var idemKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@=+-]{0,127}$`)

// checkKey validates an idempotency key: it becomes the last segment of the job's workflow ID
// (jobID), so it never holds '/'.
func checkKey(key string) error {
	if !idemKeyRE.MatchString(key) {
		return invalidArg("idempotency_key", "must be 1-128 chars of [A-Za-z0-9._:@=+-], starting with a letter or digit")
	}
	return nil
}

// startSpec is a validated start request of some kind.
type StartSpec struct {
	Key   string // the caller's idempotency key (checked by startTool)
	Hash  string // idempotency fingerprint of the normalized arguments
	Input any    // the workflow input
	Total int    // progress total known at start (0 when not yet known)
	// summary and details label the job in the Temporal Web UI.
	Summary, Details string
	// ownerInput: the job will at once ask its owner for input (an MRTR client is asked then).
	OwnerInput bool
	// slots is the episode concurrency the job holds while unfinished (quota); 0 for a kind
	// without maxSlots.
	slots int
	// Admit, when set, is a kind's own quota check, after the tenant's and owner's: a
	// quota_exceeded from it is answered like theirs (a retry of a start that happened gets
	// its job). An eval's monthly cost (eval_costquota.go).
	Admit func(ctx context.Context) error
}

// start starts the job for spec, or finds it: same key and fingerprint → the same job
// (created=false); anything else → idempotency_key_reused, nothing started.
// The key was checked by startTool.
func (k JobKind[R]) Start(ctx context.Context, f *Core, p authz.Principal, spec StartSpec) (*KindView[R], error) {
	kind, ok := workflows.LookupKind(k.Name)
	if !ok {
		return nil, fmt.Errorf("kind %q is not registered in workflows.Kinds", k.Name)
	}
	id := jobID(p.Tenant, k.Name, p.Subject, spec.Key)
	noteJob(ctx, id)
	adm, err := f.Quota.Admit(ctx, p, id, spec.slots)
	if err == nil && spec.Admit != nil {
		if err = spec.Admit(ctx); err != nil {
			adm.Abandoned()
		}
	}
	if err != nil {
		var te *ToolError
		if errors.As(err, &te) && te.Code == CodeQuotaExceeded {
			// A retry of a start that already happened gets its job, quota or not; a key
			// taken by another job is a reuse, as it would be under the quota. A key that
			// names no job (or none that can be read): the refusal stands.
			if j, derr := f.Describe(ctx, id); derr == nil {
				return k.keyTaken(ctx, f, p, j, spec)
			}
		}
		return nil, err
	}
	now := f.Opts.Now().UTC()
	progress := workflows.Progress{Total: spec.Total, Unit: kind.Unit, Message: "queued", AsOf: now}
	memo := map[string]any{
		workflows.MemoInputHash: spec.Hash,
		workflows.MemoCreatedAt: now,
		workflows.MemoProgress:  progress,
	}
	if spec.slots > 0 {
		memo[workflows.MemoSlots] = spec.slots
	}
	st := f.startOptions(p, id, kind, spec, memo, spec.OwnerInput && WantsElicitation(callRequest(ctx)) && !carriesAnswer(callRequest(ctx)))
	runID, err := f.startJob(ctx, st)
	if err == nil || errors.Is(err, jobstore.ErrFirstStateTimeout) && runID != "" {
		adm.Started()
		j := &jobstore.Job{ID: id, RunID: runID, Tenant: p.Tenant, Owner: p.Subject, Kind: k.Name,
			Exec: jobstore.RunRunning, SAStatus: workflows.StatusQueued, InputHash: spec.Hash,
			CreatedAt: now, Progress: progress, Slots: spec.slots}
		if st.AwaitFirst {
			// Show the job as its first state left it (the input request to ask about), or as
			// it is when that did not come in time.
			if j2, derr := f.Describe(ctx, id); derr == nil {
				j = j2
			}
		}
		f.Metrics.JobStarted(k.Name, true)
		return k.started(ctx, f, p, j, spec, true)
	}
	if errors.Is(err, jobstore.ErrFirstStateTimeout) {
		// The call ended before the start answered: the job may exist. It is this start's when
		// it carries this start's created_at (no other start has the same instant and hash).
		if j, derr := f.Describe(ctx, id); derr == nil && k.sameStart(j, p, spec) && j.CreatedAt.Equal(now) {
			adm.Started()
			f.Metrics.JobStarted(k.Name, true)
			return k.started(ctx, f, p, j, spec, true)
		}
		adm.Abandoned()
		return nil, err
	}
	adm.Abandoned()
	if !errors.Is(err, jobstore.ErrAlreadyStarted) {
		return nil, err
	}
	// The key is taken: the same request gets the same job; anything else is a reuse.
	j, err := f.Describe(ctx, id)
	if err != nil {
		var te *ToolError
		if errors.As(err, &te) && te.Code == CodeNotFound {
			return nil, ToolErr(CodeUnavailable, "the job for this key is being replaced; retry")
		}
		return nil, err
	}
	return k.keyTaken(ctx, f, p, j, spec)
}

// sameStart reports whether job j is what this start asks for: p's job of this kind with the
// same input.
func (k JobKind[R]) sameStart(j *jobstore.Job, p authz.Principal, spec StartSpec) bool {
	return j.Tenant == p.Tenant && j.Kind == k.Name && j.Owner == p.Subject && j.InputHash == spec.Hash
}

// keyTaken answers a start whose key already names job j (the start found it taken, or a
// quota refused a start whose key names a job): the same job for an idempotent retry,
// idempotency_key_reused for another.
func (k JobKind[R]) keyTaken(ctx context.Context, f *Core, p authz.Principal, j *jobstore.Job, spec StartSpec) (*KindView[R], error) {
	if !k.sameStart(j, p, spec) {
		return nil, errKeyReused(spec.Key)
	}
	f.Metrics.JobStarted(k.Name, false)
	return k.started(ctx, f, p, j, spec, false)
}

// ownerInputWait bounds how long start_* waits for a job's first state (its owner approval
// request open, through Update-With-Start) before it answers an MRTR client with the job view
// instead of the elicitation.
const ownerInputWait = 3 * time.Second

// started renders a started (or found) job. With a 2026 client that can take an elicitation, a
// job that at once waits for its owner is answered with that elicitation (MRTR), and the
// retry — the same idempotent start plus inputResponses — delivers the answer.
func (k JobKind[R]) started(ctx context.Context, f *Core, p authz.Principal, j *jobstore.Job, spec StartSpec, created bool) (*KindView[R], error) {
	req := callRequest(ctx)
	note := ""
	if carriesAnswer(req) || (spec.OwnerInput && WantsElicitation(req)) {
		if !carriesAnswer(req) && !created {
			// A retry of the start: the job it found may not have reached its first state yet.
			j = f.awaitFirstState(ctx, j)
		}
		var err error
		if j, note, err = f.inputRound(ctx, p, j); err != nil {
			return nil, err
		}
	}
	v, err := k.view(ctx, f, p, j)
	if v != nil {
		v.Created, v.Note = ptr(created), note
	}
	return v, err
}

// jobTools are the get, cancel and resume tools of kind k, the same for every kind.
func (k JobKind[R]) jobTools(f *Core) (get, cancel, resume ToolDef) {
	get = newKindTool(f, k.Name, authz.ActionGet, &mcp.Tool{
		Name:  "get_" + k.Name,
		Title: "Get an " + k.Noun,
		Description: "The " + k.Noun + "'s current view: status, progress, open input request, result or error. " +
			"Answers even while no worker runs (progress as of progress.as_of).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, p authz.Principal, in HandleIn) (*KindView[R], error) {
		j, err := f.Resolve(ctx, p, in.Handle, k.Name, authz.ActionGet)
		if err != nil {
			return nil, err
		}
		j, note, err := f.inputRound(ctx, p, j)
		if err != nil {
			return nil, err
		}
		v, err := k.view(ctx, f, p, j)
		if v != nil {
			v.Note = note
			f.noteApprovalCards(ctx, p, j)
		}
		return v, err
	})
	cancel = newKindTool(f, k.Name, authz.ActionCancel, &mcp.Tool{
		Name:  "cancel_" + k.Name,
		Title: "Cancel an " + k.Noun,
		Description: "Request cancellation: running work is stopped and the job ends cancelled. " +
			"Idempotent; a finished job reports its final state.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, p authz.Principal, in CancelIn) (*KindView[R], error) {
		j, err := f.cancel(ctx, p, in, k.Name)
		return k.viewOr(ctx, f, p, j, err)
	})
	resume = newKindTool(f, k.Name, authz.ActionResume, &mcp.Tool{
		Name:  "resume_" + k.Name,
		Title: "Answer an " + k.Noun + "'s input request",
		Description: "Approve or reject the open input request of an " + k.Noun + " job (status awaiting_input). " +
			"input_id and scope_digest must be the ones in needs_input. needs_input.approver says who may answer: " +
			"owner (the job's owner, jobs:write) or approver (jobs:approve, and not the job's owner unless self_approval).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, p authz.Principal, in ResumeIn) (*KindView[R], error) {
		j, err := f.resume(ctx, p, in, k.Name)
		return k.viewOr(ctx, f, p, j, err)
	}).enum("decision", workflows.DecisionApprove, workflows.DecisionReject)
	return get, cancel, resume
}

func errKeyReused(key string) *ToolError {
	return ToolErr(CodeIdempotencyKeyReused, "idempotency_key %q already names another of your jobs (started with other arguments); use a new key for a new job", key)
}
