package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/cmd/devtemporal"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

const (
	testIssuer = "jobgate-test"
	namespace  = "default"
)

// shortParallel and fullParallel are how many parallel tests a -short and a full run of the
// package run at a time, unless -parallel says otherwise.
const (
	shortParallel = 8
	fullParallel  = 4
)

// temporalAddr is the package's embedded Temporal server, started once in TestMain.
var temporalAddr string

// unfairTaskQueue is the one task queue of the server without task queue fairness (FIFO), for
// tests comparing the two (setupOpts.taskQueue).
const unfairTaskQueue = "tq-unfair"

func TestMain(m *testing.M) {
	// The tests share this one server and spend most of their time waiting on it (episodes,
	// progress and first-state waits, retention timers); eight at a time (four in a full run,
	// whose heavy tests spawn processes) keep two cores busy where the default two left them
	// idle (README.md, "Running the tests").
	testenv.ParallelForWaits(shortParallel, fullParallel)
	sas := workflows.SearchAttributeTypes()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := devtemporal.Start(ctx, devtemporal.Options{UIPort: -1, SearchAttributes: sas,
		UnfairTaskQueues: []string{unfairTaskQueue}})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded temporal:", err)
		os.Exit(1)
	}
	temporalAddr = srv.FrontendHostPort()
	code := m.Run()
	_ = srv.Stop()
	removeGoBuilds()
	os.Exit(code)
}

// testBundle is one isolated jobgate deployment: its own task queue, two frontend replicas
// sharing keys and token secret, and (optionally) a worker.
type testBundle struct {
	t         testing.TB
	taskQueue string
	// compression is setupOpts.compression, for the worker too.
	compression string
	secret      []byte
	keys        *handle.Keyring
	keySpec     string
	// resumeKeys seal answers (frontends) and open the seals (workers); resumeKeySpec is their
	// spec, for spawned processes (JOBGATE_RESUME_KEYS).
	resumeKeys    *handle.Keyring
	resumeKeySpec string
	// signingKeys sign decision records (frontends) and manifests (workers); signingKeySpec is
	// their spec (JOBGATE_SIGNING_KEYS).
	signingKeys    *handle.SigningKeyring
	signingKeySpec string
	temporal       client.Client
	frontends      []*app.ServeMain
	worker         *app.WorkerMain
	suites         string
	logs           *observer.ObservedLogs
	// datasets is the export catalog file shared by frontends and workers ("" with none);
	// artifacts the artifact store URL (a fresh file:// directory per bundle).
	datasets  string
	artifacts string
	queries   *queryLog
	// clock is both frontends' clock (ServeMain.Now).
	clock *testClock
	// temporalAddr is the Temporal server the bundle uses; kek its payload key-encryption key
	// and dc the data converter sealing with it (nil: payloads in clear).
	temporalAddr string
	kek          string
	dc           converter.DataConverter
	// payloadStore is where dc keeps the data keys: the artifacts URL setup made, which every
	// process of the bundle is given even where a test later moves its artifacts elsewhere.
	payloadStore string
}

// testClock is real time plus an offset a test moves forward: a TTL test steps past an expiry
// at once instead of sleeping through it, and everything else sees the time it would anyway.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// advanceTo moves the clock forward to at least t.
func (c *testClock) advanceTo(t time.Time) {
	if d := time.Until(t) - time.Duration(c.offset.Load()); d > 0 {
		c.offset.Add(int64(d))
	}
}

type setupOpts struct {
	noWorker   bool
	suitesJSON string
	handleTTL  time.Duration
	// datasetsJSON is the export catalog ({"datasets":[...]}); empty means none.
	datasetsJSON string
	downloadTTL  time.Duration
	export       jobcore.ExportTuning
	// tenants is the frontends' fairness and quota config; nil means authz.Unlimited (tests
	// share tenants, so quotas are opted into with tenants of their own).
	tenants *authz.Tenants
	// taskQueue replaces the bundle's fresh random task queue (e.g. unfairTaskQueue).
	taskQueue string
	// kinds are frontend kind specs the frontends serve instead of those of the same name
	// built from the fields above (app.ServeConfig.KindSpecs): a kind's tests configure it here.
	kinds []jobcore.KindSpec
	// verifier, when set, replaces the frontends' HS256 verifier (e.g. an authz.MultiVerifier
	// holding an identity provider's JWKS beside it), and authServer is the issuer their RFC 9728
	// metadata names (ServeConfig.Issuer). Default: HS256 of testIssuer, which the metadata names.
	verifier   authz.Verifier
	authServer string
	// tracing is the frontends' traces (ServeMain.Tracing); default: from the environment (off).
	tracing *app.Tracing
	// quotaFresh is the frontends' --quota-fresh; 0: its default.
	quotaFresh time.Duration
	// quotaBudget is the frontends' --quota-budget; 0: its default (2 s).
	quotaBudget time.Duration
	// codecOrigins is the frontends' --codec-cors-origin (the Web UI origins of /codec/*).
	codecOrigins string
	// metrics serves each frontend's /metrics on a port of its own (ServeMain.MetricsAddr).
	metrics bool
	// temporalAddr is another Temporal server than the package's (e.g. one on a file).
	temporalAddr string
	// clearPayloads turns payload encryption off (the benchmark's baseline).
	clearPayloads bool
	// compression is the bundle's --temporal-compression (default: the processes' own choice).
	compression string
}

// queryLog records every statement in-process workers send to a dataset.
type queryLog struct {
	mu sync.Mutex
	qs []string
}

func (l *queryLog) hook(dataset, q string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.qs = append(l.qs, dataset+": "+q)
}

// count is how many statements went to dataset so far.
func (l *queryLog) count(dataset string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.qs {
		if strings.HasPrefix(q, dataset+": ") {
			n++
		}
	}
	return n
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func setup(t testing.TB, o ...setupOpts) *testBundle {
	t.Helper()
	var opts setupOpts
	if len(o) > 0 {
		opts = o[0]
	}
	b := &testBundle{t: t, taskQueue: "tq-" + randHex(6), secret: []byte(randHex(32)), queries: &queryLog{},
		clock: &testClock{}}
	if opts.taskQueue != "" {
		b.taskQueue = opts.taskQueue
	}
	var err error
	key := handle.GenerateKey()
	b.keySpec = "t1:" + hex.EncodeToString(key)
	b.keys, err = handle.NewKeyring("t1", map[string][]byte{"t1": key})
	must(t, err)
	rkey := handle.GenerateKey()
	b.resumeKeySpec = "r1:" + hex.EncodeToString(rkey)
	b.resumeKeys, err = handle.NewKeyring("r1", map[string][]byte{"r1": rkey})
	must(t, err)
	b.signingKeySpec = "s1:" + handle.GenerateSigningSeedHex()
	b.signingKeys, err = handle.ParseSigningKeyring(b.signingKeySpec)
	must(t, err)
	addr := temporalAddr
	if opts.temporalAddr != "" {
		addr = opts.temporalAddr
	}
	b.temporalAddr = addr
	b.artifacts = "file://" + t.TempDir() + "/artifacts"
	// Every bundle encrypts its payloads, as a deployment does: one key-encryption key for its
	// frontends, worker and spawned processes, the data keys in its artifact store. The test's
	// own client (b.temporal) holds the same keys, so what it reads and writes is what a
	// jobgate process would.
	if !opts.clearPayloads {
		b.sealPayloads(t, b.artifacts)
	}
	b.temporal, err = client.Dial(b.clientOptions(addr, namespace))
	must(t, err)
	t.Cleanup(b.temporal.Close)
	if opts.suitesJSON != "" {
		b.suites = t.TempDir() + "/suites.json"
		must(t, os.WriteFile(b.suites, []byte(opts.suitesJSON), 0o600))
	}
	if opts.datasetsJSON != "" {
		b.datasets = t.TempDir() + "/datasets.json"
		must(t, os.WriteFile(b.datasets, []byte(opts.datasetsJSON), 0o600))
	}
	core, logs := observer.New(zap.DebugLevel)
	b.logs = logs
	log := zap.New(core)
	b.compression = opts.compression
	tc := app.TemporalConfig{Address: addr, Namespace: namespace, TaskQueue: b.taskQueue, Payloads: b.payloads(), Compression: b.compression,
		InsecureClearPayloads: opts.clearPayloads}
	tenants := opts.tenants
	if tenants == nil {
		u := authz.Unlimited()
		tenants = &u
	}
	issuer := testIssuer
	if opts.authServer != "" {
		issuer = opts.authServer
	}
	for i := 0; i < 2; i++ {
		var v authz.Verifier = opts.verifier
		if v == nil {
			hv, err := authz.NewHS256Verifier(testIssuer, b.resource(), b.secret, "")
			must(t, err)
			v = hv
		}
		s := &app.ServeMain{
			Config: app.ServeConfig{Temporal: tc, Listen: "127.0.0.1:0", ResourceURI: b.resource(), Issuer: issuer,
				UIBaseURL: "http://ui.test", SuitesFile: b.suites, HandleTTL: opts.handleTTL, DatasetsFile: b.datasets,
				ArtifactsURL: b.artifacts, DownloadTTL: opts.downloadTTL, Export: opts.export, Tenants: tenants,
				KindSpecs: opts.kinds, QuotaFresh: opts.quotaFresh, QuotaBudget: opts.quotaBudget, CodecCORSOrigins: opts.codecOrigins},
			Logger: log.Named(fmt.Sprintf("frontend%d", i)), Verifier: v, Keys: b.keys, ResumeKeys: b.resumeKeys,
			SigningKeys: b.signingKeys, Now: b.clock.Now, Tracing: opts.tracing,
		}
		if opts.metrics {
			s.Config.MetricsListen = "127.0.0.1:0"
		}
		must(t, s.Run(context.Background()))
		t.Cleanup(func() { _ = s.Close() })
		b.frontends = append(b.frontends, s)
	}
	if !opts.noWorker {
		b.startWorker()
	}
	return b
}

// resource is the shared resource URI of both replicas (as behind one load balancer).
func (b *testBundle) resource() string { return "http://localhost/mcp" }

func (b *testBundle) startWorker() {
	b.t.Helper()
	w := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: b.temporalAddr, Namespace: namespace,
		TaskQueue: b.taskQueue, Payloads: b.payloads(), Compression: b.compression, InsecureClearPayloads: b.dc == nil}, SuitesFile: b.suites,
		MaxConcurrentEpisodes: 50, DatasetsFile: b.datasets,
		ArtifactsURL: b.artifacts}, QueryHook: b.queries.hook, ResumeKeys: b.resumeKeys,
		SigningKeys: b.signingKeys}
	must(b.t, w.Run(context.Background()))
	b.worker = w
	b.t.Cleanup(func() { _ = w.Close() })
}

func (b *testBundle) stopWorker() {
	if b.worker != nil {
		_ = b.worker.Close()
		b.worker = nil
	}
}

func (b *testBundle) url(i int) string { return "http://" + b.frontends[i].Addr() + "/mcp" }

type principal struct {
	tenant, sub string
	scopes      []authz.Scope
}

var (
	ana     = principal{"acme", "ana", []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	bo      = principal{"acme", "bo", []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	steward = principal{"acme", "steward", []authz.Scope{authz.ScopeApprove}}
	ops     = principal{"acme", "ops", []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}}
	gus     = principal{"globex", "gus", []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	anaRO   = principal{"acme", "ana", []authz.Scope{authz.ScopeRead}}
)

func (b *testBundle) token(p principal) string {
	return b.tokenAt(p, time.Now(), time.Hour)
}

func (b *testBundle) tokenAt(p principal, now time.Time, ttl time.Duration) string {
	b.t.Helper()
	tok, err := authz.MintHS256(b.secret, authz.MintOptions{Issuer: testIssuer, Audience: b.resource(), Tenant: p.tenant,
		Subject: p.sub, Scopes: p.scopes, TTL: ttl, Now: func() time.Time { return now }})
	must(b.t, err)
	return tok
}

type bearerRT struct {
	token string
	base  http.RoundTripper
}

func (r bearerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+r.token)
	return r.base.RoundTrip(req)
}

// session connects a real go-sdk MCP client as p to replica i. version "" is the SDK's latest
// (2026-07-28: server/discover, no initialize); older versions run the initialize handshake.
func (b *testBundle) session(p principal, i int, version string) *mcp.ClientSession {
	b.t.Helper()
	return b.sessionAt(p, b.url(i), version)
}

// sessionAt connects to any MCP endpoint URL (e.g. a spawned `jobgate serve`).
func (b *testBundle) sessionAt(p principal, url, version string) *mcp.ClientSession {
	b.t.Helper()
	hc := &http.Client{Transport: bearerRT{token: b.token(p), base: http.DefaultTransport}, Timeout: 30 * time.Second}
	c := mcp.NewClient(&mcp.Implementation{Name: "jobgate-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	must(b.t, err)
	b.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// outcome is a tool call's result: a job view, or a tool error.
type outcome struct {
	View *jobcore.JobView
	Err  *jobcore.ToolError
	Raw  json.RawMessage
}

func call(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	must(t, err)
	return parseOutcome(t, tool, res)
}

// parseOutcome checks a result's shape the way strict clients do: one text content; on success
// structuredContent equal to it; on error no structuredContent (it would not validate against
// the tool's output schema) and the error JSON as text.
func parseOutcome(t testing.TB, tool string, res *mcp.CallToolResult) outcome {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("%s: want one text content, got %d", tool, len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content is not text", tool)
	}
	if res.IsError {
		if res.StructuredContent != nil {
			t.Fatalf("%s: error result carries structuredContent %v", tool, res.StructuredContent)
		}
		o := outcome{Raw: json.RawMessage(tc.Text), Err: &jobcore.ToolError{}}
		must(t, json.Unmarshal([]byte(tc.Text), o.Err))
		return o
	}
	raw, err := json.Marshal(res.StructuredContent)
	must(t, err)
	if !jsonEqual(tc.Text, string(raw)) {
		t.Fatalf("%s: text content differs from structuredContent", tool)
	}
	o := outcome{Raw: raw, View: &jobcore.JobView{}}
	must(t, json.Unmarshal(raw, o.View))
	return o
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func mustView(t testing.TB, o outcome) *jobcore.JobView {
	t.Helper()
	if o.Err != nil {
		t.Fatalf("want a job view, got error %s: %s", o.Err.Code, o.Err.Message)
	}
	return o.View
}

func mustErr(t testing.TB, o outcome, code string) *jobcore.ToolError {
	t.Helper()
	if o.Err == nil {
		t.Fatalf("want error %s, got job view status=%s", code, o.View.Status)
	}
	if o.Err.Code != code {
		t.Fatalf("want error %s, got %s: %s", code, o.Err.Code, o.Err.Message)
	}
	return o.Err
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it returns true or the deadline passes (the module's one
// helper for it, under the short name the package's tests use).
var eventually = testenv.Eventually

// waitStatus polls get_eval until the job reaches want.
func waitStatus(t testing.TB, cs *mcp.ClientSession, h string, want workflows.Status, within time.Duration) *jobcore.JobView {
	t.Helper()
	var v *jobcore.JobView
	eventually(t, within, "status "+string(want), func() bool {
		v = mustView(t, call(t, cs, "get_eval", map[string]any{"handle": h}))
		return v.Status == want
	})
	return v
}

func uniqueKey(t testing.TB) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + "-" + randHex(3)
}

func startArgs(key string, episodes int, params map[string]any) map[string]any {
	a := map[string]any{"idempotency_key": key, "suite": "demo", "episodes": episodes}
	if params != nil {
		a["params"] = params
	}
	return a
}

func (b *testBundle) tokenForAudience(p principal, aud string) string {
	b.t.Helper()
	tok, err := authz.MintHS256(b.secret, authz.MintOptions{Issuer: testIssuer, Audience: aud, Tenant: p.tenant,
		Subject: p.sub, Scopes: p.scopes, TTL: time.Hour})
	must(b.t, err)
	return tok
}

func handleFor(id string) handle.Handle {
	return handle.Handle{Tenant: strings.SplitN(id, "/", 2)[0], WorkflowID: id, Kind: "eval", Expiry: time.Now().Add(time.Hour)}
}
