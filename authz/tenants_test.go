package authz

import (
	"strings"
	"testing"
	"time"
)

func TestTenantsFor(t *testing.T) {
	_, err := ParseTenants([]byte(`{
		"defaults": {"running_jobs_per_owner": 5},
		"tenants": {
			"acme":   {"fairness_weight": 2, "running_jobs_per_tenant": 50},
			"globex": {"running_jobs_per_owner": -1, "fairness_weight": 5000}
		}}`))
	if err == nil {
		t.Fatal("weight 5000 accepted")
	}
	cfg, err := ParseTenants([]byte(`{
		"defaults": {"running_jobs_per_owner": 5},
		"tenants": {
			"acme":   {"fairness_weight": 2, "running_jobs_per_tenant": 50},
			"globex": {"running_jobs_per_owner": -1}
		}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant string
		want   TenantPolicy
	}{
		{"acme", TenantPolicy{2, Limits{5, 50, EpisodesInFlightPerTenantDefault, StartsPerMinutePerOwnerDefault}, nil}},
		{"globex", TenantPolicy{1, Limits{0, RunningJobsPerTenantDefault, EpisodesInFlightPerTenantDefault, StartsPerMinutePerOwnerDefault}, nil}},
		{"initech", TenantPolicy{1, Limits{5, RunningJobsPerTenantDefault, EpisodesInFlightPerTenantDefault, StartsPerMinutePerOwnerDefault}, nil}},
	} {
		if got := cfg.For(tc.tenant); got != tc.want {
			t.Errorf("For(%s) = %+v, want %+v", tc.tenant, got, tc.want)
		}
	}
	if got := (Tenants{}).For("x"); got != (TenantPolicy{FairnessWeight: 1}) {
		t.Errorf("zero Tenants: %+v, want no limits and weight 1", got)
	}
	if got := Unlimited().For("x"); got.Limits != (Limits{}) {
		t.Errorf("Unlimited: %+v", got)
	}
	if _, err := ParseTenants([]byte(`{"defaults": {"running_jobs": 1}}`)); err == nil {
		t.Error("unknown field accepted")
	}
}

func TestCheckQuota(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	pol := TenantPolicy{Limits: Limits{RunningJobsPerOwner: 2, RunningJobsPerTenant: 3, EpisodesInFlightPerTenant: 10, StartsPerMinutePerOwner: 4}}
	for _, tc := range []struct {
		name     string
		u        Usage
		episodes int
		limit    string
		retry    time.Duration
	}{
		{"within", Usage{OwnerRunning: 1, TenantRunning: 2, TenantEpisodes: 4, OwnerStartsLastMinute: 3}, 6, "", 0},
		{"owner running", Usage{OwnerRunning: 2, TenantRunning: 2}, 0, "running_jobs_per_owner", 0},
		{"tenant running", Usage{OwnerRunning: 0, TenantRunning: 3}, 0, "running_jobs_per_tenant", 0},
		{"episodes", Usage{TenantEpisodes: 5}, 6, "episodes_in_flight_per_tenant", 0},
		{"episodes exact fit", Usage{TenantEpisodes: 4}, 6, "", 0},
		{"non-eval ignores episodes", Usage{TenantEpisodes: 10}, 0, "", 0},
		{"start rate", Usage{OwnerStartsLastMinute: 4, OldestStart: now.Add(-45 * time.Second)}, 0, "starts_per_minute_per_owner", 15 * time.Second},
		{"start rate unknown oldest", Usage{OwnerStartsLastMinute: 4}, 0, "starts_per_minute_per_owner", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckQuota(pol, tc.u, tc.episodes, now)
			if tc.limit == "" {
				if r != nil {
					t.Fatalf("refused: %+v", r)
				}
				return
			}
			if r == nil || r.Limit != tc.limit || r.RetryAfter != tc.retry {
				t.Fatalf("got %+v, want %s retry %v", r, tc.limit, tc.retry)
			}
			if strings.TrimSpace(r.Message) == "" {
				t.Fatal("no message")
			}
		})
	}
	if r := CheckQuota(TenantPolicy{}, Usage{OwnerRunning: 1e6, TenantRunning: 1e6, TenantEpisodes: 1e6, OwnerStartsLastMinute: 1e6}, 1e6, now); r != nil {
		t.Fatalf("no limits configured, refused: %+v", r)
	}
}

// TestEvalBudgetDefaults: an eval's default budget is its owner's, else its tenant's, else the
// defaults'; bad values are refused at load, naming the field.
func TestEvalBudgetDefaults(t *testing.T) {
	tt, err := ParseTenants([]byte(`{"defaults": {"eval_budget": {"max_cost": {"usd": 10}}},
		"tenants": {"acme": {"eval_budget": {"max_cost": {"usd": 50, "tokens": 2000000}, "max_episode_seconds": 3600}}},
		"owner_eval_budgets": {"acme": {"ann": {"max_cost": {"usd": 5}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if b := tt.EvalBudgetFor("acme", "ann"); b == nil || b.MaxCost["usd"] != 5 || b.MaxEpisodeSeconds != 0 {
		t.Errorf("owner's: %+v", b)
	}
	if b := tt.EvalBudgetFor("acme", "bo"); b == nil || b.MaxCost["tokens"] != 2000000 || b.MaxEpisodeSeconds != 3600 {
		t.Errorf("tenant's: %+v", b)
	}
	if b := tt.EvalBudgetFor("globex", "bo"); b == nil || b.MaxCost["usd"] != 10 {
		t.Errorf("defaults': %+v", b)
	}
	if b := DefaultTenants().EvalBudgetFor("acme", "ann"); b != nil {
		t.Errorf("built-in defaults have no budget: %+v", b)
	}
	for doc, want := range map[string]string{
		`{"defaults": {"eval_budget": {"max_cost": {"usd": -1}}}}`:                             "eval_budget.max_cost.usd",
		`{"defaults": {"eval_budget": {"max_cost": {"US D": 1}}}}`:                             "eval_budget.max_cost: unit",
		`{"defaults": {}, "tenants": {"acme": {"eval_budget": {"max_episode_seconds": -5}}}}`:  "tenant acme: eval_budget.max_episode_seconds",
		`{"defaults": {}, "cost_per_month": {"acme": {"usd": -1}}}`:                            "cost_per_month.acme",
		`{"defaults": {}, "cost_per_month": {"Not A Tenant!": {}}}`:                            "cost_per_month",
		`{"defaults": {}, "owner_eval_budgets": {"Not A Tenant!": {}}}`:                        "owner_eval_budgets",
		`{"defaults": {}, "owner_eval_budgets": {"acme": {"ann": {"max_cost": {"usd": -2}}}}}`: `owner_eval_budgets.acme["ann"].max_cost.usd`,
	} {
		if _, err := ParseTenants([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error naming %q", doc, err, want)
		}
	}
}
