package frontend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

// Quotas are counted in Temporal visibility, which every replica shares: running jobs
// (ExecutionStatus Running covers queued, awaiting input, running and cancelling), the episode
// concurrency of running evals (memo "slots"), and the owner's job creations in the last minute
// (memo created_at, so a continue-as-new is not a new start).
//
// Visibility trails a start by a few milliseconds. Within one replica the gap is closed by
// reservations: a start admitted here counts against later starts of its tenant until a later
// check finds it in visibility (or visibleWait after its start passes). Across replicas the gap
// stays open: two replicas admitting the same tenant's starts in the same instant may each count
// the other's start as not yet there. The overshoot is therefore at most the starts of that
// tenant in flight on the other replicas (README "Fairness and quotas"; tests/quota_test.go
// measures it).

// visibleWait bounds how long a started job's reservation outlives its start: visibility
// shows a job within milliseconds, and a later check that finds it releases it sooner.
const visibleWait = 5 * time.Second

// quotaPageSize bounds one visibility page read for a quota.
const quotaPageSize = 1000

type reservation struct {
	seq      uint64
	id       string // the job's workflow ID
	owner    string
	episodes int
	// expires is zero while the start is in flight; once started, visibleWait after it.
	expires time.Time
}

// quotas is the replica-local reservation table; the counts themselves come from visibility.
type quotas struct {
	mu      sync.Mutex
	seq     uint64
	pending map[string][]reservation // by tenant, in admission order
}

// reserve records a start about to be checked and returns it with the reservations of the
// tenant admitted before it that visibility may not show yet (expired ones are dropped).
func (q *quotas) reserve(tenant, id, owner string, episodes int, now time.Time) (reservation, []reservation) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = map[string][]reservation{}
	}
	live := q.pending[tenant][:0]
	for _, r := range q.pending[tenant] {
		if r.expires.IsZero() || now.Before(r.expires) {
			live = append(live, r)
		}
	}
	q.seq++
	r := reservation{seq: q.seq, id: id, owner: owner, episodes: episodes}
	ahead := append([]reservation(nil), live...)
	q.pending[tenant] = append(live, r)
	return r, ahead
}

// update applies fn to each of the tenant's reservations; fn returns false to drop one.
func (q *quotas) update(tenant string, fn func(*reservation) bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	rs := q.pending[tenant][:0]
	for _, r := range q.pending[tenant] {
		if fn(&r) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		delete(q.pending, tenant)
	} else {
		q.pending[tenant] = rs
	}
}

// visible drops the reservations of jobs visibility has been seen to show.
func (q *quotas) visible(tenant string, ids map[string]bool) {
	q.update(tenant, func(r *reservation) bool { return !(ids[r.id] && !r.expires.IsZero()) })
}

// admission is an admitted start's reservation: started hands it to visibility, abandoned drops it.
type admission struct {
	f      *Frontend
	tenant string
	r      *reservation
}

// abandoned drops the reservation of a start that created nothing.
func (a admission) abandoned() {
	if a.r != nil {
		a.f.quotas.update(a.tenant, func(r *reservation) bool { return r.seq != a.r.seq })
	}
}

// started keeps the reservation until a later check finds the job in visibility, or
// visibleWait passes.
func (a admission) started() {
	if a.r != nil {
		exp := a.f.opts.Now().Add(visibleWait)
		a.f.quotas.update(a.tenant, func(r *reservation) bool {
			if r.seq == a.r.seq {
				r.expires = exp
			}
			return true
		})
	}
}

// admit checks p's quotas for new job id holding episodes of episode concurrency. A refusal is
// a quota_exceeded tool error; the admission must be resolved with started or abandoned.
func (f *Frontend) admit(ctx context.Context, p authz.Principal, id string, episodes int) (admission, error) {
	pol := f.opts.Tenants.For(p.Tenant)
	l := pol.Limits
	if l.RunningJobsPerOwner == 0 && l.RunningJobsPerTenant == 0 && l.EpisodesInFlightPerTenant == 0 && l.StartsPerMinutePerOwner == 0 {
		return admission{}, nil
	}
	r, ahead := f.quotas.reserve(p.Tenant, id, p.Subject, episodes, f.opts.Now())
	a := admission{f: f, tenant: p.Tenant, r: &r}
	ref, err := f.checkQuota(ctx, p, pol, ahead, episodes)
	if err != nil {
		a.abandoned()
		return admission{}, err
	}
	if ref != nil {
		a.abandoned()
		f.metrics.quotaRejected(f.opts.Tenants, p.Tenant, ref.Limit)
		te := &ToolError{Code: CodeQuotaExceeded, Message: ref.Limit + ": " + ref.Message + "; nothing was started", Retryable: true}
		if ref.RetryAfter > 0 {
			te.RetryAfterMS = max(ref.RetryAfter.Milliseconds(), 1)
		}
		return admission{}, te
	}
	return a, nil
}

// checkQuota counts what p and p's tenant hold and decides. Counts are visibility COUNT queries
// (a few milliseconds whatever the tenant holds); the two figures a count cannot give exactly —
// the episode concurrency of running evals and job creations in the last minute (a
// continue-as-new run is counted by COUNT as started when it continued) — are first bounded
// from above by counts, and listed row by row only when that bound does not fit the limit.
func (f *Frontend) checkQuota(ctx context.Context, p authz.Principal, pol authz.TenantPolicy, ahead []reservation, episodes int) (*authz.QuotaRefusal, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
	defer cancel()
	l := pol.Limits
	now := f.opts.Now()
	since := now.Add(-time.Minute)
	qt, err := quoteQueryString(p.Tenant)
	if err != nil {
		return nil, fmt.Errorf("quota: tenant: %w", err)
	}
	tenant := "JobTenant = " + qt
	// A subject the visibility store cannot match (see ownerMatchable) has no owner counts:
	// its tenant's limits still hold.
	owner := ""
	if qs, err := quoteQueryString(p.Subject); err == nil && ownerMatchable(p.Subject) {
		owner = tenant + " AND JobOwner = " + qs
	}
	const running = " AND ExecutionStatus = 'Running'"
	evals := tenant + " AND JobKind = '" + workflows.KindEval + "'" + running
	recent := owner + " AND StartTime >= '" + since.UTC().Format(time.RFC3339Nano) + "' AND ExecutionStatus != 'ContinuedAsNew'"

	// Reservations ahead of this start that visibility shows already are in the counts below;
	// asked first, so one that appears meanwhile is counted twice (a refusal to retry), never
	// not at all.
	pending, err := f.notVisible(ctx, p.Tenant, ahead)
	if err != nil {
		return nil, err
	}
	var u authz.Usage
	var pendingEpisodes, pendingMine, evalsRunning, recentRuns int
	for _, o := range pending {
		pendingEpisodes += o.episodes
		if o.owner == p.Subject {
			pendingMine++
		}
	}
	counts := map[*int]string{&u.TenantRunning: tenant + running}
	if owner != "" && l.StartsPerMinutePerOwner > 0 {
		counts[&recentRuns] = recent
	}
	if err := f.countAll(ctx, counts); err != nil {
		return nil, err
	}
	// The tenant's count bounds the owner's and the evals': count those only when the bound
	// does not fit their limit.
	u.OwnerRunning, evalsRunning = u.TenantRunning, u.TenantRunning
	counts = map[*int]string{}
	if owner != "" && l.RunningJobsPerOwner > 0 && u.TenantRunning+len(pending) >= l.RunningJobsPerOwner {
		counts[&u.OwnerRunning] = owner + running
	}
	if l.EpisodesInFlightPerTenant > 0 && episodes > 0 && u.TenantRunning*f.maxEvalSlots()+pendingEpisodes+episodes > l.EpisodesInFlightPerTenant {
		counts[&evalsRunning] = evals
	}
	if err := f.countAll(ctx, counts); err != nil {
		return nil, err
	}
	if owner == "" {
		u.OwnerRunning = 0
	}
	u.TenantRunning += len(pending)
	u.OwnerRunning += pendingMine
	u.OwnerStartsLastMinute = recentRuns + pendingMine
	if l.StartsPerMinutePerOwner > 0 && u.OwnerStartsLastMinute >= l.StartsPerMinutePerOwner && owner != "" {
		// The bound does not fit: count job creations exactly (created_at survives
		// continue-as-new) and find when the window frees one.
		var starts []time.Time
		err := f.eachExecution(ctx, recent, func(info *workflowpb.WorkflowExecutionInfo) {
			if c, ok := decodeMemo[time.Time](f.opts.DataConverter, info.GetMemo(), workflows.MemoCreatedAt); ok && !c.Before(since) {
				starts = append(starts, c)
			}
		})
		if err != nil {
			return nil, err
		}
		u.OwnerStartsLastMinute = len(starts) + pendingMine
		if n := l.StartsPerMinutePerOwner - pendingMine; n > 0 && len(starts) >= n {
			// The window frees a start when the n-th most recent one turns a minute old.
			slices.SortFunc(starts, func(a, b time.Time) int { return b.Compare(a) })
			u.OldestStart = starts[n-1]
		}
	}
	if l.EpisodesInFlightPerTenant > 0 && episodes > 0 {
		u.TenantEpisodes = evalsRunning*f.maxEvalSlots() + pendingEpisodes
		if u.TenantEpisodes+episodes > l.EpisodesInFlightPerTenant {
			// The bound does not fit: sum what the running evals hold.
			held := 0
			err := f.eachExecution(ctx, evals, func(info *workflowpb.WorkflowExecutionInfo) {
				slots, _ := decodeMemo[int](f.opts.DataConverter, info.GetMemo(), workflows.MemoSlots)
				held += slots
			})
			if err != nil {
				return nil, err
			}
			u.TenantEpisodes = held + pendingEpisodes
		}
	}
	return authz.CheckQuota(pol, u, episodes, now), nil
}

// maxEvalSlots bounds the episode concurrency one eval holds: the largest concurrency any suite allows.
func (f *Frontend) maxEvalSlots() int {
	return int(f.suiteMax(func(s activities.Suite) int { return s.MaxConcurrency }))
}

// countAll runs the visibility counts in parallel, each into its int.
func (f *Frontend) countAll(ctx context.Context, counts map[*int]string) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(counts))
	for into, q := range counts {
		wg.Go(func() {
			resp, err := f.opts.Temporal.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: f.opts.Namespace, Query: q})
			if err != nil {
				errs <- fmt.Errorf("quota count: %w", err)
				return
			}
			*into = int(resp.GetCount())
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// notVisible returns the reservations visibility does not show yet, and releases the started
// ones it shows.
func (f *Frontend) notVisible(ctx context.Context, tenant string, rs []reservation) ([]reservation, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(rs))
	for _, r := range rs {
		q, err := quoteQueryString(r.id)
		if err != nil {
			return nil, fmt.Errorf("quota: job id: %w", err)
		}
		ids = append(ids, q)
	}
	q := "WorkflowId IN (" + strings.Join(ids, ",") + ") AND ExecutionStatus != 'ContinuedAsNew'"
	var visible int
	if err := f.countAll(ctx, map[*int]string{&visible: q}); err != nil {
		return nil, err
	}
	if visible >= len(rs) {
		// The common case: all there (a count is cheaper than a listing).
		all := make(map[string]bool, len(rs))
		for _, r := range rs {
			all[r.id] = true
		}
		f.quotas.visible(tenant, all)
		return nil, nil
	}
	seen := map[string]bool{}
	err := f.eachExecution(ctx, q, func(info *workflowpb.WorkflowExecutionInfo) {
		seen[info.GetExecution().GetWorkflowId()] = true
	})
	if err != nil {
		return nil, err
	}
	f.quotas.visible(tenant, seen)
	var out []reservation
	for _, r := range rs {
		if !seen[r.id] {
			out = append(out, r)
		}
	}
	return out, nil
}

// eachExecution pages through visibility for q, calling fn per execution.
func (f *Frontend) eachExecution(ctx context.Context, q string, fn func(*workflowpb.WorkflowExecutionInfo)) error {
	var token []byte
	for {
		resp, err := f.opts.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: f.opts.Namespace, PageSize: quotaPageSize, NextPageToken: token, Query: q})
		if err != nil {
			return fmt.Errorf("quota list: %w", err)
		}
		for _, info := range resp.GetExecutions() {
			fn(info)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

// fairness is tenant's dispatch key and configured weight.
func (f *Frontend) fairness(tenant string) workflows.Fairness {
	return workflows.Fairness{Key: tenant, Weight: float32(f.opts.Tenants.For(tenant).FairnessWeight)}
}
