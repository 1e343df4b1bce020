package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

const testKey = "acme/eval/run-1#7" // shaped like a jobgate operation ID: "/" and "#" need escaping

func start(t *testing.T, dir string) (*Receiver, *Server) {
	t.Helper()
	r, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return r, s
}

type answer struct {
	status int
	score  *float64
	err    error
}

func do(ctx context.Context, method, target, key string, attempt int) answer {
	var body io.Reader
	if method == http.MethodPost {
		b, _ := json.Marshal(map[string]any{"job_id": "acme/eval/run-1", "episode": 7, "attempt": attempt, "params": map[string]any{}})
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return answer{err: err}
	}
	// Go's transport silently re-sends a request with an Idempotency-Key when a reused connection
	// breaks; a test of dropped answers must see the break instead.
	req.GetBody = nil
	if key != "" {
		req.Header.Set(IdempotencyKeyHeader, key)
	}
	req.Header.Set(AttemptHeader, strconv.Itoa(attempt))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	var v struct {
		Score *float64 `json:"score"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&v)
	return answer{status: resp.StatusCode, score: v.Score}
}

func post(t *testing.T, s *Server, key string, attempt int) answer {
	t.Helper()
	return do(context.Background(), http.MethodPost, s.URL, key, attempt)
}

func get(t *testing.T, s *Server, key string) answer {
	t.Helper()
	return do(context.Background(), http.MethodGet, s.URL+"/"+url.PathEscape(key), key, 2)
}

func wantScore(t *testing.T, a answer, status int, key string) {
	t.Helper()
	if a.err != nil || a.status != status || a.score == nil || *a.score != Score(key) {
		t.Fatalf("want %d {score: %v}, got %+v (score %v)", status, Score(key), a, a.score)
	}
}

func outcomes(as []Attempt) string {
	var out []string
	for _, a := range as {
		s := a.Method + " " + a.Outcome
		if a.Dropped {
			s += " dropped"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func TestScoreIsDeterministicAndBounded(t *testing.T) {
	if Score(testKey) != Score(testKey) || Score(testKey) < 0 || Score(testKey) >= 1 {
		t.Fatal(Score(testKey))
	}
}

func TestApplyOnceAndReconcile(t *testing.T) {
	r, s := start(t, t.TempDir())
	if a := get(t, s, testKey); a.status != http.StatusNotFound {
		t.Fatalf("GET before apply: %+v", a)
	}
	wantScore(t, post(t, s, testKey, 1), 200, testKey)
	wantScore(t, post(t, s, testKey, 2), 200, testKey) // same key: stored result, no effect
	wantScore(t, get(t, s, testKey), 200, testKey)
	if n := r.Effects()[testKey]; n != 1 {
		t.Fatalf("effects: %d", n)
	}
	got := r.AttemptsFor(testKey)
	if o := outcomes(got); o != "GET not_found, POST applied, POST replayed, GET found" {
		t.Fatalf("attempts: %s", o)
	}
	if got[1].Attempt != 1 || got[1].BodyAttempt != 1 || got[2].BodyAttempt != 2 || got[3].Attempt != 2 {
		t.Fatalf("attempt numbers: %+v", got)
	}
}

func TestAllowDuplicatesAppliesEveryPost(t *testing.T) {
	r, s := start(t, t.TempDir())
	r.AllowDuplicates(true)
	post(t, s, testKey, 1)
	post(t, s, testKey, 2)
	if n := r.Effects()[testKey]; n != 2 {
		t.Fatalf("effects: %d", n)
	}
}

func TestDropAfterApply(t *testing.T) {
	r, s := start(t, t.TempDir())
	r.DropNext(1)
	if a := post(t, s, testKey, 1); a.err == nil {
		t.Fatalf("want a dropped connection, got %+v", a)
	}
	wantScore(t, get(t, s, testKey), 200, testKey)
	if o := outcomes(r.AttemptsFor(testKey)); o != "POST applied dropped, GET found" {
		t.Fatalf("attempts: %s", o)
	}

	r.DropKey("other", 1)
	if a := post(t, s, "other", 1); a.err == nil {
		t.Fatalf("DropKey: want a dropped connection, got %+v", a)
	}
	wantScore(t, post(t, s, "other", 2), 200, "other")
	if e := r.Effects(); e["other"] != 1 || e[testKey] != 1 {
		t.Fatalf("effects: %v", e)
	}
}

func TestFailNext(t *testing.T) {
	r, s := start(t, t.TempDir())
	r.FailNext(2, 0)
	for range 2 {
		if a := post(t, s, testKey, 1); a.status != http.StatusServiceUnavailable {
			t.Fatalf("%+v", a)
		}
	}
	r.FailNext(1, http.StatusUnprocessableEntity)
	if a := post(t, s, testKey, 1); a.status != http.StatusUnprocessableEntity {
		t.Fatalf("%+v", a)
	}
	if n := r.Effects()[testKey]; n != 0 {
		t.Fatalf("an injected failure applied something: %d", n)
	}
	wantScore(t, post(t, s, testKey, 2), 200, testKey)
}

func TestStallHonoursTheClient(t *testing.T) {
	r, s := start(t, t.TempDir())
	r.StallNext(1, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan answer, 1)
	go func() { done <- do(ctx, http.MethodPost, s.URL, testKey, 1) }()
	testenv.Eventually(t, 5*time.Second, "the request to stall", func() bool { return r.Stalling() == 1 })
	cancel()
	if a := <-done; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("%+v", a)
	}
	testenv.Eventually(t, 5*time.Second, "the abandoned attempt", func() bool { return len(r.AttemptsFor(testKey)) == 1 })
	if o := outcomes(r.AttemptsFor(testKey)); o != "POST abandoned" || r.Effects()[testKey] != 0 || r.Stalling() != 0 {
		t.Fatalf("attempts %s, effects %v", o, r.Effects())
	}

	// A short stall is just slow.
	r.StallNext(1, time.Millisecond)
	wantScore(t, post(t, s, testKey, 2), 200, testKey)
}

func TestCloseEndsStalls(t *testing.T) {
	r, s := start(t, t.TempDir())
	r.StallNext(1, time.Hour)
	done := make(chan answer, 1)
	go func() { done <- post(t, s, testKey, 1) }()
	testenv.Eventually(t, 5*time.Second, "the request to stall", func() bool { return r.Stalling() == 1 })
	began := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if a := <-done; a.err == nil || time.Since(began) > 2*time.Second {
		t.Fatalf("%+v after %s", a, time.Since(began))
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	r, s := start(t, dir)
	post(t, s, testKey, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash mid-append leaves a torn line: it is not an effect, and later lines stay whole.
	f, err := os.OpenFile(filepath.Join(dir, EffectsFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"key":"torn","sco`)
	_ = f.Close()

	r2, s2 := start(t, dir)
	wantScore(t, get(t, s2, testKey), 200, testKey)
	wantScore(t, post(t, s2, testKey, 2), 200, testKey)
	wantScore(t, post(t, s2, "torn", 1), 200, "torn")
	if e := r2.Effects(); e[testKey] != 1 || e["torn"] != 1 {
		t.Fatalf("effects after restart: %v", e)
	}
	if o := outcomes(r2.AttemptsFor(testKey)); o != "POST applied, GET found, POST replayed" {
		t.Fatalf("attempts after restart: %s", o)
	}
	if len(r.Attempts()) != 1 {
		t.Fatalf("the old receiver saw %d attempts", len(r.Attempts()))
	}
	// The files reread give the same picture.
	r3, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if e := r3.Effects(); e[testKey] != 1 || e["torn"] != 1 || len(r3.Attempts()) != len(r2.Attempts()) {
		t.Fatalf("reread: %v, %d attempts", e, len(r3.Attempts()))
	}
}

func TestBadRequests(t *testing.T) {
	r, s := start(t, t.TempDir())
	if a := post(t, s, "", 1); a.status != http.StatusBadRequest {
		t.Fatalf("no key: %+v", a)
	}
	for _, body := range []string{"", "not json", `{"job_id":"j"}`, `[1]`} {
		req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader(body))
		req.Header.Set(IdempotencyKeyHeader, testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("body %q: %v %v", body, resp, err)
		}
		resp.Body.Close()
	}
	for _, p := range []string{"/a/b", "/%zz", "/%2", "/"} {
		req, _ := http.NewRequest(http.MethodGet, s.URL, nil)
		req.URL.Opaque = "/episodes" + p // sent as is, even where it is not a valid escape
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode == http.StatusOK {
			t.Fatalf("GET %s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	for _, c := range []struct{ method, path string }{{"GET", "/episodes"}, {"DELETE", "/episodes/x"}, {"GET", "/nope"}} {
		req, _ := http.NewRequest(c.method, "http://"+s.Addr+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode < 400 {
			t.Fatalf("%s %s: %v %v", c.method, c.path, resp, err)
		}
		resp.Body.Close()
	}
	if len(r.Effects()) != 0 {
		t.Fatalf("effects: %v", r.Effects())
	}
}

func TestControlEndpoint(t *testing.T) {
	r, s := start(t, t.TempDir())
	control := func(body string) int {
		resp, err := http.Post("http://"+s.Addr+ControlPath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, bad := range []string{`{"fail_next":-1}`, `{"stall":"forever"}`, `{"fail_status":200}`, `{"nope":1}`, `{`} {
		if code := control(bad); code != http.StatusBadRequest {
			t.Fatalf("%s: %d", bad, code)
		}
	}
	if code := control(`{"fail_next":1,"fail_status":500,"drop_key":"` + testKey + `"}`); code != http.StatusOK {
		t.Fatal(code)
	}
	if a := post(t, s, testKey, 1); a.status != 500 {
		t.Fatalf("%+v", a)
	}
	if a := post(t, s, testKey, 2); a.err == nil {
		t.Fatalf("want drop: %+v", a)
	}
	wantScore(t, post(t, s, testKey, 3), 200, testKey)

	var effects map[string]int
	resp, err := http.Get("http://" + s.Addr + ControlPath + "/effects")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&effects)
	resp.Body.Close()
	var attempts []Attempt
	resp, err = http.Get("http://" + s.Addr + ControlPath + "/attempts")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&attempts)
	resp.Body.Close()
	if effects[testKey] != 1 || outcomes(attempts) != "POST injected_status, POST applied dropped, POST replayed" {
		t.Fatalf("effects %v, attempts %s", effects, outcomes(attempts))
	}
	if len(r.Attempts()) != 3 {
		t.Fatal(r.Attempts())
	}
}
