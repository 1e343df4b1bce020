package app

import (
	"context"
	"strings"
	"testing"
)

// TestTracingProtocol: the OTEL_* environment turns OTLP export on, picks its protocol, or
// keeps it off; a value jobgate cannot honour is an error naming its variable.
func TestTracingProtocol(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		want    string
		errWord string
	}{
		{env: nil, want: ""},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, want: "http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: "http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: "grpc"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, want: "http/protobuf"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: "http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, want: ""},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, want: ""},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, errWord: "OTEL_TRACES_EXPORTER"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, errWord: "OTEL_EXPORTER_OTLP_PROTOCOL"},
	} {
		got, err := tracingProtocol(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if c.errWord != "" {
			if err == nil || !strings.Contains(err.Error(), c.errWord) {
				t.Errorf("%v: err %v, want one naming %s", c.env, err, c.errWord)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v: %q, %v; want %q", c.env, got, err, c.want)
		}
	}
}

// TestTracingOff: without the environment, tracing is off: no Temporal interceptor (histories
// and headers unchanged), and Shutdown is a no-op.
func TestTracingOff(t *testing.T) {
	tr, err := startTracing(context.Background(), ServiceFrontend, nil, func(string) (string, bool) { return "", false })
	if err != nil || tr.On() {
		t.Fatalf("off: %+v, %v", tr, err)
	}
	ci, err := tr.clientInterceptors()
	wi, err2 := tr.workerInterceptors()
	if ci != nil || wi != nil || err != nil || err2 != nil || tr.Shutdown() != nil {
		t.Fatalf("off: interceptors %v %v (%v %v)", ci, wi, err, err2)
	}
}
