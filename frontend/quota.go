package frontend

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

// Quotas are counted in Temporal visibility, which every replica shares: running jobs
// (ExecutionStatus Running covers queued, awaiting input, running and cancelling), the episode
// concurrency of running evals (memo "slots"), and the owner's job creations in the last minute
// (memo created_at, so a continue-as-new is not a new start).
//
// Visibility trails a start by a few milliseconds. Within one replica the gap is closed by
// reservations: a start admitted here counts against later starts of its tenant until visibility
// shows it (or visibleWait passes). Across replicas the gap stays open: two replicas admitting
// the same tenant's starts in the same instant may each count the other's start as not yet there.
// The overshoot is therefore at most the starts of that tenant in flight on the other replicas
// (README "Fairness and quotas"; tests/quota_test.go measures it).

// visibleWait bounds how long a reservation waits for visibility to show its job.
const visibleWait = 5 * time.Second

// quotaPageSize bounds one visibility page read for a quota.
const quotaPageSize = 1000

type reservation struct {
	seq      uint64
	id       string // the job's workflow ID
	owner    string
	episodes int
}

// quotas is the replica-local reservation table; the counts themselves come from visibility.
type quotas struct {
	mu      sync.Mutex
	seq     uint64
	pending map[string][]reservation // by tenant, in admission order
}

// reserve records a start about to be checked and returns it with the reservations of the
// tenant admitted before it that visibility may not show yet.
func (q *quotas) reserve(tenant, id, owner string, episodes int) (reservation, []reservation) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = map[string][]reservation{}
	}
	q.seq++
	r := reservation{seq: q.seq, id: id, owner: owner, episodes: episodes}
	ahead := append([]reservation(nil), q.pending[tenant]...)
	q.pending[tenant] = append(q.pending[tenant], r)
	return r, ahead
}

func (q *quotas) release(tenant string, r reservation) {
	q.mu.Lock()
	defer q.mu.Unlock()
	rs := q.pending[tenant]
	for i := range rs {
		if rs[i].seq == r.seq {
			rs = append(rs[:i], rs[i+1:]...)
			break
		}
	}
	if len(rs) == 0 {
		delete(q.pending, tenant)
	} else {
		q.pending[tenant] = rs
	}
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
		a.f.quotas.release(a.tenant, *a.r)
	}
}

// started keeps the reservation until visibility shows job id (or visibleWait passes), off the
// request path: the caller has its answer already.
func (a admission) started(id string) {
	if a.r == nil {
		return
	}
	go func() {
		defer a.f.quotas.release(a.tenant, *a.r)
		ctx, cancel := context.WithTimeout(context.Background(), visibleWait)
		defer cancel()
		qid, err := quoteQueryString(id)
		if err != nil {
			return
		}
		q := "WorkflowId = " + qid
		for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
			resp, err := a.f.opts.Temporal.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
				Namespace: a.f.opts.Namespace, Query: q})
			if err == nil && resp.GetCount() > 0 {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}()
}

// admit checks p's quotas for new job id holding episodes of episode concurrency. A refusal is
// a quota_exceeded tool error; the admission must be resolved with started or abandoned.
func (f *Frontend) admit(ctx context.Context, p authz.Principal, id string, episodes int) (admission, error) {
	pol := f.opts.Tenants.For(p.Tenant)
	l := pol.Limits
	if l.RunningJobsPerOwner == 0 && l.RunningJobsPerTenant == 0 && l.EpisodesInFlightPerTenant == 0 && l.StartsPerMinutePerOwner == 0 {
		return admission{}, nil
	}
	r, ahead := f.quotas.reserve(p.Tenant, id, p.Subject, episodes)
	a := admission{f: f, tenant: p.Tenant, r: &r}
	now := f.opts.Now()
	u, seen, err := f.usage(ctx, p, l, now)
	if err != nil {
		a.abandoned()
		return admission{}, err
	}
	for _, o := range ahead {
		if seen[o.id] {
			continue // visibility counted it already
		}
		u.TenantRunning++
		u.TenantEpisodes += o.episodes
		if o.owner == p.Subject {
			u.OwnerRunning++
			u.OwnerStartsLastMinute++
		}
	}
	if ref := authz.CheckQuota(pol, u, episodes, now); ref != nil {
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

// usage counts what p and p's tenant hold now with one visibility read: the tenant's
// unfinished jobs and its jobs started in the last minute (runs closed by continue-as-new left
// out: each job is counted once, by its current run).
// seen holds the workflow IDs counted.
func (f *Frontend) usage(ctx context.Context, p authz.Principal, l authz.Limits, now time.Time) (authz.Usage, map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
	defer cancel()
	qt, err := quoteQueryString(p.Tenant)
	if err != nil {
		return authz.Usage{}, nil, fmt.Errorf("quota: tenant: %w", err)
	}
	since := now.Add(-time.Minute)
	q := "JobTenant = " + qt + " AND ExecutionStatus != 'ContinuedAsNew' AND (ExecutionStatus = 'Running'"
	if l.StartsPerMinutePerOwner > 0 {
		q += " OR StartTime >= '" + since.UTC().Format(time.RFC3339Nano) + "'"
	}
	q += ")"
	var (
		u      authz.Usage
		starts []time.Time
		seen   = map[string]bool{}
	)
	err = f.eachExecution(ctx, q, func(info *workflowpb.WorkflowExecutionInfo) {
		seen[info.GetExecution().GetWorkflowId()] = true
		mine := decodeKeyword(f.opts.DataConverter, info.GetSearchAttributes(), workflows.SAJobOwner.GetName()) == p.Subject
		if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			u.TenantRunning++
			if mine {
				u.OwnerRunning++
			}
			var slots int
			if f.memoField(info, workflows.MemoSlots, &slots) {
				u.TenantEpisodes += slots
			}
		}
		// A continued-as-new run starts later than its job: created_at is the job's start.
		var c time.Time
		if mine && f.memoField(info, workflows.MemoCreatedAt, &c) && !c.Before(since) {
			starts = append(starts, c)
		}
	})
	if err != nil {
		return authz.Usage{}, nil, err
	}
	u.OwnerStartsLastMinute = len(starts)
	if n := l.StartsPerMinutePerOwner; n > 0 && len(starts) >= n {
		// The window frees a start when the n-th most recent one turns a minute old.
		slices.SortFunc(starts, func(a, b time.Time) int { return b.Compare(a) })
		u.OldestStart = starts[n-1]
	}
	return u, seen, nil
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

// memoField decodes one memo field of info into v (false when absent or undecodable).
func (f *Frontend) memoField(info *workflowpb.WorkflowExecutionInfo, key string, v any) bool {
	p := info.GetMemo().GetFields()[key]
	return p != nil && f.opts.DataConverter.FromPayload(p, v) == nil
}

// fairness is tenant's dispatch key and configured weight.
func (f *Frontend) fairness(tenant string) workflows.Fairness {
	return workflows.Fairness{Key: tenant, Weight: float32(f.opts.Tenants.For(tenant).FairnessWeight)}
}
