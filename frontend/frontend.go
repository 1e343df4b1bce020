package frontend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/events"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/quota"
	"github.com/jobgate/jobgate/frontend/telemetry"
	"github.com/jobgate/jobgate/frontend/temporalstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
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

// Version is reported to MCP clients (wire.Version; a variable so a build may stamp it).
var Version = wire.Version

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
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// StreamHeartbeat is how often an idle event stream (GET /jobs/<handle>/events,
	// subscriptions/listen) sends a comment, so proxies keep it open. Defaults to 15 seconds.
	StreamHeartbeat time.Duration
	// MaxStreams and MaxStreamsPerCaller bound the event streams this replica holds open, in
	// all and per principal; more are refused with 429 and quota_exceeded. Default 1000 and 20.
	MaxStreams, MaxStreamsPerCaller int
	// TracerProvider receives a span per MCP request ("tools/call start_export"), the child of
	// the HTTP request's span (TraceHTTP). Defaults to none: a no-op provider.
	TracerProvider trace.TracerProvider
}

// Frontend serves the MCP endpoint and its HTTP neighbours.
type Frontend struct {
	opts   Options
	server *mcp.Server
	// impl is the server's identity, as the SDK puts it in each 2026-07-28 result's _meta.
	impl    *mcp.Implementation
	log     *zap.Logger
	actions map[string]authz.Action // tool name → the action its 403 check is for
	// taskSupport is each start tool's support of the Tasks extension (toolDef.task).
	taskSupport map[string]taskSupport
	// handlers are the tools' handlers by name, for tasks/* to run get_* and cancel_* in process.
	handlers map[string]mcp.ToolHandler
	metrics  *telemetry.Metrics
	// results are the results of succeeded runs by workflow and run ID (jobs.go).
	results *resultCache
	tokens  *tokenCache          // verified bearer tokens by sha256
	ready   *telemetry.Readiness // Temporal's health for /readyz, cached (telemetry/readyz.go)
	store   jobstore.Store       // the jobs (jobstore/store.go): Temporal, or a unit test's fake
	quota   *quota.Admitter      // admission of starts under the tenants' quotas (quota/quota.go)
	// kinds are the served kinds (Options.Kinds bound to this frontend), in Options order.
	kinds []servedKind
	// tracer starts the MCP requests' spans (telemetry/tracing.go).
	tracer trace.Tracer
	// streams bounds the event streams open on this replica (events_http.go).
	streams *events.Limits
	// follow follows jobs for the event streams, sharing each run's history wait (events/follow.go).
	follow *events.Follower
	// stopStreams ends when StopStreams is called: every stream's context follows it.
	stopStreams    context.Context
	stopStreamsNow context.CancelFunc
	// export is the export kind when served (nil otherwise): the pages' download goes through
	// its download rule.
	export *exportKind
}

// New validates opts and builds the MCP server once; it is shared by all requests because the
// stateless handler builds a fresh session per request and the server holds no job state.
// The jobs live in Temporal (Options.Temporal).
func New(opts Options) (*Frontend, error) { return newFrontend(opts, nil) }

// check reports the first thing wrong with opts: a required field missing (Temporal only when
// no store is given) or an option value not among its choices.
func (opts *Options) check(haveStore bool) error {
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
func (opts *Options) defaults() {
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

// newFrontend is New over store; a nil store is the Temporal store of opts.Temporal (unit tests
// pass their in-memory fake).
func newFrontend(opts Options, store jobstore.Store) (*Frontend, error) {
	if err := opts.check(store != nil); err != nil {
		return nil, err
	}
	opts.defaults()
	f := &Frontend{opts: opts, log: opts.Logger, tokens: newTokenCache(opts.Now), results: newResultCache(),
		streams: events.NewLimits(opts.MaxStreams, opts.MaxStreamsPerCaller)}
	f.stopStreams, f.stopStreamsNow = context.WithCancel(context.Background())
	if f.store = store; store == nil {
		f.store = temporalstore.New(opts.Temporal, opts.Namespace, opts.TaskQueue, opts.DataConverter)
	}
	f.ready = telemetry.NewReadiness(f.store.CheckHealth, telemetry.ReadyTTL, opts.Now)
	var err error
	scopeNames := []string{scopeWhatJobEvents, methodSubscriptionsListen}
	for method := range taskActions {
		scopeNames = append(scopeNames, method)
	}
	if f.metrics, err = telemetry.NewMetrics(opts.Metrics, scopeNames...); err != nil {
		return nil, fmt.Errorf("frontend: metrics: %w", err)
	}
	f.follow = events.NewFollower(f.store, f.describe, f.metrics.StreamCalls)
	f.impl = &mcp.Implementation{Name: "jobgate", Title: "jobgate — durable jobs for agents", Version: Version}
	f.server = mcp.NewServer(f.impl, &mcp.ServerOptions{Instructions: serverInstructions})
	f.server.AddReceivingMiddleware(refuseUndeclared)
	f.tracer = telemetry.TracerOf(opts.TracerProvider)
	f.server.AddReceivingMiddleware(f.traceMethods)
	if f.kinds, err = serveKinds(f, opts.Kinds); err != nil {
		return nil, err
	}
	var slotKinds []quota.SlotKind
	for _, k := range f.kinds {
		if k.maxSlots != nil {
			slotKinds = append(slotKinds, quota.SlotKind{Name: k.name, MaxSlots: k.maxSlots()})
		}
	}
	f.quota = quota.New(quota.Options{Tenants: opts.Tenants, QuotaBudget: opts.QuotaBudget, QuotaDegraded: opts.QuotaDegraded,
		QuotaOvershoot: opts.QuotaOvershoot, TemporalTimeout: opts.TemporalTimeout, Now: opts.Now, Logger: f.logger},
		f.store, slotKinds, quota.Metrics{Degraded: f.metrics.QuotaDegraded,
			Rejected: func(tenant, limit string) { f.metrics.QuotaRejected(opts.Tenants, tenant, limit) }})
	f.actions = map[string]authz.Action{}
	f.taskSupport = map[string]taskSupport{}
	f.handlers = map[string]mcp.ToolHandler{}
	for _, t := range f.tools() {
		if authz.ActionScopes(t.action) == nil {
			return nil, fmt.Errorf("frontend: tool %s has no policy action", t.tool.Name) // never fail open
		}
		f.actions[t.tool.Name] = t.action
		f.taskSupport[t.tool.Name] = t.task
		f.metrics.KnownScopeFor[t.tool.Name] = true
		f.handlers[t.tool.Name] = t.handler
		f.server.AddTool(t.tool, t.handler)
	}
	if err := f.registerTasks(); err != nil {
		return nil, fmt.Errorf("frontend: tasks: %w", err)
	}
	return f, nil
}

const serverInstructions = `jobgate runs long jobs (eval runs, data exports) durably. start_* returns at once with a handle; ` +
	`keep the handle and poll get_* no sooner than poll_after_ms. Jobs survive dropped connections and ` +
	`server restarts: after any failure, call start_* again with the SAME idempotency_key and arguments ` +
	`to get the same job back. When status is awaiting_input, show needs_input.prompt to the person who ` +
	`may answer and call resume_* with its input_id and scope_digest.`

var errNoPrincipal = errors.New("no verified principal on request")

// undeclared are methods of capabilities jobgate does not declare (prompts, resources,
// completions). The SDK answers them on every server with empty lists; a client may then take
// them for supported, which the protocol forbids without the capability, so they are refused.
var undeclared = map[string]bool{
	"prompts/list": true, "prompts/get": true, "resources/list": true, "resources/templates/list": true,
	"resources/read": true, "resources/subscribe": true, "resources/unsubscribe": true, "completion/complete": true,
}

func refuseUndeclared(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if undeclared[method] {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: jobgate does not offer " + method}
		}
		return next(ctx, method, req)
	}
}

// MCPServer exposes the underlying server (for tests that snapshot tool schemas).
func (f *Frontend) MCPServer() *mcp.Server { return f.server }

// Handler returns the whole HTTP surface: /mcp, RFC 9728 metadata, /healthz, /readyz.
func (f *Frontend) Handler() http.Handler { return f.routes() }

// Routes are the ServeMux patterns Handler serves, for TraceHTTP to name spans by.
func (f *Frontend) Routes() []string { return f.routes().Patterns }
