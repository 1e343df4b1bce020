package tests

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// TestEventStreamSoak holds N job event streams (GET /jobs/<handle>/events) open on one replica
// while an eval runs for about the soak's duration, then checks: every listener saw every
// progress state the job's history recorded, in order, once, and the end; goroutines and heap
// stayed bounded and went back once the streams ended; the Temporal calls the streams cost
// (jobgate_event_stream_calls_total: history waits and Describes) per listener per minute; the latency from the workflow's
// stamp of a state (updated_at) to its event. JOBGATE_SOAK_LISTENERS (default 20) and
// JOBGATE_SOAK_DURATION (default 20s) size it; the run is 200 listeners for 5m.
func TestEventStreamSoak(t *testing.T) {
	testenv.Heavy(t, "holds streams open for the soak's duration")
	n, d := 20, 20*time.Second
	if v, err := strconv.Atoi(os.Getenv("JOBGATE_SOAK_LISTENERS")); err == nil && v > 0 {
		n = v
	}
	if v, err := time.ParseDuration(os.Getenv("JOBGATE_SOAK_DURATION")); err == nil && v > 0 {
		d = v
	}
	b := setup(t)
	tc := app.TemporalConfig{Address: temporalAddr, Namespace: namespace, TaskQueue: b.taskQueue, Payloads: b.payloads()}
	v, err := authz.NewHS256Verifier(testIssuer, b.resource(), b.secret, "")
	must(t, err)
	s := &app.ServeMain{Config: app.ServeConfig{Temporal: tc, Listen: "127.0.0.1:0", ResourceURI: b.resource(), Issuer: testIssuer,
		MetricsListen: "127.0.0.1:0", MaxStreams: n + 10, MaxStreamsPerCaller: n + 10, SuitesFile: b.suites},
		Verifier: v, Keys: b.keys, ResumeKeys: b.resumeKeys, SigningKeys: b.signingKeys}
	must(t, s.Run(context.Background()))
	t.Cleanup(func() { _ = s.Close() })
	url := "http://" + s.Addr() + "/mcp"

	// One episode at a time for about d (at most 100 episodes: more would ask its owner first).
	episodes := min(100, max(4, int(d/(500*time.Millisecond))))
	key := uniqueKey(t)
	args := startArgs(key, episodes, map[string]any{"episode_ms": int(d.Milliseconds()) / episodes, "fail_rate": 0})
	args["concurrency"] = 1
	tk := b.tkPost(t, url, ana, "tools/call", "start_eval", map[string]any{"name": "start_eval", "arguments": args}, tkCaps(), nil).task(t)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseG, baseHeap := runtime.NumGoroutine(), ms.HeapInuse
	calls0 := streamCalls(t, s.MetricsAddr())
	began := time.Now()

	type seen struct {
		done    []int
		final   workflows.Status
		lat     []time.Duration
		dupe    bool
		lastErr string
	}
	results := make([]seen, n)
	var wg sync.WaitGroup
	tok := b.token(ana)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := jobEvents(t, jobEventsURL(url, tk.TaskID), tok, "")
			if st.status != 200 {
				results[i].lastErr = string(st.body)
				return
			}
			var prev []byte
			first := true
			for ev := range st.events {
				var jv jobcore.JobView
				if json.Unmarshal(ev.data, &jv) != nil {
					results[i].lastErr = string(ev.data)
					return
				}
				jv.Handle = ""
				cur, _ := json.Marshal(jv)
				if slices.Equal(cur, prev) {
					results[i].dupe = true
				}
				if prev != nil {
					first = false // the first event is the state at attach time, not a change
				}
				prev = cur
				if k := len(results[i].done); k == 0 || results[i].done[k-1] != jv.Progress.Done {
					results[i].done = append(results[i].done, jv.Progress.Done)
				}
				results[i].final = jv.Status
				if !first && ev.at.After(jv.UpdatedAt) {
					results[i].lat = append(results[i].lat, ev.at.Sub(jv.UpdatedAt))
				}
			}
		}()
	}
	// Sample goroutines and heap while the streams are open.
	stop := make(chan struct{})
	var peakG int
	var peakHeap uint64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peakG, peakHeap = max(peakG, runtime.NumGoroutine()), max(peakHeap, m.HeapInuse)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-sampled
	elapsed := time.Since(began)
	calls := streamCalls(t, s.MetricsAddr())
	for k, v := range calls0 {
		calls[k] -= v
	}

	// Against history: the progress the workflow recorded.
	var want []int
	for _, e := range acHistory(t, b, "acme/eval/ana/"+key) {
		if a := e.GetWorkflowPropertiesModifiedEventAttributes(); a != nil {
			if p, ok := a.GetUpsertedMemo().GetFields()[workflows.MemoProgress]; ok {
				var pr workflows.Progress
				must(t, b.converter().FromPayload(p, &pr)) // sealed: the bundle's keys open it
				if len(want) == 0 || want[len(want)-1] != pr.Done {
					want = append(want, pr.Done)
				}
			}
		}
	}
	var lat []time.Duration
	for i, r := range results {
		if r.lastErr != "" || r.dupe || r.final != workflows.StatusSucceeded {
			t.Fatalf("listener %d: final %s, repeated a view %v, error %q", i, r.final, r.dupe, r.lastErr)
		}
		for _, w := range want {
			// A listener is owed every state from the one it attached at on (under load, the
			// last of them attach after the job has moved on).
			if len(r.done) > 0 && w >= r.done[0] && !slices.Contains(r.done, w) {
				t.Fatalf("listener %d missed progress %d: saw %v, history %v", i, w, r.done, want)
			}
		}
		lat = append(lat, r.lat...)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	// Temporal calls: the run's history waits and Describes, shared by the replica's listeners;
	// renders are per listener but read that shared Describe.
	perMin := float64(calls["history_wait"]+calls["describe"]) / float64(n) / elapsed.Minutes()
	t.Logf("%d listeners, %s: goroutines %d → peak %d (+%.1f per listener), heap %.1f MiB → peak %.1f MiB (+%.0f KiB per listener)",
		n, elapsed.Round(time.Second), baseG, peakG, float64(peakG-baseG)/float64(n), float64(baseHeap)/(1<<20), float64(peakHeap)/(1<<20),
		float64(int64(peakHeap)-int64(baseHeap))/float64(n)/1024)
	t.Logf("stream work: %v; Temporal calls (history_wait + describe) %.2f per listener per minute; history progress %v", calls, perMin, want)
	if len(lat) > 0 {
		t.Logf("state change → event latency over %d events: p50 %s, p99 %s", len(lat), lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)])
	}
	if peakG-baseG > 20*n+200 {
		t.Fatalf("goroutines grew by %d for %d listeners", peakG-baseG, n)
	}
	if int64(peakHeap)-int64(baseHeap) > int64(n)<<20+64<<20 {
		t.Fatalf("heap grew by %d bytes for %d listeners", peakHeap-baseHeap, n)
	}
	// The replica's listeners of one job share a wait per history change (or per Temporal poll
	// interval when idle) and a Describe per view change: bounded by the job's rate of change,
	// not by the number of listeners or time spent polling.
	if perMin > 60 {
		t.Fatalf("%.1f Temporal calls per listener per minute", perMin)
	}
	eventually(t, 30*time.Second, "stream goroutines to end", func() bool { return runtime.NumGoroutine() <= baseG+50 })
}

var streamCallRE = regexp.MustCompile(`(?m)^jobgate_event_stream_calls_total\{call="(\w+)"\} (\d+)`)

// streamCalls scrapes jobgate_event_stream_calls_total by call.
func streamCalls(t *testing.T, addr string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range streamCallRE.FindAllStringSubmatch(scrape(t, addr), -1) {
		out[m[1]], _ = strconv.Atoi(m[2])
	}
	return out
}
