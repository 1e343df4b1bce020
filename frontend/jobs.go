package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// KindView is what start_*, get_*, cancel_* and resume_* of one kind return (CONTRACT.md "Job
// view"): a list row plus the kind's typed result, so each tool's output schema names it.
type KindView[R any] struct {
	JobSummary
	Result  *R     `json:"result,omitempty" jsonschema:"the job's result, once it succeeded"`
	Created *bool  `json:"created,omitempty" jsonschema:"start_* only: true if this call started the job, false if it already existed"`
	Note    string `json:"note,omitempty" jsonschema:"what this call did beyond reading the job, e.g. that an answered or declined elicitation was recorded or changed nothing"`
}

// toolText: a view whose result has words of its own (the conformance fixtures') is answered
// with them as its text content.
func (v *KindView[R]) toolText() (string, bool) {
	if t, ok := any(v.Result).(toolTexter); ok && v.Result != nil {
		return t.toolText()
	}
	return "", false
}

// JobSummary is one list_jobs row (wire.JobSummary): the cheap part of a job view, read from
// the visibility record alone (no result, no per-row Temporal call).
type JobSummary = wire.JobSummary

// JobView decodes any kind's job view (for clients and tests; wire.JobView); Result is left
// as decoded JSON.
type JobView = wire.JobView

// NeedsInputView is an open input request (wire.NeedsInputView).
type NeedsInputView = wire.NeedsInputView

// needsInputViewOf renders an open input request.
func needsInputViewOf(ni *workflows.NeedsInput) NeedsInputView {
	return NeedsInputView{InputID: ni.InputID, Prompt: ni.Prompt, AnswerSchema: ni.AnswerSchema,
		ScopeDigest: ni.ScopeDigest, Scope: ni.Scope, Approver: ni.Approver, SelfApproval: ni.AllowSelf,
		RequestedBy: ni.RequestedBy, ExpiresAt: ni.ExpiresAt}
}

// runState is the state of a job's workflow run as the store reports it; the contract status
// derives from it (job.status). Its values name the failure in a view's error code, spelt as
// views always have: Temporal's status name in lower case, without separators ("timedout").
type runState string

const (
	runUnknown        runState = "unspecified"
	runRunning        runState = "running"
	runCompleted      runState = "completed"
	runFailed         runState = "failed"
	runTerminated     runState = "terminated"
	runTimedOut       runState = "timedout"
	runCanceled       runState = "canceled"
	runContinuedAsNew runState = "continuedasnew"
)

// job is what one Describe tells about a job.
type job struct {
	id, runID  string
	firstRunID string // the job's first run (scopes what it keeps outside Temporal)
	tenant     string
	owner      string
	kind       string
	exec       runState
	saStatus   workflows.Status
	inputHash  string
	createdAt  time.Time
	startedAt  time.Time
	closedAt   time.Time
	progress   workflows.Progress
	slots      int                   // memo slots: the episode concurrency an eval holds while unfinished
	needsInput *workflows.NeedsInput // may be shared with other calls (see needsInputCache): never modify
	jobErr     *workflows.JobError
	// decision is the record of the answer that rejected the job (memo); nil otherwise.
	decision *workflows.DecisionRecord
	// cancelRequested: a cancel is recorded but the workflow may not have run since (no worker).
	cancelRequested bool
	// needsInputJSON is needsInput's NeedsInputView as JSON, when the store decoded it (needsInputCache.decode).
	needsInputJSON []byte
}

func (j *job) policyJob() authz.Job {
	if j.exec != runRunning {
		return workflows.PolicyJob(j.tenant, j.owner, nil)
	}
	return workflows.PolicyJob(j.tenant, j.owner, j.needsInput)
}

// closedStatus is the contract status of a run that closed as exec: false while it runs (or
// when it continued as new, which ends no job).
func closedStatus(exec runState) (workflows.Status, bool) {
	switch exec {
	case runCompleted:
		return workflows.StatusSucceeded, true
	case runFailed, runTerminated, runTimedOut:
		return workflows.StatusFailed, true
	case runCanceled:
		return workflows.StatusCancelled, true
	}
	return "", false
}

// status derives the contract status: the execution status is the truth once closed; while
// running, the JobStatus search attribute the workflow keeps says which phase it is in.
func (j *job) status() workflows.Status {
	if s, closed := closedStatus(j.exec); closed {
		return s
	}
	if j.cancelRequested {
		return workflows.StatusCancelling
	}
	switch j.saStatus {
	case workflows.StatusRunning, workflows.StatusAwaitingInput, workflows.StatusCancelling:
		return j.saStatus
	}
	return workflows.StatusQueued
}

// jobID is the workflow ID of the job owner starts under key: "<tenant>/<kind>/<owner>/<key>".
// Keys are per owner (CONTRACT semantics 1): another principal's start with the same key names
// another workflow, so it starts that principal's own job and learns nothing of the first one.
// Tenant, kind and key never hold '/' (ValidTenant, Kinds, checkKey), and ownerSegment never
// emits one, so the four parts split unambiguously. Jobs started before owners were part of
// the ID ("<tenant>/<kind>/<key>") keep working through their handles, which carry the ID.
func jobID(tenant, kind, owner, key string) string {
	return tenant + "/" + kind + "/" + ownerSegment(owner) + "/" + key
}

// ownerSegmentMax bounds the owner part of a workflow ID. With the longest tenant (63), kind (32)
// and key (128) the ID stays far below Temporal's default limit of 1000 bytes (limit.maxIDLength).
const ownerSegmentMax = 200

// ownerSegment renders a subject as one readable workflow-ID segment: printable ASCII stays as
// it is, except '%', '/', '~' and the quotes and backslash (which Temporal's visibility store
// mangles in query literals, see ownerMatchable, and the quota check queries job IDs); those and
// every other byte are %XX (upper-case hex). "." and ".." are escaped whole, so no segment reads
// as a path step. A rendering longer than
// ownerSegmentMax becomes "~" and the SHA-256 of the subject in hex: escaping never emits '~',
// so the two forms cannot meet.
func ownerSegment(sub string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(sub); i++ {
		c := sub[i]
		if c > ' ' && c < 0x7f && !strings.ContainsRune(`%/~\"'`, rune(c)) && sub != "." && sub != ".." {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	if b.Len() > ownerSegmentMax {
		sum := sha256.Sum256([]byte(sub))
		return "~" + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// describe reads one job; a job the store does not know is not_found. A stream's render
// carries the job its run's watch just described (withDescribed, events_hub.go): that is the
// answer, as fresh as the event the render is for.
func (f *Frontend) describe(ctx context.Context, id string) (*job, error) {
	if j, ok := ctx.Value(describedKey{}).(*job); ok && j.id == id {
		c := *j
		return &c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
	defer cancel()
	j, err := f.store.Describe(ctx, id)
	if errors.Is(err, errJobNotFound) {
		return nil, errNotFound()
	}
	return j, err
}

// resolve opens a handle for the caller and reads the job, applying the access policy for a.
// Every "may not know" outcome is the same not_found as an unknown job.
func (f *Frontend) resolve(ctx context.Context, p authz.Principal, raw, kind string, a authz.Action) (*job, error) {
	if raw == "" {
		return nil, invalidArg("handle", "is required")
	}
	h, err := f.opts.Keys.OpenHandle(raw, f.opts.Now())
	if err == nil || errors.Is(err, handle.ErrExpired) {
		noteJob(ctx, h.WorkflowID) // signature verified: safe to log, also when refused below
	}
	switch {
	case errors.Is(err, handle.ErrExpired):
		if h.Tenant != p.Tenant {
			return nil, errNotFound()
		}
		te := toolErr(CodeHandleExpired, "the handle has expired; call start_%s again with the same idempotency_key and arguments (or list_jobs) to get a fresh one", kindOr(h.Kind, kind))
		te.Kind = kindOr(h.Kind, kind)
		return nil, te
	case err != nil:
		return nil, toolErr(CodeInvalidHandle, "the handle is malformed or not signed by this service; pass the handle string exactly as returned")
	}
	if h.Tenant != p.Tenant || !strings.HasPrefix(h.WorkflowID, p.Tenant+"/") {
		return nil, errNotFound()
	}
	if h.Kind != kind {
		// The handle's signature and tenant are verified: naming its kind leaks nothing. Kind
		// says it as a field, for clients (the CLI finds a handle's tools by it).
		te := invalidArg("handle", "names a %s job; use the %s tools for it", h.Kind, h.Kind)
		te.Kind = h.Kind
		return nil, te
	}
	j, err := f.describe(ctx, h.WorkflowID)
	if err != nil {
		return nil, err
	}
	if j.tenant != p.Tenant || j.kind != kind {
		return nil, errNotFound()
	}
	switch authz.Decide(p, a, j.policyJob()) {
	case authz.Allow:
		return j, nil
	case authz.Forbidden:
		if a == authz.ActionResume {
			return nil, toolErr(CodeForbidden, "%s", authz.ResumeRefusal(p, j.policyJob()))
		}
		return nil, toolErr(CodeForbidden, "you may see this job but not %s it", a)
	default:
		return nil, errNotFound()
	}
}

func kindOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// readResult decodes a closed successful job's workflow result into ptr. It reads the close
// event, which works with no worker running; a succeeded run's result is then kept in the
// closed-run cache (see resultCache), so reading it again costs no Temporal call.
func (f *Frontend) readResult(ctx context.Context, j *job, ptr any) error {
	cacheable := j.exec == runCompleted && j.runID != ""
	k := resultKey{workflowID: j.id, runID: j.runID, typ: reflect.TypeOf(ptr)}
	if cacheable {
		if b, ok := f.results.get(k); ok {
			if err := json.Unmarshal(b, ptr); err == nil {
				return nil
			}
			// Unreachable while the result types round-trip; read it afresh below.
			reflect.ValueOf(ptr).Elem().SetZero()
		}
	}
	ctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
	defer cancel()
	if err := f.store.Result(ctx, j.id, j.runID, ptr); err != nil {
		return err
	}
	if cacheable {
		if b, err := json.Marshal(ptr); err == nil {
			f.results.put(k, b)
		}
	}
	return nil
}

func (f *Frontend) uiURL(id, runID string) string {
	u := f.opts.UIBaseURL + "/namespaces/" + url.PathEscape(f.opts.Namespace) + "/workflows/" + url.PathEscape(id)
	if runID != "" {
		u += "/" + url.PathEscape(runID) + "/history"
	}
	return u
}

func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// summary renders a list row: the job view without the result (which would cost a call per
// row). Same derivations as view.
func (f *Frontend) summary(p authz.Principal, j *job) JobSummary {
	s := JobSummary{
		JobID:     j.id,
		Kind:      j.kind,
		Status:    j.status(),
		Owner:     j.owner,
		CreatedAt: j.createdAt,
		Progress:  j.progress,
		Error:     j.jobErr,
		Decision:  decisionView(j.decision),
	}
	s.Handle = f.opts.Keys.SealHandle(handle.Handle{Tenant: j.tenant, WorkflowID: j.id, Kind: j.kind,
		Expiry: f.opts.Now().Add(f.opts.HandleTTL).Truncate(time.Second)})
	if s.CreatedAt.IsZero() {
		s.CreatedAt = j.startedAt
	}
	s.UpdatedAt = latest(s.CreatedAt, j.progress.AsOf, j.closedAt)
	if f.showUIURL(p) {
		s.UIURL = f.uiURL(j.id, j.runID)
	}
	switch s.Status {
	case workflows.StatusQueued, workflows.StatusCancelling:
		s.PollAfterMS = 1000
	case workflows.StatusRunning:
		s.PollAfterMS = 2000
	case workflows.StatusAwaitingInput:
		s.PollAfterMS = 5000
		if ni := j.needsInput; ni != nil {
			v := needsInputViewOf(ni).WithJSON(j.needsInputJSON)
			s.NeedsInput = &v
		}
	case workflows.StatusFailed:
		if s.Error == nil {
			s.Error = &workflows.JobError{Code: string(j.exec),
				Message: "the job's workflow ended without reporting a reason; see ui_url"}
		}
	case workflows.StatusCancelled:
		if s.Error == nil {
			s.Error = &workflows.JobError{Code: workflows.ErrCodeCancelled, Message: "cancelled"}
		}
	}
	return s
}
