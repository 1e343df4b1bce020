package jobcore

import (
	"math"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

// budgetMax bounds every budget amount a caller may give (and extend_by's).
const budgetMax = 1e12

// checkBudget validates start_eval's budget against the suite: finite amounts within
// 0..budgetMax, at least one bound, and max_cost only for a suite that reports costs.
func checkBudget(b *workflows.Budget, s contract.Suite, params map[string]any) (*workflows.Budget, error) {
	if b == nil {
		return nil, nil
	}
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > budgetMax }
	switch {
	case bad(b.MaxCost):
		return nil, invalidArg("budget.max_cost", "must be a number within 0..%g", float64(budgetMax))
	case bad(b.MaxEpisodeSeconds):
		return nil, invalidArg("budget.max_episode_seconds", "must be a number within 0..%g", float64(budgetMax))
	case b.MaxCost == 0 && b.MaxEpisodeSeconds == 0:
		return nil, invalidArg("budget", "give max_cost, max_episode_seconds or both, above 0")
	case b.MaxCost > 0 && s.CostUnit == "":
		return nil, invalidArg("budget.max_cost", "suite %q reports no cost (it declares no cost_unit); use max_episode_seconds", s.Name)
	case b.MaxCost > 0 && s.Kind == contract.SuiteDemo && params["cost"] == nil:
		return nil, invalidArg("budget.max_cost", "the demo suite reports a cost only with params.cost")
	}
	out := *b
	return &out, nil
}

// checkStopWhen validates stop_when and fills min_episodes (so equal requests hash equal).
func checkStopWhen(sw *workflows.StopWhen, episodes int) (*workflows.StopWhen, error) {
	if sw == nil {
		return nil, nil
	}
	out := *sw
	if out.MinEpisodes == 0 {
		out.MinEpisodes = min(workflows.StopWhenMinEpisodesDefault, episodes)
	}
	switch {
	case math.IsNaN(out.StdErrBelow) || math.IsInf(out.StdErrBelow, 0) || out.StdErrBelow <= 0 || out.StdErrBelow > 1e9:
		return nil, invalidArg("stop_when.std_err_below", "is required: a number above 0 (the standard error of the mean score to stop below)")
	case out.MinEpisodes < 2 || out.MinEpisodes > episodes:
		return nil, invalidArg("stop_when.min_episodes", "must be between 2 and episodes (%d)", episodes)
	}
	return &out, nil
}

// costPolicy resolves what the workflow needs about costs: the suite's unit and worst episode
// cost, and the budget in force: the caller's, else the owner's or tenant's default from the
// tenants file (recorded in the input, so a later change of the file never alters a running job).
func (k *evalKind) costPolicy(f *Core, p authz.Principal, args workflows.EvalArgs, s contract.Suite) workflows.CostPolicy {
	cp := workflows.CostPolicy{Unit: s.CostUnit, WorstEpisode: s.WorstEpisodeCost(args.Params)}
	if args.Budget != nil {
		b := *args.Budget
		cp.Budget, cp.BudgetFrom = &b, "start_eval"
		return cp
	}
	d := f.Opts.Tenants.EvalBudgetFor(p.Tenant, p.Subject)
	if d == nil {
		return cp
	}
	b := workflows.Budget{MaxEpisodeSeconds: d.MaxEpisodeSeconds}
	if s.CostUnit != "" && (s.Kind != contract.SuiteDemo || args.Params["cost"] != nil) {
		b.MaxCost = d.MaxCost[s.CostUnit]
	}
	if b.MaxCost > 0 || b.MaxEpisodeSeconds > 0 {
		cp.Budget, cp.BudgetFrom = &b, "tenants_file"
	}
	return cp
}

// checkExtendBy refuses extend_by where the open request takes none (anything but an eval's
// budget request), with reject, or out of range; the workflow's validator checks it again
// against the budget in force.
func checkExtendBy(in ResumeIn, ni *workflows.NeedsInput) error {
	e := in.ExtendBy
	if e == nil {
		return nil
	}
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > budgetMax }
	switch {
	case ni.Scope["approve_extends_by"] == nil:
		return invalidArg("extend_by", "only an eval's budget request takes it; this request is answered with approve or reject alone")
	case in.Decision != workflows.DecisionApprove:
		return invalidArg("extend_by", "only with decision approve")
	case bad(e.MaxCost):
		return invalidArg("extend_by.max_cost", "must be a number within 0..%g", float64(budgetMax))
	case bad(e.MaxEpisodeSeconds):
		return invalidArg("extend_by.max_episode_seconds", "must be a number within 0..%g", float64(budgetMax))
	case e.MaxCost == 0 && e.MaxEpisodeSeconds == 0:
		return invalidArg("extend_by", "raise max_cost or max_episode_seconds by more than 0")
	}
	return nil
}
