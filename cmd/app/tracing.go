package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/pages"
)

// Default service names (OTEL_SERVICE_NAME replaces them).
const (
	ServiceFrontend = "jobgate-frontend"
	ServiceWorker   = "jobgate-worker"
)

// tracingShutdownTimeout bounds the flush of the spans still buffered when a process stops.
const tracingShutdownTimeout = 5 * time.Second

// Tracing is one process role's OpenTelemetry traces: the tracer provider the frontend, the
// Temporal client and the worker start their spans with, and what flushes it on exit.
// A zero or nil Tracing is off.
type Tracing struct {
	// Provider is the tracer provider; nil when tracing is off.
	Provider trace.TracerProvider
	shutdown func(context.Context) error
}

// TracingWith is tracing on tp (tests inject one over an in-memory exporter); the caller
// flushes and shuts tp down. A nil tp is off.
func TracingWith(tp trace.TracerProvider) *Tracing { return &Tracing{Provider: tp} }

// StartTracing builds a role's tracing from the standard OpenTelemetry environment
// (cmd/app/README.md "Traces"): OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (or OTEL_TRACES_EXPORTER=otlp), over
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the default,
// or grpc), as service OTEL_SERVICE_NAME (default service); off otherwise, with
// OTEL_SDK_DISABLED=true or with OTEL_TRACES_EXPORTER=none. The exporter reads the rest of its
// OTEL_EXPORTER_OTLP_* settings (headers, TLS, timeout, compression) itself, and the provider
// OTEL_TRACES_SAMPLER and OTEL_BSP_*. An error names the variable that is wrong.
func StartTracing(ctx context.Context, service string, log *zap.Logger) (*Tracing, error) {
	return startTracing(ctx, service, log, os.LookupEnv)
}

// tracingProtocol decides from the environment whether to export and how: "" (off), "grpc"
// or "http/protobuf".
func tracingProtocol(lookup func(string) (string, bool)) (string, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return "", nil
	}
	on := get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	switch exp := get("OTEL_TRACES_EXPORTER"); exp {
	case "":
	case "none":
		return "", nil
	case "otlp":
		on = true
	default:
		return "", fmt.Errorf("OTEL_TRACES_EXPORTER=%q: jobgate exports traces with otlp (or none)", exp)
	}
	if !on {
		return "", nil
	}
	what, proto := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		what, proto = "OTEL_EXPORTER_OTLP_PROTOCOL", get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("%s=%q: want http/protobuf or grpc", what, proto)
}

func startTracing(ctx context.Context, service string, log *zap.Logger, lookup func(string) (string, bool)) (*Tracing, error) {
	proto, err := tracingProtocol(lookup)
	if err != nil || proto == "" {
		return &Tracing{}, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	var exp sdktrace.SpanExporter
	if proto == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_*: trace exporter (%s): %w", proto, err)
	}
	// The service name first, so that OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (read
	// after it) replace it.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service),
		attribute.String("service.version", frontend.Version)), resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME: %w", err)
	} else if err != nil {
		log.Warn("opentelemetry resource partly built", zap.Error(err))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// Export failures (a collector down) are the process's to log, once per failure, at warn:
	// traces are best effort and never fail a request.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", zap.Error(err)) }))
	log.Info("traces exported by OTLP", zap.String("protocol", proto), zap.String("service", serviceName(res, service)))
	return &Tracing{Provider: tp, shutdown: tp.Shutdown}, nil
}

func serviceName(res *resource.Resource, def string) string {
	if v, ok := res.Set().Value("service.name"); ok {
		return v.AsString()
	}
	return def
}

// On reports whether spans are recorded.
func (t *Tracing) On() bool { return t != nil && t.Provider != nil }

// Shutdown flushes the spans still buffered (bounded by tracingShutdownTimeout) and stops
// the exporter. Safe on nil, off, and twice.
func (t *Tracing) Shutdown() error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	err := t.shutdown(ctx)
	t.shutdown = nil
	if err != nil {
		return fmt.Errorf("opentelemetry: flush traces: %w", err)
	}
	return nil
}

// frontendProvider is the tracer provider for the frontend's HTTP and MCP spans. Off, it is a
// no-op provider: nothing is recorded, but a request's W3C traceparent still puts the caller's
// trace ID on the request's log lines (frontend.LogTrace).
func (t *Tracing) frontendProvider() trace.TracerProvider {
	if !t.On() {
		return noop.NewTracerProvider()
	}
	return t.Provider
}

// startRoleTracing starts a role's tracing from the environment into *t unless the embedder
// set one, and then notes that the role owns it (its Close flushes it).
func startRoleTracing(ctx context.Context, t **Tracing, own *bool, service string, log *zap.Logger) error {
	if *t != nil {
		return nil
	}
	tr, err := StartTracing(ctx, service, log)
	if err != nil {
		return err
	}
	*t, *own = tr, true
	return nil
}

// startTracing starts the worker's tracing (unless set) and puts its interceptor on opts.
func (m *WorkerMain) startTracing(ctx context.Context, opts *worker.Options) error {
	if err := startRoleTracing(ctx, &m.Tracing, &m.ownTracing, ServiceWorker, m.Logger); err != nil {
		return err
	}
	is, err := m.Tracing.workerInterceptors()
	opts.Interceptors = append(opts.Interceptors, is...)
	return err
}

// routes are the patterns serve's handler serves (the frontend's, and the pages' when on),
// which name its HTTP spans.
func (m *ServeMain) routes(f *frontend.Frontend) []string {
	routes := f.Routes()
	if m.pages != nil {
		routes = append(append(routes, pages.Patterns()...), frontend.PagePatterns()...)
	}
	return routes
}

// temporalTracer is the Temporal SDK's OpenTelemetry tracer (go.temporal.io/sdk/contrib/opentelemetry)
// with jobgate's log fields: every log line of a workflow or an activity through
// workflow.GetLogger / activity.GetLogger carries trace_id and span_id, as the frontend's do.
type temporalTracer struct{ interceptor.Tracer }

func (t temporalTracer) GetLogger(l sdklog.Logger, ref interceptor.TracerSpanRef) sdklog.Logger {
	s, ok := ref.(interface{ SpanContext() trace.SpanContext })
	if !ok || !s.SpanContext().IsValid() {
		return l
	}
	sc := s.SpanContext()
	return sdklog.With(l, "trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
}

// interceptor is the SDK's tracing interceptor over t's provider, nil when off. Its spans
// (StartWorkflow, UpdateWorkflow, RunWorkflow, StartActivity, RunActivity…) travel between
// processes in the Temporal headers of each call, as W3C trace context.
func (t *Tracing) interceptor() (interceptor.Interceptor, error) {
	if !t.On() {
		return nil, nil
	}
	tr, err := temporalotel.NewTracer(temporalotel.TracerOptions{Tracer: t.Provider.Tracer("go.temporal.io/sdk"),
		// Baggage stays out of the headers: a caller's baggage would ride along into history.
		DisableBaggage: true})
	if err != nil {
		return nil, fmt.Errorf("temporal tracing interceptor: %w", err)
	}
	return interceptor.NewTracingInterceptor(temporalTracer{tr}), nil
}

// clientInterceptors are the Temporal client's: the tracing interceptor's client half only,
// so a worker made from the same client (dev shares one) does not trace twice, nor with the
// frontend's provider (workerInterceptors).
func (t *Tracing) clientInterceptors() ([]interceptor.ClientInterceptor, error) {
	i, err := t.interceptor()
	if i == nil || err != nil {
		return nil, err
	}
	return []interceptor.ClientInterceptor{clientHalf{i}}, nil
}

// workerInterceptors are a worker's (worker.Options.Interceptors): the worker half.
func (t *Tracing) workerInterceptors() ([]interceptor.WorkerInterceptor, error) {
	i, err := t.interceptor()
	if i == nil || err != nil {
		return nil, err
	}
	return []interceptor.WorkerInterceptor{workerHalf{i}}, nil
}

// clientHalf hides the worker half: the SDK hands a client's interceptors that are also worker
// interceptors to every worker made from that client.
type clientHalf struct{ interceptor.ClientInterceptor }

type workerHalf struct{ interceptor.WorkerInterceptor }

// joinErr keeps err and adds the flush's.
func joinErr(err error, t *Tracing) error { return errors.Join(err, t.Shutdown()) }

// devTracing is dev's two roles' tracing in one process: the frontend's (on the shared
// client too) and the worker's, each with its own service name, as when they run apart.
type devTracing struct{ frontend, worker *Tracing }

// start starts both from the environment and puts the frontend's interceptor on the client
// options that serve and worker share.
func (d *devTracing) start(ctx context.Context, log *zap.Logger, opts *client.Options) error {
	var err error
	if d.frontend, err = StartTracing(ctx, ServiceFrontend, log); err != nil {
		return err
	}
	if d.worker, err = StartTracing(ctx, ServiceWorker, log); err != nil {
		return err
	}
	opts.Interceptors, err = d.frontend.clientInterceptors()
	return err
}

func (d *devTracing) shutdown() error { return errors.Join(d.frontend.Shutdown(), d.worker.Shutdown()) }
