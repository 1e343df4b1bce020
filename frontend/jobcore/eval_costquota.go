package jobcore

import (
	"context"
	"fmt"
	"time"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// A tenant's monthly cost quota (the tenants file's cost_per_month, by cost unit): what its
// evals cost in the calendar month (UTC) — the usage memos of the jobs that finished in it and
// the cost so far of the evals still running — plus a new eval's budget, or a budget raise,
// must fit under it. Evals already running are not reserved their unspent budgets: several
// running at once can pass the quota by at most those.

// costQuota is the start's cost check for an eval of cost policy cp in tenant (nil when the
// tenant has no cost_per_month in the suite's unit).
func (f *Core) costQuota(tenant string, cp workflows.CostPolicy) func(ctx context.Context) error {
	limit, ok := f.Opts.Tenants.CostPerMonth[tenant][cp.Unit]
	if !ok || cp.Unit == "" {
		return nil
	}
	return func(ctx context.Context) error {
		spent, until, err := f.monthSpent(ctx, tenant, cp.Unit)
		if err != nil {
			return err
		}
		left := max(0, limit-spent)
		if cp.Budget == nil || cp.Budget.MaxCost == 0 {
			return invalidArg("budget.max_cost", "is required: your tenant's evals may cost %s %s a month, %s left until %s",
				money(limit), cp.Unit, money(left), until.Format(time.RFC3339))
		}
		if cp.Budget.MaxCost > left {
			return costRefusal("a budget of", cp.Budget.MaxCost, cp.Unit, limit, left, until, "nothing was started")
		}
		return nil
	}
}

// raiseQuota refuses approving a budget request whose raise does not fit the month's quota.
func (f *Core) raiseQuota(ctx context.Context, tenant string, in ResumeIn, ni *workflows.NeedsInput) error {
	unit, _ := ni.Scope["cost_unit"].(string)
	limit, ok := f.Opts.Tenants.CostPerMonth[tenant][unit]
	if !ok || in.Decision != workflows.DecisionApprove || ni.Scope["approve_extends_by"] == nil {
		return nil
	}
	raise := 0.0
	if in.ExtendBy != nil {
		raise = in.ExtendBy.MaxCost
	} else if d, ok := ni.Scope["approve_extends_by"].(map[string]any); ok {
		raise, _ = d["max_cost"].(float64)
	}
	if raise == 0 {
		return nil
	}
	spent, until, err := f.monthSpent(ctx, tenant, unit)
	if err != nil {
		return err
	}
	if left := max(0, limit-spent); raise > left {
		return costRefusal("raising the budget by", raise, unit, limit, left, until, "the job keeps waiting")
	}
	return nil
}

func costRefusal(what string, amount float64, unit string, limit, left float64, until time.Time, outcome string) error {
	te := ToolErr(CodeQuotaExceeded, "cost_per_month: %s %s %s does not fit: %s of %s %s left this month (until %s); %s",
		what, money(amount), unit, money(left), money(limit), unit, until.Format(time.RFC3339), outcome)
	te.Retryable = true
	return te
}

func money(v float64) string { return fmt.Sprintf("%.2f", v) }

// monthSpent is what tenant's evals cost in unit since the start of the current calendar month
// (UTC): finished jobs' usage and unfinished evals' cost so far. until is the month's end.
func (f *Core) monthSpent(ctx context.Context, tenant, unit string) (spent float64, until time.Time, err error) {
	now := f.Opts.Now().UTC()
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	until = start.AddDate(0, 1, 0)
	for _, filter := range []jobstore.Filter{
		{Tenant: tenant, ClosedSince: start, Runs: jobstore.RunsLatest},
		{Tenant: tenant, Runs: jobstore.RunsUnfinished, Kinds: []string{workflows.KindEval}},
	} {
		if _, err := f.eachJob(ctx, filter, func(j *jobstore.Job) {
			if j.Tenant != tenant {
				return
			}
			if _, closed := jobstore.ClosedStatus(j.Exec); closed {
				if j.Usage != nil {
					spent += j.Usage.Cost[unit]
				}
			} else if j.Progress.CostUnit == unit && j.Progress.CostSoFar != nil {
				spent += *j.Progress.CostSoFar
			}
		}); err != nil {
			return 0, until, fmt.Errorf("cost_per_month: %w", err)
		}
	}
	return spent, until, nil
}
