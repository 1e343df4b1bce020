package frontend

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/events"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

func TestViewDigestIgnoresFreshLinks(t *testing.T) {
	artifacts, err := activities.OpenArtifactStore(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer artifacts.Close()
	fx := newResultFixture(t, nil)
	f, err := newFrontend(jobcore.Options{Verifier: fx.f.Opts.Verifier, Keys: taskKeys(t), ResumeKeys: resumeTestKeys(t),
		ResourceURI: "http://localhost/mcp", Kinds: []jobcore.KindSpec{jobcore.EvalKind(jobcore.EvalOptions{Artifacts: artifacts})},
		Now: func() time.Time { return fx.now }}, fx.tc)
	if err != nil {
		t.Fatal(err)
	}
	res := rcEval
	res.EpisodeLog = &contract.EpisodeSegment{Count: 10, SHA256: strings.Repeat("ab", 32)}
	fx.succeeded(t, "acme/eval/linked", "eval", "run-1", res)
	h := fx.handle("acme", "acme/eval/linked", "eval")
	// What renderView digests: get_eval's structured content, for the stream's caller.
	read := func() events.Rendered {
		res := callTool(t, f, "get_eval", rcAna, map[string]any{"handle": h})
		b, err := json.Marshal(res.StructuredContent)
		if err != nil || res.IsError {
			t.Fatalf("get_eval: %v %v", err, res.Content)
		}
		return events.Rendered{Payload: b, Digest: events.ViewDigest(b, f.viewVolatile("eval")...)}
	}
	a := read()
	fx.now = fx.now.Add(1500 * time.Millisecond)
	b := read()
	if !strings.Contains(string(a.Payload), `"episodes_url":`) || string(a.Payload) == string(b.Payload) {
		t.Fatalf("the two reads should differ only in their links:\n%s\n%s", a.Payload, b.Payload)
	}
	if a.Digest != b.Digest {
		t.Fatalf("the same terminal state digests differently a second later:\n%s\n%s", a.Payload, b.Payload)
	}
	// A change of state inside the result still counts.
	vol := f.viewVolatile("eval")
	c := events.ViewDigest(json.RawMessage(`{"status":"succeeded","result":{"passed":9,"episodes_url":"x"}}`), vol...)
	d := events.ViewDigest(json.RawMessage(`{"status":"succeeded","result":{"passed":8,"episodes_url":"y"}}`), vol...)
	e := events.ViewDigest(json.RawMessage(`{"status":"succeeded","result":"not an object"}`), vol...)
	if c == d || e == "" {
		t.Fatalf("digests %s %s %s", c, d, e)
	}
}

// TestJobEventsOverMemStore: GET /jobs/<handle>/events over the in-memory store: the view, a
// heartbeat while idle, the next view when the job's history grows, the end with the terminal
// view; a second stream of the same caller past the limit is 429 with Retry-After; another
// principal gets the unknown job's answer.
func TestJobEventsOverMemStore(t *testing.T) {
	tc := memstore.New()
	tc.RetentionAnswer = time.Hour
	f := newStoreFrontend(t, tc, jobcore.Options{Keys: taskKeys(t), Now: func() time.Time { return taskNow },
		StreamHeartbeat: 20 * time.Millisecond, MaxStreamsPerCaller: 1})
	srv := httptest.NewUnstartedServer(f.Handler())
	// serve sets a ReadTimeout (30s) and an embedder may set a WriteTimeout: a stream outlives both.
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	srv.Start()
	defer srv.Close()
	id := "acme/eval/ana/streamed"
	tc.Put(memstore.ExecInfo(t, id, "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning))
	h := f.Opts.Keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: id, Kind: "eval", Expiry: taskNow.Add(time.Hour)})
	get := func(p authz.Principal, raw string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/jobs/"+raw+"/events", nil)
		tok, err := authz.MintHS256(unitSecret, authz.MintOptions{Issuer: "iss", Audience: "http://localhost/mcp",
			Tenant: p.Tenant, Subject: p.Subject, Scopes: p.Scopes, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		// A bound on the whole exchange: a missing heartbeat or event fails the read, not the run.
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ana := authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}}
	opened := time.Now()
	resp := get(ana, h)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header)
	}
	r := bufio.NewReader(resp.Body)
	// next reads up to the next event's data, counting heartbeat comments on the way.
	next := func() (id string, view jobcore.JobView, beats int) {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			switch {
			case strings.HasPrefix(line, ": keepalive"):
				beats++
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimSpace(strings.TrimPrefix(line, "id: "))
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &view); err != nil {
					t.Fatal(err)
				}
				return id, view, beats
			}
		}
	}
	id1, v1, _ := next()
	if v1.Status != workflows.StatusRunning || v1.JobID != id || id1 == "" {
		t.Fatalf("first event %q %+v", id1, v1)
	}
	pos, err := f.Opts.Keys.OpenEventPos(id1, taskNow)
	if err != nil || pos.Subject != "ana" || pos.Jobs[0].Run != "run-"+id || pos.Jobs[0].Event != 1 {
		t.Fatalf("position %+v %v", pos, err)
	}

	// Past the per-caller limit: 429, Retry-After, quota_exceeded; another principal: not_found.
	if busy := get(ana, h); busy.StatusCode != http.StatusTooManyRequests || busy.Header.Get("Retry-After") == "" {
		t.Fatalf("second stream: %d", busy.StatusCode)
	} else {
		busy.Body.Close()
	}
	bo := authz.Principal{Tenant: "acme", Subject: "bo", Scopes: []authz.Scope{authz.ScopeRead}}
	other, unknown := get(bo, h), get(bo, f.Opts.Keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/bo/none", Kind: "eval", Expiry: taskNow.Add(time.Hour)}))
	ob, ub := readAll(t, other), readAll(t, unknown)
	if other.StatusCode != http.StatusNotFound || other.StatusCode != unknown.StatusCode || ob != ub {
		t.Fatalf("other principal %d %s, unknown %d %s", other.StatusCode, ob, unknown.StatusCode, ub)
	}

	// Idle: heartbeats, past the server's read timeout; then the job fails: its view, and the end.
	for beats := 0; beats < 2 || time.Since(opened) < 3*srv.Config.WriteTimeout; {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d heartbeats (%s): %v", beats, time.Since(opened), err)
		}
		if strings.HasPrefix(line, ": keepalive") {
			beats++
		}
	}
	info := memstore.ExecInfo(t, id, "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, workflows.StatusRunning)
	info.Memo.Fields[workflows.MemoError] = memstore.Payload(t, &workflows.JobError{Code: "all_episodes_failed", Message: "all failed"})
	tc.Put(info)
	id2, v2, _ := next()
	if v2.Status != workflows.StatusFailed || id2 == id1 {
		t.Fatalf("second event %q %+v", id2, v2)
	}
	// Only the two streams' opening checks were get_eval calls; the re-renders are stream work.
	if calls, renders := testutil.ToFloat64(f.Metrics.ToolCalls.WithLabelValues("get_eval", "ok")),
		testutil.ToFloat64(f.Metrics.StreamCalls.WithLabelValues("render")); calls != 2 || renders != 2 {
		t.Fatalf("get_eval calls %v, stream renders %v; want 2 and 2", calls, renders)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(line, "data: ") {
			t.Fatalf("an event after the terminal one: %s", line)
		}
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String()
		}
	}
}

// TestListenOverMemStore: subscriptions/listen over the in-memory store: the acknowledgement
// names only the caller's tasks; a notification is the task as tasks/get returns it; the end
// of the watched task ends the stream with the listen's result; a second stream past the
// caller's limit is 429 with a quota_exceeded tool error; without the extension -32021.
func TestListenOverMemStore(t *testing.T) {
	tc := memstore.New()
	tc.RetentionAnswer = time.Hour
	f := newStoreFrontend(t, tc, jobcore.Options{Keys: taskKeys(t), Now: func() time.Time { return taskNow }, MaxStreamsPerCaller: 1})
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	id := "acme/eval/ana/listened"
	tc.Put(memstore.ExecInfo(t, id, "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning))
	tc.Put(memstore.ExecInfo(t, "globex/eval/gus/theirs", "globex", "gus", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning))
	mine := f.Opts.Keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: id, Kind: "eval", Expiry: taskNow.Add(time.Hour)})
	theirs := f.Opts.Keys.SealHandle(handle.Handle{Tenant: "globex", WorkflowID: "globex/eval/gus/theirs", Kind: "eval", Expiry: taskNow.Add(time.Hour)})
	ana := authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}}
	post := func(withExt bool) *http.Response {
		caps := map[string]any{}
		if withExt {
			caps = map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}
		}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": methodSubscriptionsListen, "params": map[string]any{
			"notifications": map[string]any{"taskIds": []string{theirs, mine, "nope"}},
			"_meta":         map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps}}})
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(string(body)))
		tok, err := authz.MintHS256(unitSecret, authz.MintOptions{Issuer: "iss", Audience: "http://localhost/mcp",
			Tenant: ana.Tenant, Subject: ana.Subject, Scopes: ana.Scopes, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", methodSubscriptionsListen)
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := post(false); r.StatusCode != http.StatusBadRequest || !strings.Contains(readAll(t, r), "-32021") {
		t.Fatalf("without the extension: %d", r.StatusCode)
	}
	resp := post(true)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	nextData := func() string {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			if strings.HasPrefix(line, "data: ") {
				return strings.TrimSpace(strings.TrimPrefix(line, "data: "))
			}
		}
	}
	if ack := nextData(); !strings.Contains(ack, `"taskIds":["`+mine+`"]`) || !strings.Contains(ack, `"io.modelcontextprotocol/subscriptionId":9`) {
		t.Fatalf("acknowledgement: %s", ack)
	}
	var note struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal([]byte(nextData()), &note); err != nil || note.Method != notificationTasks {
		t.Fatalf("notification: %+v %v", note, err)
	}
	// tasks/get of the same task, now: the same object.
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 10, "method": methodTasksGet, "params": map[string]any{"taskId": mine,
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}}})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(string(body)))
	tok, _ := authz.MintHS256(unitSecret, authz.MintOptions{Issuer: "iss", Audience: "http://localhost/mcp",
		Tenant: ana.Tenant, Subject: ana.Subject, Scopes: ana.Scopes, TTL: time.Hour})
	for k, v := range map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": methodTasksGet, "Mcp-Name": mine} {
		req.Header.Set(k, v)
	}
	gr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var get struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(readAll(t, gr)), &get); err != nil || len(get.Result) == 0 {
		t.Fatalf("tasks/get: %v", err)
	}
	var got map[string]json.RawMessage
	_ = json.Unmarshal(note.Params, &got)
	delete(got, "_meta")
	if gb, _ := json.Marshal(got); string(gb) != string(mustCanon(t, get.Result)) {
		t.Fatalf("notification params:\n%s\nwant tasks/get's\n%s", gb, get.Result)
	}
	if busy := post(true); busy.StatusCode != http.StatusTooManyRequests || busy.Header.Get("Retry-After") == "" ||
		!strings.Contains(readAll(t, busy), jobcore.CodeQuotaExceeded) {
		t.Fatalf("second listen: %d", busy.StatusCode)
	}
	info := memstore.ExecInfo(t, id, "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, workflows.StatusRunning)
	info.Memo.Fields[workflows.MemoError] = memstore.Payload(t, &workflows.JobError{Code: "cancelled", Message: "cancelled by ana"})
	tc.Put(info)
	if n := nextData(); !strings.Contains(n, `"status":"cancelled"`) {
		t.Fatalf("after the cancel: %s", n)
	}
	if end := nextData(); !strings.Contains(end, `"id":9`) || !strings.Contains(end, `"result"`) {
		t.Fatalf("the end: %s", end)
	}
}

// mustCanon re-encodes a JSON object with sorted keys.
func mustCanon(t *testing.T, b []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(m)
	return out
}

// TestStopStreamsEndsStreams: StopStreams (a server shutting down) ends an open stream, and a
// stream asked for afterwards is 503 unavailable (another replica takes it).
func TestStopStreamsEndsStreams(t *testing.T) {
	tc := memstore.New()
	f := newStoreFrontend(t, tc, jobcore.Options{Keys: taskKeys(t), Now: func() time.Time { return taskNow }})
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	id := "acme/eval/ana/stopped"
	tc.Put(memstore.ExecInfo(t, id, "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning))
	h := f.Opts.Keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: id, Kind: "eval", Expiry: taskNow.Add(time.Hour)})
	tok, err := authz.MintHS256(unitSecret, authz.MintOptions{Issuer: "iss", Audience: "http://localhost/mcp",
		Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	open := func() *bufio.Reader {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/jobs/"+h+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %v %v", resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return bufio.NewReader(resp.Body)
	}
	r := open()
	for line := ""; !strings.HasPrefix(line, "data: "); {
		if line, err = r.ReadString('\n'); err != nil {
			t.Fatalf("no first event: %v", err)
		}
	}
	f.StopStreams()
	for {
		if _, err := r.ReadString('\n'); err != nil {
			break // ended (a client timeout would fail below instead)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/jobs/"+h+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, jobcore.CodeUnavailable) {
		t.Fatalf("a stream after StopStreams: %d %s", resp.StatusCode, body)
	}
}

// TestFreshResultMembers: the result members a kind declares as sealed afresh per read are
// members of its result's JSON, so renaming one cannot silently bring back a repeated terminal
// event.
func TestFreshResultMembers(t *testing.T) {
	f := newStoreFrontend(t, memstore.New(), jobcore.Options{Kinds: jobcore.DefaultKinds()})
	for kind, result := range map[string]any{"eval": wire.EvalResultView{}, "export": wire.ExportResultView{}} {
		members := map[string]bool{}
		rt := reflect.TypeOf(result)
		for i := range rt.NumField() {
			members[strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]] = true
		}
		var fresh []string
		for _, k := range f.Kinds {
			if k.Name == kind {
				fresh = k.FreshResult
			}
		}
		if len(fresh) == 0 {
			t.Errorf("%s declares no fresh result members, but its result carries a download link", kind)
		}
		for _, m := range fresh {
			if !members[m] {
				t.Errorf("%s: fresh result member %q is not in %s's JSON", kind, m, rt.Name())
			}
		}
	}
}
