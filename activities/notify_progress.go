package activities

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// JobSnapshot is what one job.progress window reads of its job: what get_* would show (the
// JobStatus search attribute and the progress memo), read from Temporal by the worker's
// injected [Notifier.Snapshot].
type JobSnapshot struct {
	Status   string
	Progress contract.EventProgress
	// Closed: the job's workflow no longer runs (in any run), or the workflow ID now names
	// another job instance (another first run ID).
	Closed bool
}

// progressKey is a progress state's identity: its webhook-id is derived from it, so the same
// state is one logical event however often it is sent, and each new state a new one.
func progressKey(s JobSnapshot) string {
	p := s.Progress
	return fmt.Sprintf("%s|%d|%d|%d|%s", s.Status, p.Done, p.Failed, p.Total, p.Message)
}

func terminalStatus(s string) bool { return s == "succeeded" || s == "failed" || s == "cancelled" }

// NotifyProgress runs one job.progress window: it reads the job once and sends its newest
// state to every endpoint of the tenant that wants job.progress whose window has passed and
// that has not had that state yet, all endpoints at once. Each delivery is retried (1s
// doubling) only until its window ends, then dropped: a later window carries newer progress.
// A cancel (the job ended) stops retries, but a request in flight is let finish (within the
// request timeout), so job.finished, sent after this returns, is never overtaken by it.
func (n *Notifier) NotifyProgress(ctx context.Context, in contract.NotifyProgressInput) (contract.NotifyProgressResult, error) {
	res := contract.NotifyProgressResult{Sent: maps.Clone(in.Sent), Outcomes: map[string]string{}}
	if res.Sent == nil {
		res.Sent = map[string]contract.ProgressMark{}
	}
	// Whatever starts a notifier (any Temporal client can) only ever reads a job of the
	// tenant whose endpoints it sends to: job IDs begin with their tenant.
	if in.Tenant == "" || !strings.HasPrefix(in.JobID, in.Tenant+"/") {
		activity.GetLogger(ctx).Error("job.progress notifier refused: the job is not the tenant's", "job_id", in.JobID, "tenant", in.Tenant)
		res.Done = true
		return res, nil
	}
	var targets []NotifyTarget
	if n.Targets != nil {
		targets = n.Targets(in.Tenant, authz.EventJobProgress)
	}
	if len(targets) == 0 || n.Snapshot == nil {
		res.Done = true
		return res, nil
	}
	snap, err := n.Snapshot(ctx, in.JobID, in.FirstRunID)
	if err != nil {
		return res, err
	}
	if snap.Closed || terminalStatus(snap.Status) {
		// job.finished tells the end; no progress goes out after it.
		res.Done = true
		return res, nil
	}
	now := time.Now()
	if n.Now != nil {
		now = n.Now()
	}
	key := progressKey(snap)
	p := snap.Progress
	ev := contract.NotifyEvent{ID: contract.EventID(in.JobID, in.FirstRunID, authz.EventJobProgress, key), Type: authz.EventJobProgress,
		Tenant: in.Tenant, JobID: in.JobID, Kind: in.Kind, Owner: in.Owner, Status: snap.Status, Progress: &p,
		Meaning: fmt.Sprintf("The %s job of %s is %s: %d of %d %s done, %d failed", in.Kind, in.Owner, snap.Status,
			p.Done, p.Total, p.Unit, p.Failed),
		At: p.AsOf}
	if ev.At.IsZero() {
		ev.At = now
	}
	stop := n.keepAlive(ctx)
	defer stop()

	var next time.Duration
	soonest := func(d time.Duration) {
		if next == 0 || d < next {
			next = d
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, t := range targets {
		name, window := t.EndpointName(), t.ProgressWindow()
		// From the input: res.Sent is being written by the deliveries already under way.
		m := in.Sent[name]
		if m.Key == key { // nothing new for it: look again a window from now
			soonest(window)
			continue
		}
		if due := m.At.Add(window); now.Before(due) { // coalesced: the newest state goes out when due
			soonest(due.Sub(now))
			continue
		}
		mu.Lock()
		res.Sent[name] = contract.ProgressMark{Key: m.Key, At: now}
		mu.Unlock()
		soonest(window)
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcome := n.deliverWithin(ctx, t, ev, time.Now().Add(window))
			mu.Lock()
			defer mu.Unlock()
			res.Outcomes[name] = outcome
			if outcome != contract.OutcomeDropped {
				res.Sent[name] = contract.ProgressMark{Key: key, At: now}
			}
		}()
	}
	wg.Wait()
	res.NextIn = contract.Duration(max(next, authz.ProgressEveryMin))
	return res, nil
}

// deliverWithin delivers ev to t, retrying what may be retried until deadline (or until ctx
// is done); what could not land by then is dropped.
func (n *Notifier) deliverWithin(ctx context.Context, t NotifyTarget, ev contract.NotifyEvent, deadline time.Time) string {
	name := t.EndpointName()
	backoff := time.Second
	for {
		// Not cancelled with ctx: a request already sent is let answer (bounded by the window
		// and the request timeout), so the job's end never overtakes it.
		rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		outcome, err := n.deliver(rctx, t, ev)
		cancel()
		if n.Observe != nil {
			n.Observe(name, outcome)
		}
		if outcome != contract.OutcomeRetry {
			if err != nil {
				activity.GetLogger(ctx).Warn("job.progress not delivered", "endpoint", name, "event_id", ev.ID, "outcome", outcome, "error", err)
			}
			return outcome
		}
		wait := backoff
		backoff *= 2
		if time.Until(deadline) <= wait {
			activity.GetLogger(ctx).Warn("job.progress dropped: not delivered within its window", "endpoint", name,
				"event_id", ev.ID, "error", err)
			if n.Observe != nil {
				n.Observe(name, contract.OutcomeDropped)
			}
			return contract.OutcomeDropped
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			if n.Observe != nil {
				n.Observe(name, contract.OutcomeDropped)
			}
			return contract.OutcomeDropped
		case <-timer.C:
		}
	}
}

// keepAlive heartbeats until the window returns, also after a cancel (the job ended): a request
// let finish after it must not look like a dead worker, or the job's end would be sent while
// that request is still in flight.
func (n *Notifier) keepAlive(ctx context.Context) func() {
	return tickHeartbeats(ctx, n.HeartbeatEvery, nil, func() []any { return nil })
}
