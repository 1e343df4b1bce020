package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jobgate/jobgate/activities/contract"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// Headers an http episode request carries.
const (
	// IdempotencyKeyHeader carries the episode's operation ID, the same on every attempt.
	IdempotencyKeyHeader = "Idempotency-Key"
	// AttemptHeader carries the activity attempt (1, 2, …); informational only.
	AttemptHeader = "Jobgate-Attempt"
)

const (
	// httpAnswerMaxBytes bounds how much of a receiver's answer is read at all.
	httpAnswerMaxBytes = 64 << 10
	// httpSnippetBytes bounds how much of an answer an error message quotes.
	httpSnippetBytes = 256
	// retryAfterMax caps a receiver's Retry-After hint.
	retryAfterMax = 5 * time.Minute
	// operationIDMaxBytes bounds the Idempotency-Key header.
	operationIDMaxBytes = 1024
)

// Types of the retryable errors of an http episode: the next attempt reconciles first.
const (
	errTypeEpisodeRequestTimeout = "EpisodeRequestTimeout" // no answer within request_timeout
	errTypeEpisodeRequestFailed  = "EpisodeRequestFailed"  // connection refused, reset, dropped …
	errTypeEpisodeUnavailable    = "EpisodeUnavailable"    // 408, 409, 425, 429 or 5xx
	errTypeEpisodeBadAnswer      = "EpisodeBadAnswer"      // 2xx without a valid score
)

// Phases of an http episode attempt, as recorded in heartbeat details.
const (
	httpPhaseReconciling = "reconciling" // asking the receiver whether an earlier attempt applied
	httpPhaseSending     = "sending"     // POST in flight: its outcome is uncertain until answered
)

// httpAttempt is the heartbeat detail of an http episode: recorded before every request, so a
// retry after a lost answer or a worker death knows an earlier attempt may have been applied.
type httpAttempt struct {
	Phase   string `json:"phase"`
	Key     string `json:"key"`
	Attempt int32  `json:"attempt"`
}

// httpEpisodeRequest is the body POSTed for one episode.
type httpEpisodeRequest struct {
	JobID   string         `json:"job_id"`
	Episode int            `json:"episode"`
	Attempt int32          `json:"attempt"`
	Params  map[string]any `json:"params"`
}

// defaultHTTPClient is shared by every http episode of a worker that sets no HTTPClient. Each
// request is bounded by the suite's request_timeout through its context; the transport bounds
// connection set-up. Redirects are not followed: an episode must not be re-sent somewhere else.
var defaultHTTPClient = &http.Client{
	Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   contract.MaxConcurrencyDefault,
		IdleConnTimeout:       90 * time.Second,
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func (a *Activities) httpClient() *http.Client {
	if a.HTTPClient != nil {
		return a.HTTPClient
	}
	return defaultHTTPClient
}

// runHTTP runs one episode of an http suite. An attempt after the first, or one that finds an
// uncertain earlier attempt in its heartbeat details, first asks the receiver whether the
// operation was applied and returns the stored score instead of sending it again.
func (a *Activities) runHTTP(ctx context.Context, s contract.Suite, in contract.EpisodeInput) (contract.EpisodeResult, error) {
	var prior *httpAttempt
	if activity.HasHeartbeatDetails(ctx) {
		var hb httpAttempt
		if err := activity.GetHeartbeatDetails(ctx, &hb); err != nil {
			hb = httpAttempt{Phase: "unknown"} // unreadable: still evidence of an earlier attempt
		}
		prior = &hb
	}
	return a.runHTTPAttempt(ctx, s, in, activity.GetInfo(ctx).Attempt, prior)
}

// runHTTPAttempt is runHTTP with the attempt number and the earlier attempt's heartbeat (nil:
// none) given, so tests can play any attempt.
func (a *Activities) runHTTPAttempt(ctx context.Context, s contract.Suite, in contract.EpisodeInput, attempt int32, prior *httpAttempt) (contract.EpisodeResult, error) {
	key := in.OperationID
	if err := validOperationID(key); err != nil {
		return contract.EpisodeResult{}, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeEpisodeFailed, nil)
	}
	timeout := s.RequestTimeout.D()
	if timeout <= 0 {
		timeout = contract.RequestTimeoutDefault
	}
	logger := activity.GetLogger(ctx)

	if attempt > 1 || prior != nil {
		// A worker death may lose the last heartbeat, so any retry reconciles, not only one whose
		// details show an uncertain send.
		res, applied, err := a.reconcileHTTP(ctx, s.URL, key, attempt, timeout)
		if err != nil {
			return contract.EpisodeResult{}, err
		}
		if applied {
			logger.Info("http episode: earlier attempt was applied; using its stored score",
				"operation_id", key, "attempt", attempt)
			return res, nil
		}
		logger.Info("http episode: no earlier attempt was applied; sending", "operation_id", key, "attempt", attempt)
	}

	params := in.Params
	if params == nil {
		params = map[string]any{}
	}
	body, err := json.Marshal(httpEpisodeRequest{JobID: in.JobID, Episode: in.Index, Attempt: attempt, Params: params})
	if err != nil {
		return contract.EpisodeResult{}, temporal.NewNonRetryableApplicationError("encode episode request: "+err.Error(), contract.ErrTypeEpisodeFailed, nil)
	}
	ans, err := a.httpDo(ctx, http.MethodPost, s.URL, key, attempt, body, timeout,
		httpAttempt{Phase: httpPhaseSending, Key: key, Attempt: attempt})
	if err != nil {
		return contract.EpisodeResult{}, err
	}
	switch {
	case ans.status >= 200 && ans.status < 300:
		return ans.score("POST")
	case retryableStatus(ans.status):
		return contract.EpisodeResult{}, ans.retryable("POST", "outcome uncertain; the next attempt reconciles first")
	default:
		return contract.EpisodeResult{}, ans.rejected("POST", "the receiver rejected the episode")
	}
}

// reconcileHTTP asks GET <url>/<escaped key>: 200 with a score means an earlier attempt was
// applied; 404 means none was.
func (a *Activities) reconcileHTTP(ctx context.Context, base, key string, attempt int32, timeout time.Duration) (contract.EpisodeResult, bool, error) {
	ans, err := a.httpDo(ctx, http.MethodGet, reconcileURL(base, key), key, attempt, nil, timeout,
		httpAttempt{Phase: httpPhaseReconciling, Key: key, Attempt: attempt})
	if err != nil {
		return contract.EpisodeResult{}, false, err
	}
	switch {
	case ans.status == http.StatusOK:
		res, err := ans.score("reconcile GET")
		return res, err == nil, err
	case ans.status == http.StatusNotFound:
		return contract.EpisodeResult{}, false, nil
	case retryableStatus(ans.status):
		return contract.EpisodeResult{}, false, ans.retryable("reconcile GET", "nothing was sent again")
	default:
		return contract.EpisodeResult{}, false, ans.rejected("reconcile GET",
			"the receiver must answer 200 {\"score\": …} or 404 for an operation ID (activities/README.md: HTTP suites)")
	}
}

// reconcileURL is base plus one path segment: the key, escaped (so "/" and "#" become %2F, %23).
func reconcileURL(base, key string) string {
	return strings.TrimSuffix(base, "/") + "/" + url.PathEscape(key)
}

// httpAnswer is a receiver's answer, its body read up to httpAnswerMaxBytes.
type httpAnswer struct {
	method, url string
	status      int
	body        []byte
	truncated   bool
	retryAfter  string
}

// httpDo sends one request bounded by timeout and by ctx, heartbeating hb before sending and
// every heartbeatEvery while it waits. It returns an error only when no answer came: ctx's own
// error on cancel or activity timeout, else a retryable error.
func (a *Activities) httpDo(ctx context.Context, method, target, key string, attempt int32, body []byte, timeout time.Duration, hb httpAttempt) (httpAnswer, error) {
	// Record the attempt before it can have any effect: a retry then knows it must reconcile.
	activity.RecordHeartbeat(ctx, hb)

	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, target, rd)
	if err != nil {
		return httpAnswer{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s %s: %v", method, target, err), contract.ErrTypeEpisodeFailed, nil)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		// Go's transport re-sends a request carrying an Idempotency-Key by itself when a reused
		// connection breaks mid-request. Without GetBody it cannot: an uncertain POST is never
		// repeated blindly, the next attempt reconciles it.
		req.GetBody = nil
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "jobgate")
	req.Header.Set(IdempotencyKeyHeader, key)
	req.Header.Set(AttemptHeader, strconv.Itoa(int(attempt)))

	done := make(chan struct {
		ans httpAnswer
		err error
	}, 1)
	go func() {
		ans := httpAnswer{method: method, url: target}
		resp, err := a.httpClient().Do(req)
		if err == nil {
			ans.status, ans.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			ans.body, err = io.ReadAll(io.LimitReader(resp.Body, httpAnswerMaxBytes+1))
			if len(ans.body) > httpAnswerMaxBytes {
				ans.body, ans.truncated = ans.body[:httpAnswerMaxBytes], true
				err = nil
			}
			_ = resp.Body.Close()
		}
		done <- struct {
			ans httpAnswer
			err error
		}{ans, err}
	}()

	tick := time.NewTicker(a.heartbeatEvery())
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			if r.err == nil {
				return r.ans, nil
			}
			if ctx.Err() != nil {
				return httpAnswer{}, ctx.Err()
			}
			what := "outcome uncertain; the next attempt reconciles first"
			if method != http.MethodPost {
				what = "nothing was sent again"
			}
			if errors.Is(r.err, context.DeadlineExceeded) || errors.Is(rctx.Err(), context.DeadlineExceeded) {
				return httpAnswer{}, temporal.NewApplicationError(
					fmt.Sprintf("%s %s: no answer within request_timeout %s (%s)", method, target, timeout, what),
					errTypeEpisodeRequestTimeout)
			}
			return httpAnswer{}, temporal.NewApplicationError(
				fmt.Sprintf("%s %s: %s (%s)", method, target, boundedError(r.err), what), errTypeEpisodeRequestFailed)
		case <-tick.C:
			activity.RecordHeartbeat(ctx, hb)
		}
	}
}

// score reads {"score": <finite number within ±scoreLimit>} from a 2xx answer. A malformed
// answer is retryable: the next attempt reconciles and reads the stored result again.
func (ans httpAnswer) score(what string) (contract.EpisodeResult, error) {
	var v struct {
		Score *float64 `json:"score"`
		Cost  *float64 `json:"cost"`
	}
	if ans.truncated || json.Unmarshal(ans.body, &v) != nil || v.Score == nil {
		return contract.EpisodeResult{}, temporal.NewApplicationError(
			fmt.Sprintf(`%s %s answered %d without {"score": <number>}: %s`, what, ans.url, ans.status, ans.snippet()),
			errTypeEpisodeBadAnswer)
	}
	if math.IsNaN(*v.Score) || math.IsInf(*v.Score, 0) || math.Abs(*v.Score) > scoreLimit {
		return contract.EpisodeResult{}, temporal.NewApplicationError(
			fmt.Sprintf("%s %s: score must be a finite number within ±%g", what, ans.url, scoreLimit), errTypeEpisodeBadAnswer)
	}
	if v.Cost != nil {
		if msg := contract.CheckCost(*v.Cost); msg != "" {
			return contract.EpisodeResult{}, temporal.NewApplicationError(
				fmt.Sprintf("%s %s: %s", what, ans.url, msg), errTypeEpisodeBadAnswer)
		}
	}
	return contract.EpisodeResult{Score: *v.Score, Cost: v.Cost}, nil
}

// retryable is the error for 408, 409, 425, 429 and 5xx; it honours a Retry-After in seconds.
func (ans httpAnswer) retryable(what, consequence string) error {
	msg := fmt.Sprintf("%s %s answered %s (%s): %s", what, ans.url, statusText(ans.status), consequence, ans.snippet())
	var delay time.Duration
	if secs, err := strconv.Atoi(strings.TrimSpace(ans.retryAfter)); err == nil && secs > 0 {
		delay = min(time.Duration(secs)*time.Second, retryAfterMax)
	}
	return temporal.NewApplicationErrorWithOptions(msg, errTypeEpisodeUnavailable, temporal.ApplicationErrorOptions{NextRetryDelay: delay})
}

// rejected is the final error for an answer retrying cannot change.
func (ans httpAnswer) rejected(what, why string) error {
	msg := fmt.Sprintf("%s %s answered %s: %s: %s", what, ans.url, statusText(ans.status), why, ans.snippet())
	if ans.status >= 300 && ans.status < 400 {
		msg = fmt.Sprintf("%s %s answered %s: redirects are not followed; configure the final URL", what, ans.url, statusText(ans.status))
	}
	return temporal.NewNonRetryableApplicationError(msg, contract.ErrTypeEpisodeRejected, nil)
}

// snippet is the start of the body, at most httpSnippetBytes, quoted with control characters
// escaped, so an error message stays small and printable whatever the receiver sent.
func (ans httpAnswer) snippet() string {
	if len(ans.body) == 0 {
		return "(empty body)"
	}
	b := ans.body
	more := ans.truncated
	if len(b) > httpSnippetBytes {
		b, more = b[:httpSnippetBytes], true
	}
	s := strconv.Quote(strings.ToValidUTF8(string(b), "\uFFFD"))
	if more {
		s += "…"
	}
	return s
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return fmt.Sprintf("%d %s", code, t)
	}
	return strconv.Itoa(code)
}

// retryableStatus: the receiver may answer differently later.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return code >= 500 || code < 200
}

// boundedError keeps a transport error message short.
func boundedError(err error) string {
	s := err.Error()
	if len(s) > 512 {
		s = strings.ToValidUTF8(s[:512], "") + "…"
	}
	return s
}

// validOperationID: the key must travel as a header value and a path segment unchanged.
func validOperationID(key string) error {
	if key == "" || len(key) > operationIDMaxBytes {
		return fmt.Errorf("operation ID must be 1-%d bytes", operationIDMaxBytes)
	}
	for _, r := range key {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' ' {
			return fmt.Errorf("operation ID %q cannot be sent as an Idempotency-Key", key)
		}
	}
	return nil
}
