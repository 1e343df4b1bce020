package frontend

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jobgate/jobgate/frontend/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestTraceHTTP: a request's span is the child of the caller's traceparent, named by route
// (never by the path: a download token stays out), with the status; probes get none.
func TestTraceHTTP(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var seen []trace.SpanContext
	h := telemetry.TraceHTTP(tp, []string{"/mcp", "GET /artifacts/{token}", "GET /healthz"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, trace.SpanContextFromContext(r.Context()))
		w.WriteHeader(http.StatusNotFound)
	}))
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := httptest.NewRequest("GET", "/artifacts/SECRET-TOKEN", nil)
	req.Header.Set("traceparent", parent)
	h.ServeHTTP(httptest.NewRecorder(), req)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/healthz", nil))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/nowhere/x", nil))
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 (none for /healthz)", len(spans))
	}
	s := spans[0]
	if s.Name != "GET /artifacts/{token}" || s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		s.Parent.SpanID().String() != "00f067aa0ba902b7" || seen[0].SpanID() != s.SpanContext.SpanID() {
		t.Fatalf("span %q trace %s parent %s", s.Name, s.SpanContext.TraceID(), s.Parent.SpanID())
	}
	for _, kv := range s.Attributes {
		if kv.Key == "http.response.status_code" && kv.Value.AsInt64() != 404 {
			t.Fatalf("status %v", kv.Value)
		}
	}
	if spans[1].Name != "GET" {
		t.Fatalf("unrouted span named %q, want the method alone", spans[1].Name)
	}

	// Off (a no-op provider): nothing recorded, yet the caller's trace ID reaches the log fields.
	var fields int
	off := telemetry.TraceHTTP(noop.NewTracerProvider(), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fields = len(telemetry.LogTrace(r.Context()))
	}))
	req = httptest.NewRequest("POST", "/mcp", nil)
	req.Header.Set("traceparent", parent)
	off.ServeHTTP(httptest.NewRecorder(), req)
	if fields != 2 || len(telemetry.LogTrace(context.Background())) != 0 {
		t.Fatalf("log fields with traceparent and tracing off: %d", fields)
	}
}
