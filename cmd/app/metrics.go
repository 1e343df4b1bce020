package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
)

// metricsFlag registers --metrics-listen (env JOBGATE_METRICS_LISTEN through BindEnv).
func metricsFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "metrics-listen", "", "address serving Prometheus /metrics, e.g. 127.0.0.1:9090; empty: no metrics")
}

// metricsServer is one process's /metrics endpoint: its own registry (never the global default
// one), the Temporal SDK bridge onto it, and the HTTP server on its own listener.
type metricsServer struct {
	reg      *prometheus.Registry
	temporal client.MetricsHandler
	ln       net.Listener
	srv      *http.Server
}

// startMetrics listens on addr and serves /metrics from a fresh registry holding the Go runtime
// and process collectors; callers register theirs on reg.
func startMetrics(addr string, log *zap.Logger) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	m := &metricsServer{reg: reg, temporal: newTemporalMetrics(reg), ln: ln,
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second}}
	go func() {
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", zap.Error(err))
		}
	}()
	log.Info("metrics listening", zap.String("addr", ln.Addr().String()))
	return m, nil
}

func (m *metricsServer) addr() string {
	if m == nil {
		return ""
	}
	return m.ln.Addr().String()
}

func (m *metricsServer) close() error {
	if m == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return m.srv.Shutdown(ctx)
}

// temporalMetrics is a hand-written bridge from the Temporal SDK's client.MetricsHandler onto
// client_golang collectors (the SDK's own tally and OpenTelemetry contrib modules are not used:
// see frontend/README.md "Metrics"). Collectors are created lazily per metric name; a metric's label names
// are the sorted tag keys of its first use, fixed from then on: a later tag the metric lacks a
// label for is dropped, a label the later tags lack is "". Names get a temporal_ prefix (the
// SDK's already have it), counters a _total suffix, timers become histograms in _seconds.
type temporalMetrics struct {
	s    *temporalStore
	tags map[string]string
}

type temporalStore struct {
	reg prometheus.Registerer
	mu  sync.Mutex
	m   map[string]*temporalMetric // by exported name
}

type temporalMetric struct {
	labels []string // sorted, sanitized tag keys
	keys   []string // the original tag key of each label
	vec    any      // *prometheus.CounterVec, *prometheus.GaugeVec or *prometheus.HistogramVec, or nil when unusable
}

// temporalTimerBuckets span a fast RPC to a long poll (about 60 s).
var temporalTimerBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

func newTemporalMetrics(reg prometheus.Registerer) client.MetricsHandler {
	return &temporalMetrics{s: &temporalStore{reg: reg, m: map[string]*temporalMetric{}}}
}

// WithTags returns a handler whose metrics carry tags on top of (and overriding) h's.
func (h *temporalMetrics) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &temporalMetrics{s: h.s, tags: merged}
}

func (h *temporalMetrics) Counter(name string) client.MetricsCounter {
	vec, lv := h.s.get(sanitizeMetricName(name)+"_total", "counter", h.tags)
	if v, ok := vec.(*prometheus.CounterVec); ok {
		c := v.WithLabelValues(lv...)
		return counterFunc(func(d int64) {
			if d > 0 {
				c.Add(float64(d))
			}
		})
	}
	return counterFunc(func(int64) {})
}

func (h *temporalMetrics) Gauge(name string) client.MetricsGauge {
	vec, lv := h.s.get(sanitizeMetricName(name), "gauge", h.tags)
	if v, ok := vec.(*prometheus.GaugeVec); ok {
		return gaugeFunc(v.WithLabelValues(lv...).Set)
	}
	return gaugeFunc(func(float64) {})
}

func (h *temporalMetrics) Timer(name string) client.MetricsTimer {
	vec, lv := h.s.get(sanitizeMetricName(name)+"_seconds", "timer", h.tags)
	if v, ok := vec.(*prometheus.HistogramVec); ok {
		o := v.WithLabelValues(lv...)
		return timerFunc(func(d time.Duration) { o.Observe(d.Seconds()) })
	}
	return timerFunc(func(time.Duration) {})
}

type (
	counterFunc func(int64)
	gaugeFunc   func(float64)
	timerFunc   func(time.Duration)
)

func (f counterFunc) Inc(d int64)          { f(d) }
func (f gaugeFunc) Update(v float64)       { f(v) }
func (f timerFunc) Record(d time.Duration) { f(d) }

// get returns the collector for name (creating it from tags on first use) and the label values
// tags give it. A name already used for another metric type, or refused by the registry, yields
// a nil collector: that metric is not exported, and nothing panics.
func (s *temporalStore) get(name, typ string, tags map[string]string) (any, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.m[name]
	if !ok {
		m = s.create(name, typ, tags)
		s.m[name] = m
	}
	if m.vec == nil {
		return nil, nil
	}
	lv := make([]string, len(m.keys))
	for i, k := range m.keys {
		lv[i] = tags[k]
	}
	return m.vec, lv
}

func (s *temporalStore) create(name, typ string, tags map[string]string) *temporalMetric {
	m := &temporalMetric{}
	seen := map[string]bool{}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		l := sanitizeLabel(k)
		if seen[l] {
			continue // two tags sanitize to one label: keep the first
		}
		seen[l] = true
		m.labels, m.keys = append(m.labels, l), append(m.keys, k)
	}
	help := "Temporal Go SDK metric " + name + " (bridged)."
	var c prometheus.Collector
	switch typ {
	case "counter":
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, m.labels)
		c, m.vec = v, v
	case "gauge":
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, m.labels)
		c, m.vec = v, v
	default:
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: temporalTimerBuckets}, m.labels)
		c, m.vec = v, v
	}
	if err := s.reg.Register(c); err != nil {
		m.vec = nil
	}
	return m
}

// sanitizeMetricName maps an SDK metric name to a valid Prometheus name starting temporal_.
func sanitizeMetricName(name string) string {
	n := sanitize(name)
	if !strings.HasPrefix(n, "temporal_") {
		n = "temporal_" + strings.TrimLeft(n, "_")
	}
	return n
}

// sanitizeLabel maps a tag key to a valid label name (not reserved: no leading "__").
func sanitizeLabel(k string) string {
	l := strings.TrimLeft(sanitize(k), "_")
	if l == "" || (l[0] >= '0' && l[0] <= '9') {
		l = "tag_" + l
	}
	return l
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// startMetricsFor starts /metrics on addr (nothing when addr is empty) and points tc's Temporal
// clients at it.
func startMetricsFor(addr string, tc *TemporalConfig, log *zap.Logger) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	m, err := startMetrics(addr, log)
	if err != nil {
		return nil, err
	}
	tc.metrics = m.temporal
	return m, nil
}

// registerer is where the frontend registers its collectors: none when metrics are off.
func (m *metricsServer) registerer() prometheus.Registerer {
	if m == nil {
		return nil
	}
	return m.reg
}

// MetricsAddr is the bound /metrics address ("" when off); useful with :0.
func (m *ServeMain) MetricsAddr() string { return m.metrics.addr() }

// MetricsAddr is the bound /metrics address ("" when off); useful with :0.
func (m *WorkerMain) MetricsAddr() string { return m.metrics.addr() }
