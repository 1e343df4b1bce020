package activities

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
)

// fakeReceiver answers every request with the given status, headers and body, and remembers
// the requests.
type fakeReceiver struct {
	status int
	header map[string]string
	body   string

	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path, key, attempt, contentType string
	body                                    map[string]any
}

func newFake(t *testing.T, status int, body string) (*fakeReceiver, string) {
	f := &fakeReceiver{status: status, body: body}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL + "/v1/episodes"
}

func (f *fakeReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := recorded{method: r.Method, path: r.URL.EscapedPath(), key: r.Header.Get(IdempotencyKeyHeader),
		attempt: r.Header.Get(AttemptHeader), contentType: r.Header.Get("Content-Type")}
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	_ = json.Unmarshal(b, &rec.body)
	f.mu.Lock()
	f.reqs = append(f.reqs, rec)
	f.mu.Unlock()
	for k, v := range f.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(f.status)
	_, _ = io.WriteString(w, f.body)
}

func TestHTTPEpisode_RequestShape(t *testing.T) {
	f, url := newFake(t, 200, `{"score": 0.75, "extra": "ignored"}`)
	h := newHTTPHarness(t, url, nil)
	in := httpIn(12)
	res, err := h.run(in, nil)
	if err != nil || res.Score != 0.75 || !res.Passed {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := h.runAt(in, 2); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) != 2 {
		t.Fatalf("%+v", f.reqs)
	}
	p, g := f.reqs[0], f.reqs[1]
	wantBody := map[string]any{"job_id": httpJobID, "episode": float64(12), "attempt": float64(1), "params": map[string]any{"level": "hard"}}
	if p.method != "POST" || p.path != "/v1/episodes" || p.key != in.OperationID || p.attempt != "1" ||
		p.contentType != "application/json" || fmt.Sprint(p.body) != fmt.Sprint(wantBody) {
		t.Fatalf("POST: %+v", p)
	}
	// GET <url>/<url.PathEscape(key)>: the key is one segment, "/" and "#" escaped.
	if g.method != "GET" || g.path != "/v1/episodes/acme%2Feval%2Frun-1%2312" || g.key != in.OperationID || g.attempt != "2" {
		t.Fatalf("GET: %+v", g)
	}
}

func TestHTTPEpisode_ScoreValidation(t *testing.T) {
	for _, c := range []struct {
		body string
		want float64
		ok   bool
	}{
		{`{"score": 0.5}`, 0.5, true},
		{`{"score": -3}`, -3, true},
		{`{"score": 1e9}`, 1e9, true},
		{`{"score": 1e10}`, 0, false},
		{`{"score": -1e200}`, 0, false},
		{`{"score": "0.5"}`, 0, false},
		{`{"score": null}`, 0, false},
		{`{"points": 1}`, 0, false},
		{`{"score": NaN}`, 0, false},
		{`<html>oops</html>`, 0, false},
		{``, 0, false},
		{`{"score": 0.5} trailing`, 0, false},
		{`{"score": 0.5, "pad": "` + strings.Repeat("x", httpAnswerMaxBytes) + `"}`, 0, false},
	} {
		for _, attempt := range []int32{1, 2} { // POST's answer, and the reconcile GET's
			_, url := newFake(t, 200, c.body)
			h := newHTTPHarness(t, url, nil)
			res, err := h.runAt(httpIn(0), attempt)
			if c.ok {
				if err != nil || res.Score != c.want {
					t.Errorf("%.40q attempt %d: %+v %v", c.body, attempt, res, err)
				}
				continue
			}
			ae := appErr(t, err, errTypeEpisodeBadAnswer, true)
			if len(ae.Error()) > 1024 {
				t.Errorf("%.40q: unbounded message of %d bytes", c.body, len(ae.Error()))
			}
		}
	}
}

func TestHTTPEpisode_AnswersRetryCannotChange(t *testing.T) {
	t.Run("HugeRejectionIsQuotedBounded", func(t *testing.T) {
		_, url := newFake(t, 400, strings.Repeat("secret-row-data\n", 100_000))
		h := newHTTPHarness(t, url, nil)
		_, err := h.run(httpIn(0), nil)
		ae := appErr(t, err, contract.ErrTypeEpisodeRejected, false)
		if msg := ae.Error(); len(msg) > 1024 || !strings.Contains(msg, "400 Bad Request") || strings.Contains(msg, "\n") {
			t.Fatalf("%d bytes: %q", len(msg), msg)
		}
	})
	t.Run("RedirectIsNotFollowed", func(t *testing.T) {
		f, url := newFake(t, http.StatusTemporaryRedirect, "")
		f.header = map[string]string{"Location": "http://elsewhere.invalid/episodes"}
		h := newHTTPHarness(t, url, nil)
		_, err := h.run(httpIn(0), nil)
		ae := appErr(t, err, contract.ErrTypeEpisodeRejected, false)
		if !strings.Contains(ae.Error(), "redirects are not followed") {
			t.Fatal(ae)
		}
	})
	t.Run("ReceiverWithoutReconcile", func(t *testing.T) {
		_, url := newFake(t, http.StatusMethodNotAllowed, "POST only")
		h := newHTTPHarness(t, url, nil)
		_, err := h.runAt(httpIn(0), 2)
		ae := appErr(t, err, contract.ErrTypeEpisodeRejected, false)
		if !strings.Contains(ae.Error(), "reconcile GET") || !strings.Contains(ae.Error(), "405") {
			t.Fatal(ae)
		}
	})
	t.Run("RetryAfterIsHonoured", func(t *testing.T) {
		f, url := newFake(t, http.StatusTooManyRequests, "slow down")
		f.header = map[string]string{"Retry-After": "7"}
		h := newHTTPHarness(t, url, nil)
		_, err := h.run(httpIn(0), nil)
		if ae := appErr(t, err, errTypeEpisodeUnavailable, true); ae.NextRetryDelay() != 7*time.Second {
			t.Fatalf("next retry delay %s", ae.NextRetryDelay())
		}
		f.header = map[string]string{"Retry-After": "86400"}
		_, err = h.run(httpIn(0), nil)
		if ae := appErr(t, err, errTypeEpisodeUnavailable, true); ae.NextRetryDelay() != retryAfterMax {
			t.Fatalf("next retry delay %s", ae.NextRetryDelay())
		}
	})
	t.Run("UnsendableOperationID", func(t *testing.T) {
		f, url := newFake(t, 200, `{"score": 1}`)
		h := newHTTPHarness(t, url, nil)
		in := httpIn(0)
		in.OperationID = "bad\nkey"
		_, err := h.run(in, nil)
		appErr(t, err, contract.ErrTypeEpisodeFailed, false)
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.reqs) != 0 {
			t.Fatal("sent anyway")
		}
	})
}

func TestHTTPSuiteValidation(t *testing.T) {
	for _, c := range []struct {
		s  contract.Suite
		ok bool
	}{
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http://rx.internal:8080/episodes"}, true},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "https://rx.internal/v1/episodes/"}, true},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "ftp://rx/episodes"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "/episodes"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http:///episodes"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http:rx"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http://user:pw@rx/episodes"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http://rx/episodes?v=1"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http://rx/episodes?"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http://rx/episodes#x"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http://rx/%zz"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http://rx/e", RequestTimeout: contract.Duration(-time.Second)}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http://rx/e", RequestTimeout: contract.Duration(time.Hour)}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteHTTP, URL: "http://rx/e", RequestTimeout: contract.Duration(time.Minute), EpisodeTimeout: contract.Duration(30 * time.Second)}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteCommand, Command: []string{"x"}, URL: "http://rx/e"}, false},
		{contract.Suite{Name: "h", Kind: contract.SuiteDemo, RequestTimeout: contract.Duration(time.Second)}, false},
	} {
		cat := contract.Catalog{}
		err := cat.Add(c.s)
		if (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.s, err)
		}
		if err == nil && cat["h"].RequestTimeout.D() != contract.RequestTimeoutDefault {
			t.Errorf("%+v: request_timeout default %s", c.s, cat["h"].RequestTimeout.D())
		}
	}
}

func TestHTTPSuiteFromCatalogFile(t *testing.T) {
	path := t.TempDir() + "/suites.json"
	body := `{"suites": [{"name": "remote", "kind": "http", "url": "http://127.0.0.1:8089/episodes", "request_timeout": "5s"}]}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := contract.LoadCatalog(path)
	if err != nil {
		t.Fatal(err)
	}
	s := c["remote"]
	if s.Kind != contract.SuiteHTTP || s.URL != "http://127.0.0.1:8089/episodes" || s.RequestTimeout.D() != 5*time.Second {
		t.Fatalf("%+v", s)
	}
	if p, err := s.NormalizeParams(map[string]any{"anything": 1.0}); err != nil || p["anything"] != 1.0 {
		t.Fatalf("params pass through: %v %v", p, err)
	}
}
