package jobcore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/events"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/quota"
	"github.com/jobgate/jobgate/frontend/telemetry"
	"github.com/jobgate/jobgate/workflows"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
)

// Defaults for Options fields left zero.
const (
	HandleTTLDefault       = 7 * 24 * time.Hour
	CursorTTLDefault       = 15 * time.Minute
	DownloadTTLDefault     = 5 * time.Minute
	TemporalTimeoutDefault = 10 * time.Second
	ResumeTimeoutDefault   = 15 * time.Second
	// ResumeSealTTL is how long a resume seal stays valid: the update it rides on reaches the
	// worker's validator within seconds; the rest is room for clock skew between hosts.
	ResumeSealTTL       = 5 * time.Minute
	MaxBodyBytesDefault = 1 << 20
)

var ErrNoPrincipal = errors.New("no verified principal on request")

// principalKey is where the bearer middleware keeps the verified principal in a token's
// Extra; principalFrom reads it back.
const PrincipalKey = "jobgate.principal"

// PrincipalFrom is the verified principal of a request's token.
func PrincipalFrom(ti *auth.TokenInfo) (authz.Principal, bool) {
	if ti == nil {
		return authz.Principal{}, false
	}
	p, ok := ti.Extra[PrincipalKey].(authz.Principal)
	return p, ok
}

// PrincipalFromContext is the verified principal of the token the bearer middleware put in an
// HTTP request's context.
func PrincipalFromContext(ctx context.Context) (authz.Principal, bool) {
	return PrincipalFrom(auth.TokenInfoFromContext(ctx))
}

// taskSupport is how a start tool meets the Tasks extension (toolDef.task).
type TaskSupport int

const (
	TaskOptional  TaskSupport = iota // a task for a declaring client, the job view otherwise
	TaskRequired                     // a task, and -32021 for a client that cannot take one
	TaskForbidden                    // never a task: the tool answers synchronously
)

// Options configure a Frontend.
type Options struct {
	// Temporal is a connected client for Namespace. Required.
	Temporal client.Client
	// Namespace the jobs live in. Defaults to "default".
	Namespace string
	// TaskQueue workers poll. Defaults to workflows.TaskQueueDefault.
	TaskQueue string
	// Verifier checks bearer tokens. Required.
	Verifier authz.Verifier
	// Keys sign handles and cursors. Required; share them across replicas.
	Keys *handle.Keyring
	// ResumeKeys seal every answer sent to a job (resume_*, MRTR, tasks/update); the workers'
	// update validator opens the seal with the same keys. Required; a keyring of its own (never
	// the handle keys), held only by frontends and workers.
	ResumeKeys *handle.Keyring
	// SigningKeys sign each answer's decision record with Ed25519 (resumeseal.Sign), and their
	// public half is served at /.well-known/jobgate-signing-keys; give the workers the same ring.
	// Nil: records are unsigned (jobgate verify fails them) and the key set is not served.
	SigningKeys *handle.SigningKeyring
	// ResourceURI is this server's OAuth resource identifier (tokens' aud), e.g. "http://localhost:8080/mcp". Required.
	ResourceURI string
	// AuthorizationServers are advertised in RFC 9728 metadata. Defaults to none.
	AuthorizationServers []string
	// UIBaseURL is the public Temporal Web UI base, e.g. "http://localhost:8233". Empty omits ui_url.
	UIBaseURL string
	// UIURLFor is who gets ui_url in job views: UIURLForAdmin (principals with jobs:admin),
	// UIURLForAll or UIURLForNone. The Web UI is an operator tool. Defaults to UIURLForAdmin.
	UIURLFor string
	// Kinds are the kinds of job this frontend serves (their tools, in this order within each
	// group of tools/list, their options and routes). Defaults to DefaultKinds(): every kind
	// with its default options.
	Kinds []KindSpec
	// DataConverter decodes memos and results; use the one the Temporal client uses.
	// Defaults to converter.GetDefaultDataConverter().
	DataConverter converter.DataConverter
	// HandleTTL is how long a handle stays valid; every job view re-issues one. Defaults to 7 days.
	HandleTTL time.Duration
	// CursorTTL is how long a list cursor stays valid. Defaults to 15 minutes.
	CursorTTL time.Duration
	// TemporalTimeout bounds each Temporal call of a request. Defaults to 10 seconds.
	TemporalTimeout time.Duration
	// Logger receives one line per tool call. Defaults to a no-op logger.
	Logger *zap.Logger
	// Metrics, if set, receives the jobgate_* collectors (see telemetry/metrics.go). Defaults to none.
	Metrics prometheus.Registerer
	// Tenants holds per-tenant fairness weights and quotas. The zero value has no quotas and
	// equal weights; servers load a tenants file or authz.DefaultTenants.
	Tenants authz.Tenants
	// QuotaBudget bounds how long a start waits for its quota check (quota/quota.go). Past it, or
	// when visibility does not answer, the start is decided by QuotaDegraded, never answered
	// unavailable. Defaults to quota.BudgetDefault (2 s).
	QuotaBudget time.Duration
	// QuotaDegraded is how a start is decided when its check cannot answer within QuotaBudget:
	// quota.AdmitBounded (the default) admits up to QuotaOvershoot such starts of a tenant on
	// this replica until a check of that tenant answers again; quota.Refuse refuses each with
	// quota_exceeded and retry_after_ms.
	QuotaDegraded quota.Policy
	// QuotaOvershoot bounds the starts of one tenant this replica admits unchecked under
	// quota.AdmitBounded between two checks that answered. Defaults to quota.OvershootDefault (8).
	QuotaOvershoot int
	// QuotaFresh is how old a quota check's figures may be to admit a start they keep far from
	// every limit without waiting for a new check (quota/fast.go: the margin, and what it
	// allows across replicas). Defaults to quota.FreshDefault (1 s); negative: every start
	// waits for a check made after it arrived.
	QuotaFresh time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// StreamHeartbeat is how often an idle event stream (GET /jobs/<handle>/events,
	// subscriptions/listen) sends a comment, so proxies keep it open. Defaults to 15 seconds.
	StreamHeartbeat time.Duration
	// MaxStreams and MaxStreamsPerCaller bound the event streams this replica holds open, in
	// all and per principal; more are refused with 429 and quota_exceeded. Default 1000 and 20.
	MaxStreams, MaxStreamsPerCaller int
	// ApprovalMaxAge is how recent the approver's sign-in (the token's auth_time) must be to
	// approve a sensitive scope on the MCP Apps approval card, as the pages hold a session to it
	// (--approval-max-age). Defaults to pages.ApprovalMaxAgeDefault (5 minutes).
	ApprovalMaxAge time.Duration
	// TracerProvider receives a span per MCP request ("tools/call start_export"), the child of
	// the HTTP request's span (TraceHTTP). Defaults to none: a no-op provider.
	TracerProvider trace.TracerProvider
}

// check reports the first thing wrong with opts: a required field missing (Temporal only when
// no store is given) or an option value not among its choices.
func (opts *Options) Check(haveStore bool) error {
	var missing []string
	if opts.Temporal == nil && !haveStore {
		missing = append(missing, "Temporal")
	}
	if opts.Verifier == nil {
		missing = append(missing, "Verifier")
	}
	if opts.Keys == nil {
		missing = append(missing, "Keys")
	}
	if opts.ResumeKeys == nil {
		missing = append(missing, "ResumeKeys")
	}
	if opts.ResourceURI == "" {
		missing = append(missing, "ResourceURI")
	}
	if len(missing) > 0 {
		return fmt.Errorf("frontend: missing %s", strings.Join(missing, ", "))
	}
	switch opts.QuotaDegraded {
	case "":
	case quota.AdmitBounded, quota.Refuse:
	default:
		return fmt.Errorf("frontend: QuotaDegraded %q: want %q or %q", opts.QuotaDegraded, quota.AdmitBounded, quota.Refuse)
	}
	switch opts.UIURLFor {
	case "":
	case UIURLForAdmin, UIURLForAll, UIURLForNone:
	default:
		return fmt.Errorf("frontend: UIURLFor %q: want %s, %s or %s", opts.UIURLFor, UIURLForAdmin, UIURLForAll, UIURLForNone)
	}
	return nil
}

// defaults fills the zero fields of opts with their documented defaults.
func (opts *Options) Defaults() {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.TaskQueue == "" {
		opts.TaskQueue = workflows.TaskQueueDefault
	}
	if len(opts.Kinds) == 0 {
		opts.Kinds = DefaultKinds()
	}
	if opts.DataConverter == nil {
		opts.DataConverter = converter.GetDefaultDataConverter()
	}
	if opts.HandleTTL <= 0 {
		opts.HandleTTL = HandleTTLDefault
	}
	if opts.CursorTTL <= 0 {
		opts.CursorTTL = CursorTTLDefault
	}
	if opts.TemporalTimeout <= 0 {
		opts.TemporalTimeout = TemporalTimeoutDefault
	}
	if opts.QuotaBudget <= 0 {
		opts.QuotaBudget = quota.BudgetDefault
	}
	if opts.QuotaOvershoot <= 0 {
		opts.QuotaOvershoot = quota.OvershootDefault
	}
	if opts.QuotaFresh == 0 {
		opts.QuotaFresh = quota.FreshDefault
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StreamHeartbeat <= 0 {
		opts.StreamHeartbeat = events.StreamHeartbeatDefault
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = events.MaxStreamsDefault
	}
	if opts.MaxStreamsPerCaller <= 0 {
		opts.MaxStreamsPerCaller = events.MaxStreamsPerCallerDefault
	}
	opts.UIBaseURL = strings.TrimRight(opts.UIBaseURL, "/")
	if opts.QuotaDegraded == "" {
		opts.QuotaDegraded = quota.AdmitBounded
	}
	if opts.UIURLFor == "" {
		opts.UIURLFor = UIURLForAdmin
	}
}

// Core is the job core: the served kinds, their tools and views, start, get, cancel and
// resume, lists and approvals, over the job store and the quota admission. The MCP edge
// (Frontend) holds one and serves it over HTTP, Tasks, MRTR and streams.
type Core struct {
	Opts    Options
	Log     *zap.Logger
	Metrics *telemetry.Metrics
	// results are the results of succeeded runs by workflow and run ID (jobs.go).
	Results *resultCache
	Store   jobstore.Store  // the jobs (jobstore/store.go): Temporal, or a unit test's fake
	Quota   *quota.Admitter // admission of starts under the tenants' quotas (quota/quota.go)
	// kinds are the served kinds (Options.Kinds bound to this core), in Options order.
	Kinds []ServedKind
	// export is the export kind when served (nil otherwise): the pages' download goes through
	// its download rule.
	Export *exportKind
	// createsTaskHook says whether a tools/call answers with a task (the edge's Tasks rules).
	CreatesTaskHook func(ctx context.Context, req *mcp.CallToolRequest) bool
}

// createsTask reports whether req, a start tool's call, answers with a task.
func (f *Core) createsTask(ctx context.Context, req *mcp.CallToolRequest) bool {
	return f.CreatesTaskHook != nil && f.CreatesTaskHook(ctx, req)
}

func (f *Core) Logger(ctx context.Context) *zap.Logger {
	if fs := telemetry.LogTrace(ctx); fs != nil {
		return f.Log.With(fs...)
	}
	return f.Log
}
