package app

import (
	"flag"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

func gatherOne(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

func TestTemporalMetricsCounterGaugeTimer(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newTemporalMetrics(reg).WithTags(map[string]string{"namespace": "default", "client_name": "temporal_go"})
	op := h.WithTags(map[string]string{"operation": "StartWorkflowExecution"})
	op.Counter("temporal_request").Inc(2)
	op.Counter("temporal_request").Inc(1)
	op.Timer("temporal_request_latency").Record(30 * time.Millisecond)
	h.Gauge("temporal_num_pollers").Update(3)
	h.Gauge("temporal_num_pollers").Update(5)
	h.Counter("worker-start.count").Inc(1) // not a Prometheus name, no temporal_ prefix

	c := gatherOne(t, reg, "temporal_request_total")
	if len(c.Metric) != 1 || c.Metric[0].GetCounter().GetValue() != 3 {
		t.Fatalf("counter: %v", c)
	}
	want := map[string]string{"namespace": "default", "client_name": "temporal_go", "operation": "StartWorkflowExecution"}
	if got := labelsOf(c.Metric[0]); len(got) != 3 || got["operation"] != want["operation"] || got["namespace"] != "default" {
		t.Fatalf("counter labels %v, want %v", got, want)
	}
	hist := gatherOne(t, reg, "temporal_request_latency_seconds")
	if hs := hist.Metric[0].GetHistogram(); hs.GetSampleCount() != 1 || hs.GetSampleSum() < 0.029 || hs.GetSampleSum() > 0.031 {
		t.Fatalf("timer: %v", hs)
	}
	if g := gatherOne(t, reg, "temporal_num_pollers"); g.Metric[0].GetGauge().GetValue() != 5 {
		t.Fatalf("gauge: %v", g)
	}
	gatherOne(t, reg, "temporal_worker_start_count_total")
}

func TestTemporalMetricsUnknownTags(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newTemporalMetrics(reg)
	h.WithTags(map[string]string{"operation": "A"}).Counter("temporal_request").Inc(1)
	// Extra tag: dropped; missing tag: empty. Neither panics.
	h.WithTags(map[string]string{"operation": "B", "surprise": "x"}).Counter("temporal_request").Inc(1)
	h.Counter("temporal_request").Inc(1)
	// Odd tag keys are sanitized; a name reused with another type is not exported, not a panic.
	h.WithTags(map[string]string{"task-queue": "q", "__reserved": "r", "9lives": "n"}).Gauge("temporal_odd").Update(1)
	h.Gauge("temporal_request_total").Update(1) // collides with the counter's exported name
	h.Timer("temporal_request_total").Record(time.Second)

	c := gatherOne(t, reg, "temporal_request_total")
	if len(c.Metric) != 3 {
		t.Fatalf("want series for A, B and \"\": %v", c.Metric)
	}
	for _, m := range c.Metric {
		if l := labelsOf(m); len(l) != 1 {
			t.Fatalf("labels %v: want only operation", l)
		}
	}
	odd := labelsOf(gatherOne(t, reg, "temporal_odd").Metric[0])
	if odd["task_queue"] != "q" || odd["reserved"] != "r" || odd["tag_9lives"] != "n" {
		t.Fatalf("sanitized labels: %v", odd)
	}
}

func TestTemporalMetricsConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newTemporalMetrics(reg)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			th := h.WithTags(map[string]string{"worker": string(rune('a' + i%4))})
			for range 200 {
				th.Counter("temporal_c").Inc(1)
				th.Gauge("temporal_g").Update(float64(i))
				th.Timer("temporal_t").Record(time.Millisecond)
				th.WithTags(map[string]string{"extra": "x"}).Counter("temporal_c").Inc(1)
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	var total float64
	for _, m := range gatherOne(t, reg, "temporal_c_total").Metric {
		total += m.GetCounter().GetValue()
	}
	if total != 32*200*2 {
		t.Fatalf("counter total %v", total)
	}
}

func TestMetricsFlagAndServer(t *testing.T) {
	var c WorkerConfig
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	c.Flags(fs)
	t.Setenv("JOBGATE_METRICS_LISTEN", "127.0.0.1:0")
	if err := BindEnv(fs); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.MetricsListen != "127.0.0.1:0" {
		t.Fatalf("MetricsListen = %q", c.MetricsListen)
	}
	m, err := startMetricsFor(c.MetricsListen, &c.Temporal, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if opts, err := c.Temporal.Options(zap.NewNop()); err != nil || opts.MetricsHandler == nil {
		t.Fatal("Temporal client options carry no metrics handler")
	}
	c.Temporal.metrics.Counter("temporal_request").Inc(1)
	resp, err := http.Get("http://" + m.addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"temporal_request_total 1", "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if off, err := startMetricsFor("", &TemporalConfig{}, zap.NewNop()); off != nil || err != nil {
		t.Fatalf("empty address: %v, %v", off, err)
	}
}
