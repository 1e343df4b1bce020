package authz

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Eval budgets and monthly cost quotas of the tenants file (frontend/README.md "What an eval
// costs" and "Usage per tenant").

// EvalBudget is a default eval budget. Costs are per cost unit, since suites report theirs in
// different ones ({"usd": 50, "tokens": 2000000}): an eval gets the max_cost of its suite's unit.
type EvalBudget struct {
	MaxCost           map[string]float64 `json:"max_cost,omitempty"`
	MaxEpisodeSeconds float64            `json:"max_episode_seconds,omitempty"`
}

// EvalBudgetFor is the default budget of an eval of owner in tenant (nil: none): the owner's,
// else the tenant's, else the defaults'.
func (t Tenants) EvalBudgetFor(tenant, owner string) *EvalBudget {
	if b, ok := t.OwnerEvalBudgets[tenant][owner]; ok {
		return &b
	}
	if o, ok := t.Tenants[tenant]; ok {
		if o.EvalBudget != nil {
			return o.EvalBudget
		}
	}
	return t.Defaults.EvalBudget
}

// checkEvalBudget says what is wrong with a default budget ("" when nothing).
func checkEvalBudget(b EvalBudget) string {
	bad := func(v float64) bool { return v != v || v < 0 || v > 1e12 }
	for _, u := range slices.Sorted(maps.Keys(b.MaxCost)) {
		if u == "" || len(u) > 16 || strings.Trim(u, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			return fmt.Sprintf("max_cost: unit %q: want 1-16 of [a-z0-9_], like usd or tokens", u)
		}
		if bad(b.MaxCost[u]) {
			return fmt.Sprintf("max_cost.%s: must be a number within 0..1e12", u)
		}
	}
	if bad(b.MaxEpisodeSeconds) {
		return "max_episode_seconds: must be a number within 0..1e12"
	}
	return ""
}

// Tenants is the server-side fairness and quota configuration: defaults and per-tenant
// overrides, field by field.
type Tenants struct {
	Defaults TenantPolicy            `json:"defaults"`
	Tenants  map[string]TenantPolicy `json:"tenants,omitempty"`
	// Notify are the endpoints each tenant's events are sent to, by tenant (activities/README.md
	// "Notifications"). Kept apart from the policies so that no tenant ever inherits another's
	// endpoints. Defaults to none: no notification is sent.
	Notify map[string][]NotifyEndpoint `json:"notify,omitempty"`
	// OwnerEvalBudgets are owners' own default eval budgets, by tenant and subject, over the
	// tenant's eval_budget.
	OwnerEvalBudgets map[string]map[string]EvalBudget `json:"owner_eval_budgets,omitempty"`
	// CostPerMonth caps what each tenant's evals may cost in a calendar month (UTC), by tenant
	// and cost unit ({"acme": {"usd": 1000}}): a start whose budget does not fit in what is
	// left is refused (quota_exceeded), and so is a budget raise past it.
	CostPerMonth map[string]map[string]float64 `json:"cost_per_month,omitempty"`
}

// checkBudgets checks the tenants file's default eval budgets and monthly cost quotas, naming
// the field at fault.
func checkBudgets(t Tenants) error {
	if b := t.Defaults.EvalBudget; b != nil {
		if msg := checkEvalBudget(*b); msg != "" {
			return fmt.Errorf("tenants file: defaults: eval_budget.%s", msg)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(t.Tenants)) {
		if b := t.Tenants[n].EvalBudget; b != nil {
			if msg := checkEvalBudget(*b); msg != "" {
				return fmt.Errorf("tenants file: tenant %s: eval_budget.%s", n, msg)
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(t.CostPerMonth)) {
		if err := ValidTenant(n); err != nil {
			return fmt.Errorf("tenants file: cost_per_month: %q is not a tenant ID: %v", n, err)
		}
		if msg := checkEvalBudget(EvalBudget{MaxCost: t.CostPerMonth[n]}); msg != "" {
			return fmt.Errorf("tenants file: cost_per_month.%s: %s", n, strings.TrimPrefix(msg, "max_cost: "))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(t.OwnerEvalBudgets)) {
		if err := ValidTenant(n); err != nil {
			return fmt.Errorf("tenants file: owner_eval_budgets: %q is not a tenant ID: %v", n, err)
		}
		for _, o := range slices.Sorted(maps.Keys(t.OwnerEvalBudgets[n])) {
			if msg := checkEvalBudget(t.OwnerEvalBudgets[n][o]); msg != "" {
				return fmt.Errorf("tenants file: owner_eval_budgets.%s[%q].%s", n, o, msg)
			}
		}
	}
	return nil
}
