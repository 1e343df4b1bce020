package tests

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/jobgate/jobgate/authz"
)

// composePublished is the origin http://localhost:<published port> of s's port target.
func composePublished(t *testing.T, s types.ServiceConfig, target uint32) string {
	t.Helper()
	for _, pt := range s.Ports {
		if pt.Target == target && pt.Published != "" {
			return "http://localhost:" + pt.Published
		}
	}
	t.Fatalf("%s publishes no port for %d", s.Name, target)
	return ""
}

// TestComposeOpsParts (issue 35 §3): in the compose deployment, the workers that run the jobs
// read the frontends' tenants file and know the frontends' public URL (so a tenant's "notify"
// endpoints get events with working links); every frontend and worker sends traces to an
// OpenTelemetry Collector service whose configuration receives OTLP/HTTP on that port and puts
// it in a traces pipeline; the Web UI's codec endpoint is serve's /codec at the load balancer,
// and the frontends allow the UI's origin.
func TestComposeOpsParts(t *testing.T) {
	p := composeProject(t)
	frontends := composeServicesByCommand(p, "serve")
	if len(frontends) == 0 {
		t.Fatal("no serve service")
	}
	fe := frontends[0]
	resource, err := url.Parse(composeSetting(fe, "resource-uri"))
	must(t, err)
	public := resource.Scheme + "://" + resource.Host
	feTenants := composeConfigAt(t, p, fe, composeSetting(fe, "tenants"))
	if feTenants == "" {
		t.Fatalf("%s mounts no tenants file at %q", fe.Name, composeSetting(fe, "tenants"))
	}
	if _, err := authz.LoadTenants(feTenants); err != nil {
		t.Fatalf("the tenants file does not load: %v", err)
	}

	jobWorkers := 0
	for _, w := range composeServicesByCommand(p, "worker") {
		if q := composeSetting(w, "task-queue"); q != "" && q != composeSetting(fe, "task-queue") {
			continue // the episode worker: no jobs' workflows, so no notifications
		}
		jobWorkers++
		if f := composeConfigAt(t, p, w, composeSetting(w, "tenants")); f != feTenants {
			t.Errorf("%s: tenants file %q (mounted from %q), want the frontends' %q", w.Name, composeSetting(w, "tenants"), f, feTenants)
		}
		if got := composeSetting(w, "public-url"); got != public {
			t.Errorf("%s: public URL %q, want the frontends' public origin %q (notification links)", w.Name, got, public)
		}
	}
	if jobWorkers == 0 {
		t.Fatal("no worker on the frontends' task queue")
	}

	// Traces: every jobgate process → the collector's OTLP/HTTP receiver.
	var col types.ServiceConfig
	for _, s := range append(frontends, composeServicesByCommand(p, "worker")...) {
		ep := composeEnv(s, "OTEL_EXPORTER_OTLP_ENDPOINT")
		u, err := url.Parse(ep)
		if ep == "" || err != nil {
			t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT %q: want the collector's URL", s.Name, ep)
			continue
		}
		c, ok := p.Services[u.Hostname()]
		if !ok {
			t.Errorf("%s: traces go to %s, which is no service here", s.Name, u.Host)
			continue
		}
		col = c
		if !composeHas(c.Expose, u.Port()) {
			t.Errorf("%s: traces go to port %s, which %s does not expose (%v)", s.Name, u.Port(), c.Name, c.Expose)
		}
	}
	if col.Name == "" {
		t.Fatal("no collector")
	}
	cfgArg := ""
	for _, a := range col.Command {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			cfgArg = v
		}
	}
	cfgFile := composeConfigAt(t, p, col, cfgArg)
	if cfgFile == "" {
		t.Fatalf("%s: --config=%q is no mounted config", col.Name, cfgArg)
	}
	b, err := os.ReadFile(cfgFile)
	must(t, err)
	var cfg struct {
		Receivers map[string]struct {
			Protocols map[string]struct {
				Endpoint string `yaml:"endpoint"`
			} `yaml:"protocols"`
		} `yaml:"receivers"`
		Service struct {
			Pipelines map[string]struct {
				Receivers []string `yaml:"receivers"`
				Exporters []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	must(t, yaml.Unmarshal(b, &cfg))
	httpEP := cfg.Receivers["otlp"].Protocols["http"].Endpoint
	ep, _ := url.Parse(composeEnv(fe, "OTEL_EXPORTER_OTLP_ENDPOINT"))
	if !strings.HasSuffix(httpEP, ":"+ep.Port()) {
		t.Errorf("collector: otlp http receiver on %q, but jobgate sends to port %s", httpEP, ep.Port())
	}
	tr := cfg.Service.Pipelines["traces"]
	if !composeHas(tr.Receivers, "otlp") || len(tr.Exporters) == 0 {
		t.Errorf("collector: traces pipeline %+v, want the otlp receiver and an exporter", tr)
	}

	// The Web UI's codec endpoint is serve's /codec at the load balancer; the frontends allow the
	// UI's origin (its pages call it from the browser).
	ui := p.Services["temporal-ui"]
	if got, want := composeEnv(ui, "TEMPORAL_CODEC_ENDPOINT"), public+"/codec"; got != want {
		t.Errorf("temporal-ui: TEMPORAL_CODEC_ENDPOINT %q, want %q", got, want)
	}
	if composeEnv(ui, "TEMPORAL_CODEC_PASS_ACCESS_TOKEN") != "true" {
		t.Error("temporal-ui does not pass its user's access token to the codec endpoint")
	}
	uiOrigin := composePublished(t, ui, 8080)
	for _, s := range frontends {
		if !composeHas(strings.Split(composeSetting(s, "codec-cors-origin"), ","), uiOrigin) {
			t.Errorf("%s: --codec-cors-origin %q lacks the UI's origin %s", s.Name, composeSetting(s, "codec-cors-origin"), uiOrigin)
		}
	}
	lb, _ := composeLB(t, p)
	if got := composePublished(t, lb, 8080); got != public {
		t.Errorf("the load balancer is at %s, the codec endpoint and public URL say %s", got, public)
	}
}

func composeHas(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
