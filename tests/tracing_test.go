package tests

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/workflows"
)

// headerRT adds fixed headers (an agent's traceparent) to every request of a client.
type headerRT struct {
	hdr  http.Header
	base http.RoundTripper
}

func (r headerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, vs := range r.hdr {
		req.Header[k] = vs
	}
	return r.base.RoundTrip(req)
}

// tracedSession is sessionAt(p, replica i) whose every request carries hdr.
func (b *testBundle) tracedSession(p principal, i int, hdr http.Header) *mcp.ClientSession {
	b.t.Helper()
	hc := &http.Client{Transport: headerRT{hdr: hdr, base: bearerRT{token: b.token(p), base: http.DefaultTransport}}, Timeout: 30 * time.Second}
	c := mcp.NewClient(&mcp.Implementation{Name: "jobgate-test-agent", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url(i), HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	must(b.t, err)
	b.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// recordingProvider is a tracer provider of service whose spans go to exp as they end.
func recordingProvider(t *testing.T, exp *tracetest.InMemoryExporter, service string) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// TestOneTracePerRequest: an agent sends one W3C traceparent on its requests; start_export of
// a sensitive column, the steward's resume_export and the download make ONE connected trace
// (every span's parent in it) from the HTTP requests through the tools, the Temporal client
// calls, the workflow and each activity, across the frontend replicas and the worker; the
// request's and the activities' log lines carry its trace ID; no span holds a token, a handle
// or an argument's value.
func TestOneTracePerRequest(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	feTP, wkTP := recordingProvider(t, exp, app.ServiceFrontend), recordingProvider(t, exp, app.ServiceWorker)
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil)), noWorker: true,
		tracing: app.TracingWith(feTP)})
	core, wlogs := observer.New(zap.DebugLevel)
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace,
		TaskQueue: b.taskQueue, Payloads: b.payloads()}, DatasetsFile: b.datasets, ArtifactsURL: b.artifacts}, Logger: zap.New(core),
		ResumeKeys: b.resumeKeys, SigningKeys: b.signingKeys, Tracing: app.TracingWith(wkTP)}
	must(t, w.Run(context.Background()))
	t.Cleanup(func() { _ = w.Close() })

	// The agent's own span: the root every other span of the trace descends from.
	agent := recordingProvider(t, exp, "agent")
	ctx, root := agent.Tracer("agent").Start(context.Background(), "agent: export customers with emails")
	hdr := http.Header{}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hdr))
	tid := root.SpanContext().TraceID()

	csAna, csSteward := b.tracedSession(ana, 0, hdr), b.tracedSession(steward, 1, hdr)
	poll := b.session(ana, 1, "") // polling without the traceparent: traces of its own
	v := mustView(t, exStart(t, csAna, uniqueKey(t), "jsonl", []string{"id", "name", "email"}))
	waiting := exWait(t, poll, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	mustView(t, exResume(t, csSteward, waiting, "approve"))
	r := exResult(t, exWait(t, poll, v.Handle, workflows.StatusSucceeded, 60*time.Second))
	dlHdr := map[string]string{"traceparent": hdr.Get("traceparent")}
	if resp, _ := exGet(t, b.onReplica(r.DownloadURL, 1), b.token(ana), dlHdr); resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %d", resp.StatusCode)
	}
	root.End()

	// The workflow's span ends when it returns, just after the status the poll saw.
	want := []string{"agent: export customers with emails", "POST /mcp", "tools/call start_export", "tools/call resume_export",
		"StartWorkflow:" + workflows.ExportWorkflowName, "RunWorkflow:" + workflows.ExportWorkflowName,
		"RunActivity:PlanExport", "RunActivity:ExportPart", "RunActivity:FinalizeExport", "GET /artifacts/{token}"}
	var spans tracetest.SpanStubs
	eventually(t, 20*time.Second, "the workflow's span", func() bool {
		spans = inTrace(exp.GetSpans(), tid)
		return slices.ContainsFunc(spans, func(s tracetest.SpanStub) bool { return s.Name == "RunWorkflow:"+workflows.ExportWorkflowName })
	})
	t.Logf("the trace %s:\n%s", tid, renderTrace(spans))

	names := map[string]bool{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		names[s.Name] = true
		ids[s.SpanContext.SpanID()] = true
	}
	for _, n := range want {
		if !names[n] {
			t.Errorf("no span %q in the trace", n)
		}
	}
	if !slices.ContainsFunc(spans, func(s tracetest.SpanStub) bool { return strings.HasPrefix(s.Name, "UpdateWorkflow:") }) {
		t.Error("no UpdateWorkflow span: the resume is not in the trace")
	}
	for _, s := range spans {
		if s.Name != "agent: export customers with emails" && !ids[s.Parent.SpanID()] {
			t.Errorf("span %q: its parent %s is not in the trace", s.Name, s.Parent.SpanID())
		}
	}
	// Every span of the job's workflow and activities is in this trace, none in another.
	for _, s := range exp.GetSpans() {
		if attrOf(s, "temporalWorkflowID") == v.JobID && s.SpanContext.TraceID() != tid {
			t.Errorf("span %q of the job is in another trace %s", s.Name, s.SpanContext.TraceID())
		}
	}
	// Spans name things; they never hold a secret or a value the caller sent.
	secrets := []string{b.token(ana), b.token(steward), v.Handle, r.DownloadURL[strings.LastIndex(r.DownloadURL, "/")+1:], "quarterly churn"}
	for _, s := range exp.GetSpans() {
		for _, kv := range append(slices.Clone(s.Attributes), attribute.String("name", s.Name)) {
			for _, sec := range secrets {
				if strings.Contains(kv.Value.Emit(), sec) {
					t.Errorf("span %q: attribute %s holds a caller's secret or argument", s.Name, kv.Key)
				}
			}
		}
	}
	if st := spanNamed(spans, "tools/call start_export"); attrOf(st, "jobgate.tenant") != "acme" || attrOf(st, "jobgate.job_id") != v.JobID {
		t.Errorf("start_export span attributes: %v", st.Attributes)
	}

	// Log lines: the frontend's tool calls and the worker's activities carry the trace ID.
	hexID := tid.String()
	if n := b.logs.FilterMessage("tool call").FilterField(zap.String("trace_id", hexID)).Len(); n < 2 {
		t.Errorf("%d tool call log lines carry trace_id %s, want start_export's and resume_export's", n, hexID)
	}
	if n := b.logs.FilterMessage("download").FilterField(zap.String("trace_id", hexID)).Len(); n != 1 {
		t.Errorf("%d download log lines carry trace_id %s, want 1", n, hexID)
	}
	if n := wlogs.FilterMessage("export finalized").FilterField(zap.String("trace_id", hexID)).Len(); n != 1 {
		t.Errorf("%d 'export finalized' activity log lines carry trace_id %s, want 1 (all: %v)", n, hexID, wlogs.FilterMessage("export finalized").All())
	}
}

func inTrace(all tracetest.SpanStubs, tid trace.TraceID) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range all {
		if s.SpanContext.TraceID() == tid {
			out = append(out, s)
		}
	}
	return out
}

func spanNamed(spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	return tracetest.SpanStub{}
}

func attrOf(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// renderTrace draws spans as a tree, children in start order, each line the span's name and
// its service.
func renderTrace(spans tracetest.SpanStubs) string {
	kids := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if p := s.Parent.SpanID(); p.IsValid() && ids[p] {
			kids[p] = append(kids[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) }
	var sb strings.Builder
	var draw func(s tracetest.SpanStub, prefix string, last, top bool)
	draw = func(s tracetest.SpanStub, prefix string, last, top bool) {
		branch, next := "├─ ", "│  "
		if last {
			branch, next = "└─ ", "   "
		}
		if top {
			branch, next = "", ""
		}
		svc := ""
		if v, ok := s.Resource.Set().Value("service.name"); ok {
			svc = v.AsString()
		}
		fmt.Fprintf(&sb, "%s%s%s  [%s]\n", prefix, branch, s.Name, svc)
		cs := kids[s.SpanContext.SpanID()]
		slices.SortFunc(cs, byStart)
		for i, c := range cs {
			draw(c, prefix+next, i == len(cs)-1, false)
		}
	}
	slices.SortFunc(roots, byStart)
	for _, r := range roots {
		draw(r, "", true, true)
	}
	return sb.String()
}
