package frontend

import (
	"context"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/events"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/quota"
	"github.com/jobgate/jobgate/frontend/telemetry"
	"github.com/jobgate/jobgate/frontend/temporalstore"
	"github.com/jobgate/jobgate/frontend/wire"
)

// Version is reported to MCP clients (wire.Version; a variable so a build may stamp it).
var Version = wire.Version

// Frontend serves the MCP endpoint and its HTTP neighbours.
type Frontend struct {
	*jobcore.Core
	server *mcp.Server
	// impl is the server's identity, as the SDK puts it in each 2026-07-28 result's _meta.
	impl    *mcp.Implementation
	actions map[string]authz.Action // tool name → the action its 403 check is for
	// taskSupport is each start tool's support of the Tasks extension (toolDef.task).
	taskSupport map[string]jobcore.TaskSupport
	// handlers are the tools' handlers by name, for tasks/* to run get_* and cancel_* in process.
	handlers map[string]mcp.ToolHandler
	tokens   *tokenCache          // verified bearer tokens by sha256
	ready    *telemetry.Readiness // Temporal's health for /readyz, cached (telemetry/readyz.go)
	// tracer starts the MCP requests' spans (telemetry/tracing.go).
	tracer trace.Tracer
	// streams bounds the event streams open on this replica (events_http.go).
	streams *events.Limits
	// follow follows jobs for the event streams, sharing each run's history wait (events/follow.go).
	follow *events.Follower
	// stopStreams ends when StopStreams is called: every stream's context follows it.
	stopStreams    context.Context
	stopStreamsNow context.CancelFunc
}

// New validates opts and builds the MCP server once; it is shared by all requests because the
// stateless handler builds a fresh session per request and the server holds no job state.
// The jobs live in Temporal (Options.Temporal).
func New(opts jobcore.Options) (*Frontend, error) { return newFrontend(opts, nil) }

// newFrontend is New over store; a nil store is the Temporal store of opts.Temporal (unit tests
// pass their in-memory fake).
func newFrontend(opts jobcore.Options, store jobstore.Store) (*Frontend, error) {
	if err := opts.Check(store != nil); err != nil {
		return nil, err
	}
	opts.Defaults()
	f := &Frontend{Core: &jobcore.Core{Opts: opts, Log: opts.Logger, Results: jobcore.NewResultCache()}, tokens: newTokenCache(opts.Now),
		streams: events.NewLimits(opts.MaxStreams, opts.MaxStreamsPerCaller)}
	f.stopStreams, f.stopStreamsNow = context.WithCancel(context.Background())
	if f.Store = store; store == nil {
		f.Store = temporalstore.New(opts.Temporal, opts.Namespace, opts.TaskQueue, opts.DataConverter)
	}
	f.ready = telemetry.NewReadiness(f.Store.CheckHealth, telemetry.ReadyTTL, opts.Now)
	var err error
	scopeNames := []string{scopeWhatJobEvents, methodSubscriptionsListen}
	for method := range taskActions {
		scopeNames = append(scopeNames, method)
	}
	if f.Metrics, err = telemetry.NewMetrics(opts.Metrics, scopeNames...); err != nil {
		return nil, fmt.Errorf("frontend: metrics: %w", err)
	}
	f.follow = events.NewFollower(f.Store, f.Describe, f.Metrics.StreamCalls)
	f.impl = &mcp.Implementation{Name: "jobgate", Title: "jobgate — durable jobs for agents", Version: Version}
	f.server = mcp.NewServer(f.impl, &mcp.ServerOptions{Instructions: serverInstructions})
	f.server.AddReceivingMiddleware(refuseUndeclared)
	f.tracer = telemetry.TracerOf(opts.TracerProvider)
	f.server.AddReceivingMiddleware(f.traceMethods)
	if f.Kinds, err = jobcore.ServeKinds(f.Core, opts.Kinds); err != nil {
		return nil, err
	}
	var slotKinds []quota.SlotKind
	for _, k := range f.Kinds {
		if k.MaxSlots != nil {
			slotKinds = append(slotKinds, quota.SlotKind{Name: k.Name, MaxSlots: k.MaxSlots()})
		}
	}
	f.Quota = quota.New(quota.Options{Tenants: opts.Tenants, QuotaBudget: opts.QuotaBudget, QuotaDegraded: opts.QuotaDegraded,
		QuotaOvershoot: opts.QuotaOvershoot, QuotaFresh: opts.QuotaFresh, TemporalTimeout: opts.TemporalTimeout, Now: opts.Now, Logger: f.Logger},
		f.Store, slotKinds, quota.Metrics{Degraded: f.Metrics.QuotaDegraded, Decided: f.Metrics.QuotaDecided,
			Checks:   f.Metrics.QuotaChecks,
			Rejected: func(tenant, limit string) { f.Metrics.QuotaRejected(opts.Tenants, tenant, limit) }})
	f.actions = map[string]authz.Action{}
	f.taskSupport = map[string]jobcore.TaskSupport{}
	f.handlers = map[string]mcp.ToolHandler{}
	for _, t := range f.Tools() {
		if authz.ActionScopes(t.Action) == nil {
			return nil, fmt.Errorf("frontend: tool %s has no policy action", t.Tool.Name) // never fail open
		}
		f.actions[t.Tool.Name] = t.Action
		f.taskSupport[t.Tool.Name] = t.Task
		f.Metrics.KnownScopeFor[t.Tool.Name] = true
		f.handlers[t.Tool.Name] = t.Handler
		f.server.AddTool(t.Tool, t.Handler)
	}
	f.CreatesTaskHook = f.requestCreatesTask
	f.serveApps()
	if err := f.registerTasks(); err != nil {
		return nil, fmt.Errorf("frontend: tasks: %w", err)
	}
	f.server.AddReceivingMiddleware(inputRequiredWire)
	return f, nil
}

const serverInstructions = `jobgate runs long jobs (eval runs, data exports) durably. start_* returns at once with a handle; ` +
	`keep the handle and poll get_* no sooner than poll_after_ms. Jobs survive dropped connections and ` +
	`server restarts: after any failure, call start_* again with the SAME idempotency_key and arguments ` +
	`to get the same job back. When status is awaiting_input, show needs_input.prompt to the person who ` +
	`may answer and call resume_* with its input_id and scope_digest.`

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
