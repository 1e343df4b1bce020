// events_http.go serves GET /jobs/<handle>/events: a job's events as Server-Sent Events for any
// bearer client, and the pieces every event stream shares (the SSE writer, the limits on open
// streams, resume positions).

package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/events"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
)

// PathJobEvents is the pattern of a job's event stream.
const PathJobEvents = "GET /jobs/{handle}/events"

// scopeWhatJobEvents names the stream in a 403's description and metrics.
const scopeWhatJobEvents = "job events"

// acquireStream takes a stream slot for p: quota_exceeded past a limit, unavailable once
// StopStreams was called (the client goes to another replica).
func (f *Frontend) acquireStream(p authz.Principal) (release func(), te *jobcore.ToolError) {
	if f.stopStreams.Err() != nil {
		return nil, jobcore.ToolErr(jobcore.CodeUnavailable, "this server is shutting down; reconnect, with Last-Event-ID, to another replica")
	}
	return f.streams.Acquire(p)
}

// streamContext bounds a stream by the bearer token's expiry — a stream never outlives the
// token that opened it (the client reconnects with a fresh one and Last-Event-ID) — and by
// StopStreams.
func (f *Frontend) streamContext(r *http.Request) (context.Context, context.CancelFunc) {
	base, cancelBase := context.WithCancel(r.Context())
	ctx, cancel := base, context.CancelFunc(func() {})
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil && !ti.Expiration.IsZero() {
		ctx, cancel = context.WithDeadline(base, ti.Expiration)
	}
	stop := context.AfterFunc(f.stopStreams, cancelBase)
	return ctx, func() { stop(); cancel(); cancelBase() }
}

// StopStreams ends every event stream this frontend serves, now and later: a server shutting
// down calls it (http.Server.RegisterOnShutdown), since a stream would otherwise hold its
// connection until the shutdown's deadline. Clients resume on another replica with
// Last-Event-ID.
func (f *Frontend) StopStreams() { f.stopStreamsNow() }

// resumePos opens a Last-Event-ID for a stream of p over target watching n jobs. Anything but a
// live position of this very caller and stream — absent, malformed, tampered, expired,
// another's — is no position: the stream starts afresh (the client is sent the current state),
// which tells nobody anything.
func (f *Frontend) resumePos(r *http.Request, p authz.Principal, target string, n int) []handle.JobPos {
	fresh := make([]handle.JobPos, n)
	raw := r.Header.Get("Last-Event-ID")
	if raw == "" {
		return fresh
	}
	pos, err := f.Opts.Keys.OpenEventPos(raw, f.Opts.Now())
	if err != nil || pos.Tenant != p.Tenant || pos.Subject != p.Subject || pos.Target != target || len(pos.Jobs) != n {
		f.Logger(r.Context()).Info("event stream: Last-Event-ID not usable; starting afresh", zap.String("tenant", p.Tenant),
			zap.String("sub", p.Subject), zap.Bool("malformed", errors.Is(err, handle.ErrMalformed)))
		return fresh
	}
	return pos.Jobs
}

// sealPos is the id of an event: the stream's position in every job it watches.
func (f *Frontend) sealPos(p authz.Principal, target string, jobs []handle.JobPos) string {
	return f.Opts.Keys.SealEventPos(handle.EventPos{Tenant: p.Tenant, Subject: p.Subject, Target: target, Jobs: jobs,
		Expiry: f.Opts.Now().Add(events.EventPosTTL).Truncate(time.Second)})
}

// serveJobEvents is GET /jobs/<handle>/events: bearer auth, get_*'s access rules (a job the
// caller may not see answers exactly as an unknown one), then the job view as an SSE event
// whenever it changes, each with a resumable id, until the job is terminal.
func (f *Frontend) serveJobEvents(metaURL string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := jobcore.PrincipalFromContext(r.Context())
		if !ok {
			http.Error(w, "no principal", http.StatusUnauthorized)
			return
		}
		if need := authz.ActionScopes(authz.ActionGet); !hasAny(p, need) {
			f.denyScope(r.Context(), w, metaURL, scopeWhatJobEvents, need, p)
			return
		}
		raw := r.PathValue("handle")
		h, herr := f.Opts.Keys.OpenHandle(raw, f.Opts.Now())
		render := func(ctx context.Context) (events.Rendered, error) {
			if herr != nil && !errors.Is(herr, handle.ErrExpired) {
				return events.Rendered{}, jobcore.ToolErr(jobcore.CodeInvalidHandle, "the handle is malformed or not signed by this service; pass the handle string exactly as returned")
			}
			if _, served := f.handlers["get_"+h.Kind]; !served {
				return events.Rendered{}, jobcore.ErrNotFound()
			}
			return f.renderView(ctx, h.Kind, raw)
		}
		// The first render decides the answer: any refusal is get_*'s, as an HTTP status.
		if _, err := render(r.Context()); err != nil {
			f.refuseStream(w, r, err)
			return
		}
		release, te := f.acquireStream(p)
		if te != nil {
			f.refuseStream(w, r, te)
			return
		}
		defer release()
		target := events.StreamTarget("job", []string{h.WorkflowID})
		pos := f.resumePos(r, p, target, 1)[0]
		ctx, cancel := f.streamContext(r)
		defer cancel()
		sse := events.StartSSE(w)
		defer sse.Close()
		go sse.Heartbeat(ctx, cancel, f.Opts.StreamHeartbeat)
		f.Metrics.StreamOpened("job_events")
		defer f.Metrics.StreamClosed("job_events")
		err := f.follow.FollowJob(ctx, h.WorkflowID, pos, render, func(ev events.Rendered, next handle.JobPos) error {
			return sse.Event(f.sealPos(p, target, []handle.JobPos{next}), ev.Payload)
		})
		if err != nil && ctx.Err() == nil {
			f.Logger(r.Context()).Info("job events: stream ended", zap.String("job_id", h.WorkflowID), zap.Error(err))
		}
	})
}

// renderView is the job view get_<kind> returns to the caller of ctx, as a stream event.
func (f *Frontend) renderView(ctx context.Context, kind, raw string) (events.Rendered, error) {
	res, err := f.runTool(ctx, nil, "get_"+kind, jobcore.HandleIn{Handle: raw})
	if err != nil {
		return events.Rendered{}, err
	}
	if te := resultToolError(res); te != nil {
		return events.Rendered{}, te
	}
	v, ok := resultView(res)
	if !ok {
		return events.Rendered{}, fmt.Errorf("get_%s: no job view", kind)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return events.Rendered{}, err
	}
	return events.Rendered{Payload: b, Digest: events.ViewDigest(b, f.viewVolatile(kind)...), Terminal: v.Status.Terminal()}, nil
}

// refuseStream answers a stream that does not start: a tool error of get_* (or the stream
// quota) as its HTTP status and the error's JSON; anything else as 500.
func (f *Frontend) refuseStream(w http.ResponseWriter, r *http.Request, err error) {
	te, ok := jobcore.AsToolError(err)
	if !ok {
		f.Logger(r.Context()).Error("job events failed", zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	status := http.StatusBadRequest
	switch te.Code {
	case jobcore.CodeNotFound:
		status = http.StatusNotFound
	case jobcore.CodeHandleExpired:
		status = http.StatusGone
	case jobcore.CodeForbidden:
		status = http.StatusForbidden
	case jobcore.CodeUnavailable:
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "5")
	case jobcore.CodeQuotaExceeded:
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", strconv.FormatInt(max(te.RetryAfterMS/1000, 1), 10))
	}
	b, _ := json.Marshal(te)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// viewVolatile is what a job view of kind changes on every read without the job changing:
// its handle and note, and the result members the kind seals afresh (servedKind.freshResult:
// download links, their expiry truncated to the second, so two reads a second apart differ).
// A stream resumed after the terminal view would otherwise send that view again.
func (f *Frontend) viewVolatile(kind string) []string {
	vol := []string{"handle", "note"}
	for _, k := range f.Kinds {
		if k.Name == kind {
			for _, m := range k.FreshResult {
				vol = append(vol, "result."+m)
			}
		}
	}
	return vol
}
