package telemetry

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
)

// TracerName is the instrumentation scope of the frontend's spans.
const TracerName = "github.com/jobgate/jobgate/frontend"

// Span attribute keys of jobgate's own (the rest follow OpenTelemetry's semantic conventions).
// Spans carry names, never values a caller sent: no token, handle, path with a token in it, or
// tool argument.
const (
	AttrTenant = attribute.Key("jobgate.tenant")
	attrJobID  = attribute.Key("jobgate.job_id")
	attrCode   = attribute.Key("jobgate.code")
)

// traceContext is the W3C Trace Context propagator (traceparent, tracestate): the only format
// read from requests. Baggage is not read: it would let a caller put arbitrary data on every
// span of the trace, workflow and activities included.
var traceContext = propagation.TraceContext{}

// tracerOf is tp's tracer for the frontend, a no-op one when tp is nil.
func TracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// TraceHTTP gives every request to next one server span, a child of the caller's span when the
// request carries a W3C traceparent (tracestate kept). routes are the ServeMux patterns next
// serves: a span is named "<method> <pattern>" after the one that matches the request (just
// "<method>" when none does), so a name never holds a handle, a job ID or a download token;
// the path itself is not recorded. /healthz and /readyz get no span (probes would bury every
// trace), and neither does anything when tp is nil: next is returned as it is.
//
// With a no-op provider (tracing off) the span is not recorded, but a traceparent still puts
// the caller's trace ID on the request's log lines (LogTrace).
func TraceHTTP(tp trace.TracerProvider, routes []string, next http.Handler) http.Handler {
	if tp == nil {
		return next
	}
	tracer := TracerOf(tp)
	names := newRouteNames(routes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		route := names.route(r)
		name := r.Method
		if route != "" {
			name += " " + route
		}
		attrs := []attribute.KeyValue{attribute.String("http.request.method", r.Method)}
		if route != "" {
			attrs = append(attrs, attribute.String("http.route", route))
		}
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		if !span.IsRecording() {
			return
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	})
}

// routeNames finds the pattern of a request among the routes the handler serves: a ServeMux of
// them, asked and never served.
type routeNames struct{ mux *http.ServeMux }

func newRouteNames(routes []string) routeNames {
	mux := http.NewServeMux()
	for _, p := range routes {
		addRoute(mux, p)
	}
	return routeNames{mux}
}

// addRoute registers pattern for naming only; one that repeats or conflicts with another (the
// same pattern served by two layers) is left out rather than panic.
func addRoute(mux *http.ServeMux, pattern string) {
	defer func() { _ = recover() }()
	mux.Handle(pattern, http.NotFoundHandler())
}

// route is the pattern that matches r, without its method, or "".
func (n routeNames) route(r *http.Request) string {
	_, pattern := n.mux.Handler(r)
	if _, path, ok := strings.Cut(pattern, " "); ok {
		return path
	}
	return pattern
}

// routeMux is a ServeMux that lists its patterns (Frontend.Routes).
type RouteMux struct {
	*http.ServeMux
	Patterns []string
}

func (m *RouteMux) Handle(pattern string, h http.Handler) {
	m.ServeMux.Handle(pattern, h)
	m.Patterns = append(m.Patterns, pattern)
}

func (m *RouteMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// SpanOutcome puts a tool call's job ID and outcome code on its span.
func SpanOutcome(ctx context.Context, jobID, code string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if jobID != "" {
		span.SetAttributes(attrJobID.String(jobID))
	}
	span.SetAttributes(attrCode.String(code))
}

// LogTrace is the trace_id and span_id of ctx's span as log fields (none without a valid span
// context), so every log line of a request names the trace it belongs to.
func LogTrace(ctx context.Context) []zap.Field {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []zap.Field{zap.String("trace_id", sc.TraceID().String()), zap.String("span_id", sc.SpanID().String())}
}
