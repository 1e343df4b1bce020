package activities

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// NotifyTarget is an endpoint as the worker holds it: its config and its secret read.
type NotifyTarget struct {
	authz.NotifyEndpoint
	// Secret signs deliveries: the file's "whsec_<base64>" decoded, or its raw bytes.
	Secret []byte
}

// Notifier delivers notification events. It is its own type, not a method of Activities:
// every kind's workflows execute it, and a worker registers it once per task queue.
type Notifier struct {
	// Targets are the endpoints of a tenant that want an event type (nil: none anywhere).
	Targets func(tenant, event string) []NotifyTarget
	// PublicURL is the browser-facing base URL; the deep link is PublicURL/approvals/<job-id>.
	PublicURL string
	// Observe is told each attempt's outcome per endpoint (metrics): once per endpoint per
	// activity attempt, so an event delivered on the third try is observed as retry, retry,
	// delivered. nil for nothing. Called concurrently (a job.progress window delivers to its
	// endpoints at once).
	Observe func(endpoint, outcome string)
	// Client sends the requests; nil uses [NotifyClient]s, one per allowPrivate value, built
	// once and kept (each delivery reuses their idle connections).
	Client func(allowPrivate bool) *http.Client
	// Timeout bounds one request. Defaults to 10 seconds.
	Timeout time.Duration
	// HeartbeatEvery is how often an attempt heartbeats while a request is in flight. Defaults
	// to 2 seconds.
	HeartbeatEvery time.Duration
	// Snapshot reads a job's status and progress for job.progress (the worker reads Temporal:
	// what get_* shows); nil sends no job.progress. firstRunID names the job instance: a job
	// ID reused by a new job reads as closed.
	Snapshot func(ctx context.Context, jobID, firstRunID string) (JobSnapshot, error)
	// Now is job.progress's clock for windows; nil is time.Now.
	Now func() time.Time

	clientsMu sync.Mutex
	clients   map[bool]*http.Client
}

// MinNotifySecretLen is the fewest bytes (after decoding) a signing secret may have: the
// Standard Webhooks spec asks for 24 to 64 random bytes; a shorter one can be guessed offline
// from any one signed delivery.
const MinNotifySecretLen = 24

// ReadNotifySecret reads an endpoint's secret file: "whsec_<base64>" (Standard Webhooks), or any
// other content taken as raw bytes. Surrounding whitespace is ignored. Either way it must hold
// at least [MinNotifySecretLen] bytes.
func ReadNotifySecret(raw []byte) ([]byte, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return nil, errors.New("the secret file is empty")
	}
	b := []byte(s)
	if strings.HasPrefix(s, "whsec_") {
		var err error
		b, err = base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(b) == 0 {
			return nil, errors.New("the secret starts with whsec_ but the rest is not base64")
		}
	}
	if len(b) < MinNotifySecretLen {
		return nil, fmt.Errorf("the secret has %d bytes, want at least %d random ones (e.g. whsec_ and the base64 of 32 random bytes)", len(b), MinNotifySecretLen)
	}
	return b, nil
}

// Link is the page where event's request is answered (or its job seen).
func (n *Notifier) Link(ev contract.NotifyEvent) string {
	base := strings.TrimSuffix(n.PublicURL, "/")
	if ev.Type == authz.EventJobFinished || ev.Type == authz.EventJobProgress {
		return base + "/jobs/" + url.PathEscape(ev.JobID)
	}
	return base + "/approvals/" + url.PathEscape(ev.JobID)
}

// Body renders ev in format (authz.NotifyFormat*).
func (n *Notifier) Body(ev contract.NotifyEvent, format string) ([]byte, error) {
	link := n.Link(ev)
	if format == authz.NotifyFormatSlack {
		title := "Approval requested"
		button := "Open the request"
		switch ev.Type {
		case authz.EventJobFinished:
			title, button = "Job "+ev.Status, "Open the job"
		case authz.EventJobProgress:
			title, button = "Job "+ev.Status, "Open the job"
			if p := ev.Progress; p != nil {
				title += fmt.Sprintf(": %d of %d %s done, %d failed", p.Done, p.Total, p.Unit, p.Failed)
			}
		}
		// Meaning holds the requester's free text (purpose, names): escaped, it cannot make a
		// link (<https://evil|Approve here>) or a mention (<!channel>) in the approvers' channel;
		// verbatim stops Slack from turning bare URLs and names into links.
		esc := slackEscape
		text := fmt.Sprintf("*%s* (%s, %s)\n%s", esc(title), esc(ev.Kind), esc(ev.JobID), esc(ev.Meaning))
		if !ev.ExpiresAt.IsZero() {
			text += "\nExpires " + ev.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return json.Marshal(map[string]any{
			"text": esc(title + ": " + ev.Meaning),
			"blocks": []any{
				map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text, "verbatim": true}},
				map[string]any{"type": "actions", "elements": []any{map[string]any{
					"type": "button", "text": map[string]any{"type": "plain_text", "text": button},
					"url": link, "action_id": "open"}}},
			},
		})
	}
	data := map[string]any{"event_id": ev.ID, "tenant": ev.Tenant, "job_id": ev.JobID, "kind": ev.Kind,
		"meaning": ev.Meaning, "link": link}
	for k, v := range map[string]string{"owner": ev.Owner, "input_id": ev.InputID, "approver": ev.Approver, "status": ev.Status,
		"error_code": ev.ErrorCode} {
		if v != "" {
			data[k] = v
		}
	}
	if !ev.ExpiresAt.IsZero() {
		data["expires_at"] = ev.ExpiresAt.UTC()
	}
	if ev.Progress != nil {
		p := *ev.Progress
		p.AsOf = p.AsOf.UTC()
		data["progress"] = p
	}
	return json.Marshal(map[string]any{"type": ev.Type, "timestamp": ev.At.UTC(), "data": data})
}

// slackEscape escapes the three characters Slack's message text gives meaning to (links,
// mentions: <…>), as Slack documents: & < > become &amp; &lt; &gt;.
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace

// Notify delivers one event to every endpoint of its tenant that wants it, each at most once
// per attempt; endpoints already done (delivered, or refused for good) are carried in the
// heartbeat, so a retry, also on another worker after this one died, sends only to the rest,
// with the same webhook-id. It fails (and is retried with backoff) while an endpoint may still
// take the event later.
func (n *Notifier) Notify(ctx context.Context, in contract.NotifyInput) (contract.NotifyResult, error) {
	res := contract.NotifyResult{Outcomes: map[string]string{}}
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &res)
		if res.Outcomes == nil {
			res.Outcomes = map[string]string{}
		}
	}
	var targets []NotifyTarget
	if n.Targets != nil {
		targets = n.Targets(in.Event.Tenant, in.Event.Type)
	}
	hb := &heartbeater{outcomes: maps.Clone(res.Outcomes)}
	stop := hb.run(ctx, n.HeartbeatEvery)
	defer stop()
	var pending []string
	for _, t := range targets {
		name := t.EndpointName()
		if o := res.Outcomes[name]; o == contract.OutcomeDelivered || o == contract.OutcomeRejected || o == contract.OutcomeRefused {
			continue
		}
		outcome, err := n.deliver(ctx, t, in.Event)
		if n.Observe != nil {
			n.Observe(name, outcome)
		}
		res.Outcomes[name] = outcome
		hb.set(ctx, name, outcome)
		if err != nil {
			activity.GetLogger(ctx).Warn("notification not delivered", "endpoint", name, "event_id", in.Event.ID,
				"outcome", outcome, "error", err)
		}
		if outcome == contract.OutcomeRetry {
			pending = append(pending, fmt.Sprintf("%s: %v", name, err))
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	if len(pending) > 0 {
		slices.Sort(pending)
		return res, temporal.NewApplicationError("notification pending: "+strings.Join(pending, "; "), "notify_pending")
	}
	return res, nil
}

// heartbeater keeps the attempt alive while a request is in flight, so a dead worker's
// attempt times out quickly (heartbeat timeout) and a live one's does not. Every heartbeat
// carries the outcomes so far, so a retry skips the endpoints already done.
type heartbeater struct {
	mu       sync.Mutex
	outcomes map[string]string
}

func (h *heartbeater) set(ctx context.Context, name, outcome string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.outcomes[name] = outcome
	activity.RecordHeartbeat(ctx, contract.NotifyResult{Outcomes: maps.Clone(h.outcomes)})
}

func (h *heartbeater) run(ctx context.Context, every time.Duration) func() {
	return tickHeartbeats(ctx, every, ctx.Done(), func() []any {
		h.mu.Lock()
		defer h.mu.Unlock()
		return []any{contract.NotifyResult{Outcomes: maps.Clone(h.outcomes)}}
	})
}

// tickHeartbeats records a heartbeat with details() every `every` (2 s when zero) until the
// returned stop is called or stopOn closes (nil: never; a window that must outlive its cancel
// passes nil). Shared by job notifications and job.progress windows.
func tickHeartbeats(ctx context.Context, every time.Duration, stopOn <-chan struct{}, details func() []any) func() {
	if every <= 0 {
		every = 2 * time.Second
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-stopOn:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, details()...)
			}
		}
	}()
	return func() { close(done) }
}

func (n *Notifier) deliver(ctx context.Context, t NotifyTarget, ev contract.NotifyEvent) (string, error) {
	format := t.Format
	if format == "" {
		format = authz.NotifyFormatStandard
	}
	body, err := n.Body(ev, format)
	if err != nil {
		return contract.OutcomeRejected, err
	}
	wh, err := standardwebhooks.NewWebhookRaw(t.Secret)
	if err != nil {
		return contract.OutcomeRejected, err
	}
	now := time.Now()
	sig, err := wh.Sign(ev.ID, now, body)
	if err != nil {
		return contract.OutcomeRejected, err
	}
	timeout := n.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return contract.OutcomeRejected, errors.New("the endpoint's URL does not make a request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "jobgate-notify/1")
	req.Header.Set(standardwebhooks.HeaderWebhookID, ev.ID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	client := n.clientFor(t.AllowPrivate)
	resp, err := client.Do(req)
	if err != nil {
		// A *url.Error names the URL, and an incoming-webhook URL's path is its credential
		// (Slack's /services/T…/B…/secret): keep only the cause, for logs and for history.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		var refused *refusedAddrError
		if errors.As(err, &refused) {
			return contract.OutcomeRefused, err
		}
		return contract.OutcomeRetry, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return contract.OutcomeDelivered, nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return contract.OutcomeRetry, fmt.Errorf("HTTP %d", c)
	default:
		return contract.OutcomeRejected, fmt.Errorf("HTTP %d: the endpoint refuses the event; not retried", c)
	}
}

func (n *Notifier) clientFor(allowPrivate bool) *http.Client {
	if n.Client != nil {
		return n.Client(allowPrivate)
	}
	// One client per kind, kept: a Transport per delivery would leave its idle connections
	// (and their goroutines) behind until IdleConnTimeout, one set per event.
	n.clientsMu.Lock()
	defer n.clientsMu.Unlock()
	c, ok := n.clients[allowPrivate]
	if !ok {
		if n.clients == nil {
			n.clients = map[bool]*http.Client{}
		}
		c = NotifyClient(allowPrivate)
		n.clients[allowPrivate] = c
	}
	return c
}

// refusedAddrError is a dial to an address the endpoint may not reach.
type refusedAddrError struct{ addr, why string }

func (e *refusedAddrError) Error() string {
	return fmt.Sprintf("refused to connect to %s: %s (set allow_private on the endpoint to allow it)", e.addr, e.why)
}

// NotifyClient is an HTTP client for deliveries. Unless allowPrivate, its dialer checks the
// address it actually connects to (after DNS resolution, in the socket's Control hook), so a
// name that resolves to a private address, also one re-resolved between checks (DNS rebinding),
// is refused. It follows no redirect: the operator's URL is the only place an event goes, and it
// uses no proxy from the environment for the same reason.
func NotifyClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &refusedAddrError{addr: address, why: "not an IP address"}
			}
			if why := authz.PrivateIP(ap.Addr()); why != "" {
				return &refusedAddrError{addr: address, why: why}
			}
			return nil
		}
	}
	tr := &http.Transport{DialContext: d.DialContext, ForceAttemptHTTP2: true, MaxIdleConns: 10,
		IdleConnTimeout: 30 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}
