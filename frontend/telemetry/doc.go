// Package telemetry is what the frontend tells its operators: the jobgate_* Prometheus
// collectors (metrics.go; label values only from bounded, server-defined sets), the spans of
// HTTP and MCP requests and the trace fields of log lines (tracing.go), and the cached
// readiness of the job store behind /readyz (readyz.go).
//
// It imports wire, authz and workflows (for bounded label sets); never the frontend, a store
// or a Temporal package.
package telemetry
