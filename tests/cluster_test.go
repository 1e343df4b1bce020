package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// cluster is jobgate as separate OS processes: Temporal (its own process, SQLite file), two
// `serve` replicas behind a round-robin proxy process, and workers. Any process can be
// SIGKILLed and restarted; clients talk to the proxy.
type cluster struct {
	*testBundle
	t            testing.TB
	dataDir      string
	temporalAddr string
	temporal     *proc
	serveAddrs   []string
	serves       []*proc
	workers      []*proc
	proxyAddr    string
	proxy        *proc
	secretFile   string
	keysFile     string
	suitesFile   string
	tc           client.Client
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func waitTCP(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	eventually(t, within, "a listener on "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// newCluster starts Temporal, the serve replicas, nWorkers workers and the proxy.
func newCluster(t *testing.T, nWorkers int, suitesJSON string) *cluster {
	t.Helper()
	buildGo(t, jobgateTarget, lbproxyTarget) // both at once; run below finds them built
	c := &cluster{testBundle: setup(t, setupOpts{noWorker: true}), t: t, dataDir: t.TempDir(), temporalAddr: freeAddr(t)}
	dir := t.TempDir()
	c.secretFile, c.keysFile = filepath.Join(dir, "hs256"), filepath.Join(dir, "handle-keys")
	must(t, os.WriteFile(c.secretFile, c.secret, 0o600))
	must(t, os.WriteFile(c.keysFile, []byte(c.keySpec), 0o600))
	if suitesJSON != "" {
		c.suitesFile = filepath.Join(dir, "suites.json")
		must(t, os.WriteFile(c.suitesFile, []byte(suitesJSON), 0o600))
	}
	c.startTemporal()
	var err error
	c.tc, err = client.Dial(c.clientOptions(c.temporalAddr, namespace))
	must(t, err)
	t.Cleanup(c.tc.Close)
	for range 2 {
		c.serveAddrs = append(c.serveAddrs, freeAddr(t))
	}
	for i := range c.serveAddrs {
		c.serves = append(c.serves, nil)
		c.startServe(i)
	}
	for range nWorkers {
		c.startWorker()
	}
	c.proxyAddr = freeAddr(t)
	backends := make([]string, len(c.serveAddrs))
	for i, a := range c.serveAddrs {
		backends[i] = "http://" + a
	}
	c.proxy = c.run(lbproxyBinary(t), "-listen", c.proxyAddr, "-backends", strings.Join(backends, ","))
	waitTCP(t, c.proxyAddr, 20*time.Second)
	return c
}

// run starts a process with the cluster's environment (its own Temporal and task queue).
func (c *cluster) run(bin string, args ...string) *proc {
	c.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "JOBGATE_TEMPORAL_ADDRESS="+c.temporalAddr, "JOBGATE_TASK_QUEUE="+c.taskQueue,
		"JOBGATE_NAMESPACE="+namespace, "JOBGATE_RESUME_KEYS="+c.resumeKeySpec,
		"JOBGATE_SIGNING_KEYS="+c.signingKeySpec)
	cmd.Env = append(cmd.Env, c.payloadEnv()...) // the bundle's payload keys, as a deployment's processes share them
	return startProc(c.t, cmd, true)
}

func (c *cluster) startTemporal() {
	c.t.Helper()
	_, port, _ := net.SplitHostPort(c.temporalAddr)
	c.temporal = c.run(jobgateBinary(c.t), "temporal", "--data-dir", c.dataDir, "--port", port, "--ui-port", "-1")
	// It prints its addresses once the namespace and search attributes are registered.
	p := c.temporal
	eventually(c.t, 90*time.Second, "temporal to be ready", func() bool { return strings.Contains(p.logs(), "temporal "+c.temporalAddr) })
}

func (c *cluster) startServe(i int) {
	c.t.Helper()
	c.serves[i] = c.run(jobgateBinary(c.t), "serve", "--listen", c.serveAddrs[i], "--resource-uri", c.resource(),
		"--issuer", testIssuer, "--hs256-secret-file", c.secretFile, "--handle-keys-file", c.keysFile, "--suites", c.suitesFile)
	waitTCP(c.t, c.serveAddrs[i], 30*time.Second)
}

func (c *cluster) startWorker() *proc {
	c.t.Helper()
	w := c.run(jobgateBinary(c.t), "worker", "--suites", c.suitesFile, "--heartbeat-throttle", "500ms")
	c.workers = append(c.workers, w)
	return w
}

// via connects a go-sdk client as p through the proxy.
func (c *cluster) via(p principal) *mcp.ClientSession {
	c.t.Helper()
	return c.sessionAt(p, "http://"+c.proxyAddr+"/mcp", "")
}

func (c *cluster) readyz(i int) int {
	resp, err := http.Get("http://" + c.serveAddrs[i] + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestClusterReplicasBehindProxy: consecutive calls land on different replicas; the replica
// that issued a handle dies, the other resolves it, and an approval goes through the other
// replica while the first is down.
func TestClusterReplicasBehindProxy(t *testing.T) {
	testenv.Heavy(t, "spawns a Temporal server, jobgate processes and a proxy")
	t.Parallel()
	c := newCluster(t, 1, "")
	cs := c.via(ana)
	v := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 101, map[string]any{"episode_ms": 0})))
	w := waitStatus(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	g := mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v.Handle}))
	if g.JobID != v.JobID || g.Handle == "" {
		t.Fatalf("get through the other replica: %+v", g)
	}
	resp, err := http.Get("http://" + c.proxyAddr + "/__lb/stats")
	must(t, err)
	var stats [2]int64
	must(t, jsonDecode(resp, &stats))
	if stats[0] == 0 || stats[1] == 0 {
		t.Fatalf("the proxy did not spread calls over both replicas: %v", stats)
	}
	c.serves[0].kill(t)
	if got := mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v.Handle})); got.Status != workflows.StatusAwaitingInput {
		t.Fatalf("with replica 0 dead: %+v", got)
	}
	approved := mustView(t, call(t, cs, "resume_eval", map[string]any{"handle": v.Handle, "input_id": w.NeedsInput.InputID,
		"scope_digest": w.NeedsInput.ScopeDigest, "decision": "approve"}))
	if approved.Status == workflows.StatusAwaitingInput {
		t.Fatalf("approval through the surviving replica: %+v", approved)
	}
	waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 60*time.Second)
	c.startServe(0)
	mustErr(t, call(t, c.via(gus), "get_eval", map[string]any{"handle": v.Handle}), jobcore.CodeNotFound)

	// The identical tools/call replayed byte for byte (one lands on each replica): one job.
	key := uniqueKey(t) + "-replay"
	body := modernCall("start_eval", `{"idempotency_key":"`+key+`","suite":"demo","episodes":1,"params":{"episode_ms":0}}`, "2026-07-28")
	var answers []string
	for range 2 {
		resp, b := postMCPCtx(context.Background(), t, http.DefaultClient, "http://"+c.proxyAddr+"/mcp", "Bearer "+c.token(ana), body,
			"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "start_eval")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("replay: %d %s", resp.StatusCode, b)
		}
		answers = append(answers, b)
	}
	if !strings.Contains(answers[0], `"created":true`) || !strings.Contains(answers[1], `"created":false`) {
		t.Fatalf("replayed start: %s / %s", answers[0], answers[1])
	}
	mustErr(t, call(t, cs, "start_eval", startArgs(key, 2, nil)), jobcore.CodeIdempotencyKeyReused)
	list, err := c.tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace,
		Query: "WorkflowId = 'acme/eval/ana/" + key + "'"})
	must(t, err)
	if n := len(list.GetExecutions()); n != 1 {
		t.Fatalf("%d workflows for a replayed start", n)
	}
}

// TestClusterTemporalRestart: Temporal itself is SIGKILLed mid-job and mid-approval and restarted
// on its file database. While it is down /readyz is 503 and tools answer unavailable (retryable);
// afterwards handles issued before still work and both jobs finish.
func TestClusterTemporalRestart(t *testing.T) {
	testenv.Heavy(t, "spawns a Temporal server, jobgate processes and a proxy")
	t.Parallel()
	c := newCluster(t, 1, "")
	cs := c.via(ana)
	running := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t)+"-run", 40, map[string]any{"episode_ms": 300, "fail_rate": 0})))
	waiting := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t)+"-wait", 101, map[string]any{"episode_ms": 0})))
	w := waitStatus(t, cs, waiting.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	eventually(t, 30*time.Second, "episodes running", func() bool {
		return mustView(t, call(t, cs, "get_eval", map[string]any{"handle": running.Handle})).Progress.Done > 0
	})

	c.temporal.kill(t)
	eventually(t, 30*time.Second, "readyz 503 on both replicas", func() bool { return c.readyz(0) == 503 && c.readyz(1) == 503 })
	o := call(t, cs, "get_eval", map[string]any{"handle": running.Handle})
	if o.Err == nil || o.Err.Code != jobcore.CodeUnavailable || !o.Err.Retryable {
		t.Fatalf("get with Temporal down: %+v", o)
	}
	o = call(t, cs, "start_eval", startArgs(uniqueKey(t)+"-down", 1, nil))
	if o.Err == nil || o.Err.Code != jobcore.CodeUnavailable || !o.Err.Retryable {
		t.Fatalf("start with Temporal down: %+v", o)
	}

	c.startTemporal()
	eventually(t, 60*time.Second, "readyz 200 on both replicas", func() bool { return c.readyz(0) == 200 && c.readyz(1) == 200 })
	var approved *jobcore.JobView
	eventually(t, 60*time.Second, "the approval to go through", func() bool {
		o := call(t, cs, "resume_eval", map[string]any{"handle": waiting.Handle, "input_id": w.NeedsInput.InputID,
			"scope_digest": w.NeedsInput.ScopeDigest, "decision": "approve"})
		if o.Err != nil && o.Err.Retryable {
			return false
		}
		approved = mustView(t, o)
		return true
	})
	if approved.Status == workflows.StatusAwaitingInput {
		t.Fatalf("after restart: %+v", approved)
	}
	for _, h := range []string{running.Handle, waiting.Handle} {
		f := waitStatus(t, cs, h, workflows.StatusSucceeded, 2*time.Minute)
		if f.Progress.Done+f.Progress.Failed != f.Progress.Total {
			t.Fatalf("totals after a Temporal restart: %+v", f.Progress)
		}
	}
	// The start refused while Temporal was down started nothing.
	if _, err := c.tc.DescribeWorkflowExecution(context.Background(), "acme/eval/ana/"+uniqueKey(t)+"-down", ""); err == nil {
		t.Fatal("a start answered unavailable left a job behind")
	}
}

// TestClusterConnectionStorm: 64 agents poll their jobs through the proxy while it drops every
// connection at once, twice. Each recovers by key or handle; visibility shows exactly 64 jobs.
func TestClusterConnectionStorm(t *testing.T) {
	testenv.Heavy(t, "spawns a Temporal server, jobgate processes and a proxy")
	t.Parallel()
	c := newCluster(t, 1, "")
	const agents = 64
	prefix := uniqueKey(t)
	type result struct {
		id       string
		recovers int
		err      error
	}
	results := make(chan result, agents)
	storm := make(chan struct{})
	var wg sync.WaitGroup
	for i := range agents {
		wg.Go(func() {
			key := fmt.Sprintf("%s-%02d", prefix, i)
			args := startArgs(key, 4, map[string]any{"episode_ms": 400, "fail_rate": 0})
			r := result{}
			var cs *mcp.ClientSession
			var h string
			deadline := time.Now().Add(3 * time.Minute)
			for time.Now().Before(deadline) {
				if cs == nil {
					var err error
					if cs, err = agentSession(c, ana); err != nil {
						r.recovers++
						time.Sleep(100 * time.Millisecond) // back off: the proxy is dropping connections
						continue
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				var res *mcp.CallToolResult
				var err error
				if h == "" {
					res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "start_eval", Arguments: args})
				} else {
					res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_eval", Arguments: map[string]any{"handle": h}})
				}
				cancel()
				if err != nil { // the connection dropped: reconnect and recover by key or handle
					r.recovers++
					_ = cs.Close()
					cs = nil
					continue
				}
				var v jobcore.JobView
				te, err := jobcore.ParseResult(res, &v)
				if err != nil || (te != nil && !te.Retryable) {
					r.err = fmt.Errorf("%s: %v %v", key, err, te)
					break
				}
				if te != nil {
					continue
				}
				h, r.id = v.Handle, v.JobID
				if v.Status == workflows.StatusSucceeded {
					break
				}
				if v.Status.Terminal() {
					r.err = fmt.Errorf("%s ended %s", key, v.Status)
					break
				}
				time.Sleep(time.Duration(max(v.PollAfterMS, 200)) * time.Millisecond) // the contract's poll interval
			}
			if r.err == nil && r.id == "" {
				r.err = errors.New(key + ": never got its job")
			}
			if cs != nil {
				_ = cs.Close()
			}
			results <- r
		})
	}
	var dropped []string
	go func() {
		defer close(storm)
		for range 2 {
			time.Sleep(1500 * time.Millisecond) // let polls be in flight
			resp, err := http.Post("http://"+c.proxyAddr+"/__lb/drop", "text/plain", nil)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				dropped = append(dropped, strings.TrimSpace(string(b)))
			}
		}
	}()
	stormStart := time.Now()
	wg.Wait()
	<-storm
	close(results)
	ids, recovers := map[string]bool{}, 0
	for r := range results {
		if r.err != nil {
			t.Error(r.err)
			continue
		}
		ids[r.id] = true
		recovers += r.recovers
	}
	if len(ids) != agents {
		t.Fatalf("%d distinct jobs finished, want %d", len(ids), agents)
	}
	resp, err := c.tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace,
		PageSize: 1000, Query: "WorkflowId STARTS_WITH 'acme/eval/ana/" + prefix + "' AND ExecutionStatus != 'ContinuedAsNew'"})
	must(t, err)
	if n := len(resp.GetExecutions()); n != agents {
		t.Fatalf("visibility shows %d workflows for %d agents", n, agents)
	}
	if len(dropped) != 2 {
		t.Fatalf("the proxy did not confirm two storms: %q", dropped)
	}
	t.Logf("64 agents, storms %q: %d failed calls recovered, all jobs done %s after the first storm began", dropped, recovers,
		time.Since(stormStart).Round(time.Millisecond))
}

// agentSession connects through the proxy, reporting errors instead of failing the test.
func agentSession(c *cluster, p principal) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: bearerRT{token: c.token(p), base: &http.Transport{}}, Timeout: 30 * time.Second}
	cl := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + c.proxyAddr + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
}

func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
