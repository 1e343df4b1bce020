package jobcore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jobgate/jobgate/authz"

	"github.com/jobgate/jobgate/frontend/events"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
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

// ToolText: a view whose result has words of its own (the conformance fixtures') is answered
// with them as its text content.
func (v *KindView[R]) ToolText() (string, bool) {
	if t, ok := any(v.Result).(toolTexter); ok && v.Result != nil {
		return t.ToolText()
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
// carries the job its run's watch just described (withDescribed, events/hub.go): that is the
// answer, as fresh as the event the render is for.
func (f *Core) Describe(ctx context.Context, id string) (*jobstore.Job, error) {
	if j, ok := events.Described(ctx); ok && j.ID == id {
		c := *j
		return &c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.Opts.TemporalTimeout)
	defer cancel()
	j, err := f.Store.Describe(ctx, id)
	if errors.Is(err, jobstore.ErrJobNotFound) {
		return nil, ErrNotFound()
	}
	return j, err
}

// resolve opens a handle for the caller and reads the job, applying the access policy for a.
// Every "may not know" outcome is the same not_found as an unknown job.
func (f *Core) Resolve(ctx context.Context, p authz.Principal, raw, kind string, a authz.Action) (*jobstore.Job, error) {
	if raw == "" {
		return nil, invalidArg("handle", "is required")
	}
	if IsJobID(raw) {
		return f.resolveJobID(ctx, p, raw, kind, a)
	}
	h, err := f.Opts.Keys.OpenHandle(raw, f.Opts.Now())
	if err == nil || errors.Is(err, handle.ErrExpired) {
		noteJob(ctx, h.WorkflowID) // signature verified: safe to log, also when refused below
	}
	switch {
	case errors.Is(err, handle.ErrExpired):
		if h.Tenant != p.Tenant {
			return nil, ErrNotFound()
		}
		te := ToolErr(CodeHandleExpired, "the handle has expired; call start_%s again with the same idempotency_key and arguments (or list_jobs) to get a fresh one", kindOr(h.Kind, kind))
		te.Kind = kindOr(h.Kind, kind)
		return nil, te
	case err != nil:
		return nil, ToolErr(CodeInvalidHandle, "the handle is malformed or not signed by this service; pass the handle string exactly as returned")
	}
	if h.Tenant != p.Tenant || !strings.HasPrefix(h.WorkflowID, p.Tenant+"/") {
		return nil, ErrNotFound()
	}
	if h.Kind != kind {
		// The handle's signature and tenant are verified: naming its kind leaks nothing. Kind
		// says it as a field, for clients (the CLI finds a handle's tools by it).
		te := invalidArg("handle", "names a %s job; use the %s tools for it", h.Kind, h.Kind)
		te.Kind = h.Kind
		return nil, te
	}
	j, err := f.Describe(ctx, h.WorkflowID)
	if err != nil {
		return nil, err
	}
	return f.authorize(p, j, kind, a)
}

// authorize applies the access policy for a to the job a handle or job ID named, read from the
// store: another tenant's job, or one of another kind than the tool's, is not_found.
func (f *Core) authorize(p authz.Principal, j *jobstore.Job, kind string, a authz.Action) (*jobstore.Job, error) {
	if j.Tenant != p.Tenant || j.Kind != kind {
		return nil, ErrNotFound()
	}
	switch authz.Decide(p, a, j.PolicyJob()) {
	case authz.Allow:
		return j, nil
	case authz.Forbidden:
		if a == authz.ActionResume {
			return nil, ToolErr(CodeForbidden, "%s", authz.ResumeRefusal(p, j.PolicyJob()))
		}
		return nil, ToolErr(CodeForbidden, "you may see this job but not %s it", a)
	default:
		return nil, ErrNotFound()
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
func (f *Core) readResult(ctx context.Context, j *jobstore.Job, ptr any) error {
	cacheable := j.Exec == jobstore.RunCompleted && j.RunID != ""
	k := ResultKey{WorkflowID: j.ID, RunID: j.RunID, Typ: reflect.TypeOf(ptr)}
	if cacheable {
		if b, ok := f.Results.Get(k); ok {
			if err := json.Unmarshal(b, ptr); err == nil {
				return nil
			}
			// Unreachable while the result types round-trip; read it afresh below.
			reflect.ValueOf(ptr).Elem().SetZero()
		}
	}
	ctx, cancel := context.WithTimeout(ctx, f.Opts.TemporalTimeout)
	defer cancel()
	if err := f.Store.Result(ctx, j.ID, j.RunID, ptr); err != nil {
		return err
	}
	if cacheable {
		if b, err := json.Marshal(ptr); err == nil {
			f.Results.Put(k, b)
		}
	}
	return nil
}

func (f *Core) uiURL(id, runID string) string {
	u := f.Opts.UIBaseURL + "/namespaces/" + url.PathEscape(f.Opts.Namespace) + "/workflows/" + url.PathEscape(id)
	if runID != "" {
		u += "/" + url.PathEscape(runID) + "/history"
	}
	return u
}

// summary renders a list row: the job view without the result (which would cost a call per
// row). Same derivations as view.
func (f *Core) Summary(p authz.Principal, j *jobstore.Job) JobSummary {
	s := JobSummary{
		JobID:     j.ID,
		Kind:      j.Kind,
		Status:    j.Status(),
		Owner:     j.Owner,
		CreatedAt: j.CreatedAt,
		Progress:  j.Progress,
		Error:     j.JobErr,
		Decision:  decisionView(j.Decision),
	}
	s.Handle = f.Opts.Keys.SealHandle(handle.Handle{Tenant: j.Tenant, WorkflowID: j.ID, Kind: j.Kind,
		Expiry: f.Opts.Now().Add(f.Opts.HandleTTL).Truncate(time.Second)})
	if s.CreatedAt.IsZero() {
		s.CreatedAt = j.StartedAt
	}
	s.UpdatedAt = slices.MaxFunc([]time.Time{s.CreatedAt, j.Progress.AsOf, j.ClosedAt}, time.Time.Compare)
	if f.showUIURL(p) {
		s.UIURL = f.uiURL(j.ID, j.RunID)
	}
	switch s.Status {
	case workflows.StatusQueued, workflows.StatusCancelling:
		s.PollAfterMS = 1000
	case workflows.StatusRunning:
		s.PollAfterMS = 2000
	case workflows.StatusAwaitingInput:
		s.PollAfterMS = 5000
		if ni := j.NeedsInput; ni != nil {
			v := jobstore.NeedsInputViewOf(ni).WithJSON(j.NeedsInputJSON)
			s.NeedsInput = &v
		}
	case workflows.StatusFailed:
		if s.Error == nil {
			s.Error = &workflows.JobError{Code: string(j.Exec),
				Message: "the job's workflow ended without reporting a reason; see ui_url"}
		}
	case workflows.StatusCancelled:
		if s.Error == nil {
			s.Error = &workflows.JobError{Code: workflows.ErrCodeCancelled, Message: "cancelled"}
		}
	}
	return s
}

// startOptions is a start's store request for principal p.
func (f *Core) startOptions(p authz.Principal, id string, kind workflows.Kind, spec StartSpec, memo map[string]any, awaitFirst bool) jobstore.StartRequest {
	return jobstore.StartRequest{ID: id, Kind: kind.Name, Workflow: kind.WorkflowName, Input: spec.Input, Tenant: p.Tenant, Owner: p.Subject,
		Memo: memo, Summary: spec.Summary, Details: spec.Details, Fairness: f.fairness(p.Tenant), Slots: spec.slots, AwaitFirst: awaitFirst}
}

// fairness is tenant's dispatch key and configured weight.
func (f *Core) fairness(tenant string) workflows.Fairness {
	return workflows.Fairness{Key: tenant, Weight: float32(f.Opts.Tenants.For(tenant).FairnessWeight)}
}

// UIURLFor values (Options.UIURLFor).
const (
	UIURLForAdmin = "admin" // principals holding jobs:admin
	UIURLForAll   = "all"   // everyone (jobgate dev: the tour links to the UI)
	UIURLForNone  = "none"
)

// showUIURL reports whether p gets ui_url in job views: the Web UI shows every job of the
// namespace and is an operator tool, not a tenant surface.
func (f *Core) showUIURL(p authz.Principal) bool {
	if f.Opts.UIBaseURL == "" {
		return false
	}
	switch f.Opts.UIURLFor {
	case UIURLForAll:
		return true
	case UIURLForAdmin:
		return p.Has(authz.ScopeAdmin)
	}
	return false
}

// Bounds of the closed-run result cache.
const (
	ResultCacheMaxEntries = 4096
	ResultCacheMaxBytes   = 16 << 20
	// resultCacheMaxEntry: a larger result is read from Temporal every time.
	ResultCacheMaxEntry = 256 << 10
)

// resultCache remembers the decoded results of succeeded runs, so a get_* of a finished job
// costs one Describe instead of a Describe and a history read. A closed run never changes, and
// its run ID names it: the key is the workflow ID, the run ID (both from the Describe the call
// has just made and authorized) and the result's Go type.
//
// It holds only the workflow's result, which is the same for every caller: never a handle,
// a download link or anything else rendered for a principal. It is consulted only by
// readResult, after resolve has read the job afresh and applied the access policy to the
// caller; it never answers whether a job exists or who may see it.
//
// An entry is the result re-encoded as JSON (the result types round-trip through
// encoding/json), decoded into a fresh value for every call: callers share no memory.
// Bounded by entries and bytes; the oldest entries go first.
type resultCache = boundedCache[ResultKey, []byte]

type ResultKey struct {
	WorkflowID, RunID string
	Typ               reflect.Type
}

func NewResultCache() *resultCache {
	return newBoundedCache[ResultKey](ResultCacheMaxEntries, ResultCacheMaxBytes, ResultCacheMaxEntry,
		func(b []byte) int { return len(b) })
}

// boundedCache is a map bounded by entries and by the bytes size says its values hold; when
// full the oldest entries go first. A value larger than maxEntry is not kept.
type boundedCache[K comparable, V any] struct {
	maxEntries, maxBytes, maxEntry int
	size                           func(V) int

	mu    sync.Mutex
	m     map[K]V
	order []K // insertion order, oldest first
	Bytes int
}

func newBoundedCache[K comparable, V any](maxEntries, maxBytes, maxEntry int, size func(V) int) *boundedCache[K, V] {
	return &boundedCache[K, V]{maxEntries: maxEntries, maxBytes: maxBytes, maxEntry: maxEntry, size: size, m: make(map[K]V)}
}

func (c *boundedCache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *boundedCache[K, V]) Put(k K, v V) {
	n := c.size(v)
	if n > c.maxEntry {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	for len(c.order) > 0 && (len(c.m) >= c.maxEntries || c.Bytes+n > c.maxBytes) {
		old := c.order[0]
		var zero K
		c.order[0] = zero
		c.order = c.order[1:]
		c.Bytes -= c.size(c.m[old])
		delete(c.m, old)
	}
	c.m[k] = v
	c.order = append(c.order, k)
	c.Bytes += n
}

func (c *boundedCache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
