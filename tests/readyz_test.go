package tests

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
)

// healthCounter is the real Temporal client, counting its health checks.
type healthCounter struct {
	client.Client
	n atomic.Int64
}

func (c *healthCounter) CheckHealth(ctx context.Context, r *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	c.n.Add(1)
	return c.Client.CheckHealth(ctx, r)
}

// TestReadyzCachesTemporalHealth: a burst of unauthenticated /readyz probes costs Temporal one
// health check per second (cached, shared by concurrent probes), not one per probe.
func TestReadyzCachesTemporalHealth(t *testing.T) {
	t.Parallel()
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: namespace})
	must(t, err)
	t.Cleanup(c.Close)
	hc := &healthCounter{Client: c}
	v, err := authz.NewHS256Verifier(testIssuer, "http://localhost/mcp", []byte(randHex(32)), "")
	must(t, err)
	b := setup(t, setupOpts{noWorker: true})
	s := &app.ServeMain{Config: app.ServeConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace, TaskQueue: b.taskQueue,
		Payloads: b.payloads()},
		Listen: "127.0.0.1:0", ResourceURI: "http://localhost/mcp", Issuer: testIssuer}, Client: hc, Verifier: v, Keys: b.keys, ResumeKeys: b.resumeKeys,
		SigningKeys: b.signingKeys}
	must(t, s.Run(context.Background()))
	t.Cleanup(func() { _ = s.Close() })
	before := hc.n.Load()

	start := time.Now()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				resp, err := http.Get("http://" + s.Addr() + "/readyz")
				if err != nil {
					bad.Add(1)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if bad.Load() != 0 {
		t.Fatalf("%d probes not 200", bad.Load())
	}
	// One check per started second of the burst (plus one for a boundary crossed mid-check).
	checks := hc.n.Load() - before
	if limit := int64(elapsed/time.Second) + 2; checks > limit {
		t.Fatalf("200 probes in %s made %d health checks (limit %d)", elapsed, checks, limit)
	}
	t.Logf("200 probes in %s: %d health checks", elapsed, checks)
}
