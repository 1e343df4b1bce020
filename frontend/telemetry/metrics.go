package telemetry

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// Metric label values come only from bounded, server-defined sets: tool names, tool error codes,
// kinds, refusal reasons and HTTP status codes. Never a token, handle, tenant, subject or any
// other caller-controlled string: such a label would leak it to whoever scrapes /metrics and
// grow the series without bound.

// 401 reasons (jobgate_http_unauthorized_total{reason}).
const (
	unauthMissing = "missing" // no "Authorization: Bearer <token>" header
	UnauthInvalid = "invalid" // a bearer token the verifier refused (bad signature, expired, wrong aud, ...)
)

// Outcome codes of jobgate_tool_calls_total besides the tool error codes.
const (
	OutcomeOK            = "ok"
	OutcomeInputRequired = "input_required"
	OutcomeError         = "error" // a Go error: the client sees a JSON-RPC error
	outcomeOther         = "other" // a code not in knownCodes (never expected)
)

var knownCodes = map[string]bool{
	OutcomeOK: true, OutcomeInputRequired: true, OutcomeError: true,
	wire.CodeInvalidArgument: true, wire.CodeNotFound: true, wire.CodeInvalidHandle: true, wire.CodeHandleExpired: true,
	wire.CodeIdempotencyKeyReused: true, wire.CodeInputNotExpected: true, wire.CodeForbidden: true, wire.CodeCursorInvalid: true,
	wire.CodeCursorExpired: true, wire.CodeUnavailable: true, wire.CodeQuotaExceeded: true,
}

// metrics are the frontend's collectors. They always exist (so call sites need no nil checks);
// they are registered only when Options.Metrics is set.
type Metrics struct {
	ToolCalls     *prometheus.CounterVec
	toolLatency   *prometheus.HistogramVec
	Unauthorized  *prometheus.CounterVec
	insufficient  *prometheus.CounterVec
	jobsStarted   *prometheus.CounterVec
	downloads     *prometheus.CounterVec
	quotaRejects  *prometheus.CounterVec
	QuotaDegraded *prometheus.CounterVec   // starts decided by Options.QuotaDegraded (decision, why)
	QuotaDecided  *prometheus.CounterVec   // starts decided by their quota check, by figures (recent, check)
	QuotaChecks   *prometheus.HistogramVec // quota checks' visibility counts, by scope (tenant, owner, owners) and by (start, refresh)
	streams       *prometheus.GaugeVec     // open event streams by surface (job_events, tasks_listen)
	StreamCalls   *prometheus.CounterVec   // Temporal calls of event streams (history_wait, render)
	KnownScopeFor map[string]bool          // tool names and tasks/* methods a 403 may name
}

// newMetrics builds the collectors and registers them with reg (nil: none). scopeNames are
// the names besides tools a 403 may name (tasks/* methods, streams): 403s are counted by them.
func NewMetrics(reg prometheus.Registerer, scopeNames ...string) (*Metrics, error) {
	m := &Metrics{
		ToolCalls: counterVec("tool_calls_total",
			"MCP tool calls by tool and outcome code (ok, input_required, a tool error code, or error).",
			"tool", "code"),
		toolLatency: histogramVec("tool_call_duration_seconds",
			"MCP tool call latency by tool, from argument decoding to result.",
			"tool"),
		Unauthorized: counterVec("http_unauthorized_total",
			"HTTP 401 answers by reason: missing (no bearer token) or invalid (token refused).",
			"reason"),
		insufficient: counterVec("http_insufficient_scope_total",
			"HTTP 403 insufficient_scope answers by the tool (or tasks/* method) that needed the scope.",
			"tool"),
		jobsStarted: counterVec("jobs_started_total",
			"start_* calls that returned a job, by kind and result: created (new workflow) or existing (same idempotency key and arguments).",
			"kind", "result"),
		downloads: counterVec("downloads_total",
			"Authenticated artifact downloads by HTTP status code (200, 206, 404, 410, ...).",
			"code"),
		quotaRejects: counterVec("quota_rejections_total",
			"start_* calls refused with quota_exceeded, by tenant (a tenant named in the tenants file, else \"other\") and limit.",
			"tenant", "limit"),
		QuotaDegraded: counterVec("quota_degraded_total",
			"start_* calls whose quota check did not answer within the budget (why: budget) or met an unreachable visibility store (why: unavailable), decided by the QuotaDegraded policy: admitted (within the bounded overshoot) or refused (quota_exceeded with retry_after_ms).",
			"decision", "why"),
		QuotaDecided: counterVec("quota_decisions_total",
			"start_* calls of a tenant with quotas decided (admitted or refused) by their quota check, by the figures it used: recent (a check's figures under --quota-fresh old, far from every limit: no wait) or check (a check made after the start arrived). Starts decided by the QuotaDegraded policy count in quota_degraded_total instead.",
			"figures"),
		QuotaChecks: histogramVec("quota_check_duration_seconds",
			"Quota checks (one flight's visibility counts, shared by the starts waiting on it), by scope (tenant: its tenant-wide measures; owner: one owner's; owners: a refresh of a tenant's owners in groups) and by what took it off (start: a start that waits for it; refresh: a refresh of recent figures in the background, which starts may still wait for). Their count is the visibility load quotas add.",
			"scope", "by"),
		streams: gaugeVec("event_streams",
			"Event streams open on this replica, by surface: job_events (GET /jobs/<handle>/events) or tasks_listen (subscriptions/listen).",
			"surface"),
		StreamCalls: counterVec("event_stream_calls_total",
			"Work done for event streams: history_wait and describe are Temporal calls shared by the streams of a run on this replica (one long poll of its history, answered when it grows or after Temporal's poll interval; one Describe per view-relevant change); render is one listener's rendering of its view from that Describe (no Temporal call, but the result of a succeeded job once, cached).",
			"call"),
		KnownScopeFor: map[string]bool{},
	}
	m.streams.WithLabelValues("job_events")
	m.streams.WithLabelValues("tasks_listen")
	for _, r := range []string{unauthMissing, UnauthInvalid} {
		m.Unauthorized.WithLabelValues(r)
	}
	for _, k := range workflows.DefaultKindNames() {
		m.jobsStarted.WithLabelValues(k, "created")
		m.jobsStarted.WithLabelValues(k, "existing")
	}
	for _, c := range []int{http.StatusOK, http.StatusPartialContent, http.StatusNotFound, http.StatusGone} {
		m.downloads.WithLabelValues(strconv.Itoa(c))
	}
	for _, name := range scopeNames {
		m.KnownScopeFor[name] = true
	}
	if reg == nil {
		return m, nil
	}
	// One list per collector type (registerAll is generic over it).
	var err error
	registerAll(reg, &err, &m.ToolCalls, &m.Unauthorized, &m.insufficient, &m.jobsStarted, &m.downloads,
		&m.QuotaDegraded, &m.QuotaDecided, &m.quotaRejects, &m.StreamCalls)
	registerAll(reg, &err, &m.toolLatency, &m.QuotaChecks)
	registerAll(reg, &err, &m.streams)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// metricsNamespace prefixes every collector's name.
const metricsNamespace = "jobgate"

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help}, labels)
}

// histogramVec has the default buckets (prometheus.DefBuckets).
func histogramVec(name, help string, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Name: name, Help: help,
		Buckets: prometheus.DefBuckets}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: name, Help: help}, labels)
}

// registerAll registers each *c and replaces it with the collector register returns, until
// one fails: that error is left in *err and the rest are not registered, as a chain of ifs would.
func registerAll[C prometheus.Collector](reg prometheus.Registerer, err *error, cs ...*C) {
	for _, c := range cs {
		if *err != nil {
			return
		}
		*c, *err = register(reg, *c)
	}
}

// register registers c, or returns the collector of the same shape already registered (a second
// Frontend on one registry shares the first one's series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if old, ok := are.ExistingCollector.(C); ok {
			return old, nil
		}
	}
	return c, err
}

// toolCall records one tool call's outcome code and latency.
func (m *Metrics) ToolCall(tool, code string, d time.Duration) {
	if !knownCodes[code] {
		code = outcomeOther
	}
	m.ToolCalls.WithLabelValues(tool, code).Inc()
	m.toolLatency.WithLabelValues(tool).Observe(d.Seconds())
}

// insufficientScope records a 403 for a tool or tasks/* method; anything else is "other".
func (m *Metrics) InsufficientScope(what string) {
	if !m.KnownScopeFor[what] {
		what = outcomeOther
	}
	m.insufficient.WithLabelValues(what).Inc()
}

// jobStarted records a start_* call that returned a job.
func (m *Metrics) JobStarted(kind string, created bool) {
	result := "existing"
	if created {
		result = "created"
	}
	m.jobsStarted.WithLabelValues(kind, result).Inc()
}

// countMissingBearer counts the 401s the bearer middleware answers without calling the verifier
// (no "Bearer <token>" header; the same test the go-sdk middleware makes). Refused tokens are
// counted in verifyToken.
func (m *Metrics) CountMissingBearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fields := strings.Fields(r.Header.Get("Authorization"))
		if len(fields) != 2 || !strings.EqualFold(fields[0], "bearer") {
			m.Unauthorized.WithLabelValues(unauthMissing).Inc()
		}
		next.ServeHTTP(w, r)
	})
}

// countDownloads counts downloads by the status code the handler answered.
func (m *Metrics) CountDownloads(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		m.downloads.WithLabelValues(strconv.Itoa(sw.status)).Inc()
	})
}

// statusWriter remembers the status code written through it, for a span or a download count.
// It keeps Flush (the SDK streams SSE) and Unwrap (http.ResponseController).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if fl, ok := w.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// quotaRejected records a quota_exceeded answer. The tenant label is bounded by configuration:
// only tenants named in the tenants file appear by name; every other tenant is "other".
func (m *Metrics) QuotaRejected(t authz.Tenants, tenant, limit string) {
	if _, named := t.Tenants[tenant]; !named {
		tenant = "other"
	}
	m.quotaRejects.WithLabelValues(tenant, limit).Inc()
}

// streamOpened and streamClosed count an event stream of surface in and out.
func (m *Metrics) StreamOpened(surface string) { m.streams.WithLabelValues(surface).Inc() }
func (m *Metrics) StreamClosed(surface string) { m.streams.WithLabelValues(surface).Dec() }
