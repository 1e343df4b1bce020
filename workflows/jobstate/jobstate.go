// Package jobstate holds the plain words of a job's state that workflows record and clients
// read: its status, its progress, the reason it failed and a succeeded eval's summary. It imports nothing of jobgate, so
// the wire types (frontend/wire) can use them without linking workflows, and workflows keeps
// its names for them as aliases (workflows.Status is jobstate.Status).
package jobstate

import "time"

// Status is the job status the contract exposes.
type Status string

// The statuses of CONTRACT.md's job view.
const (
	StatusQueued        Status = "queued"
	StatusRunning       Status = "running"
	StatusAwaitingInput Status = "awaiting_input"
	StatusSucceeded     Status = "succeeded"
	StatusFailed        Status = "failed"
	StatusCancelling    Status = "cancelling"
	StatusCancelled     Status = "cancelled"
)

// Terminal reports whether no further transition can happen.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Progress is the job's progress as of its last memo update.
type Progress struct {
	Done    int       `json:"done" jsonschema:"units done (episodes scored, rows exported)"`
	Failed  int       `json:"failed" jsonschema:"units that failed (episodes; 0 for exports)"`
	Total   int       `json:"total" jsonschema:"units in the job; 0 while not yet known"`
	Unit    string    `json:"unit,omitempty" jsonschema:"what done, failed and total count: episodes or rows"`
	Message string    `json:"message,omitempty" jsonschema:"what the job is doing"`
	AsOf    time.Time `json:"as_of" jsonschema:"when the job last reported progress"`
	// An eval's cost so far, when its suite reports costs (absent otherwise, and for exports).
	CostSoFar      *float64 `json:"cost_so_far,omitempty" jsonschema:"evals whose suite reports costs: what the finished episodes cost so far, in cost_unit"`
	CostUnit       string   `json:"cost_unit,omitempty" jsonschema:"the unit of cost_so_far and cost_per_episode (the suite's, e.g. usd or tokens)"`
	CostPerEpisode *float64 `json:"cost_per_episode,omitempty" jsonschema:"mean cost of the episodes that reported one, in cost_unit"`
}

// Budget bounds what an eval may spend (CONTRACT.md "Budgets"): its episodes' reported cost in
// the suite's cost unit, and the seconds its episodes ran (scheduling to outcome, summed). A
// zero field is no bound.
type Budget struct {
	MaxCost           float64 `json:"max_cost,omitempty" jsonschema:"the most the episodes may cost together, in the suite's cost_unit; reaching it asks the owner (awaiting_input) to raise it or stop"`
	MaxEpisodeSeconds float64 `json:"max_episode_seconds,omitempty" jsonschema:"the most episode-seconds (each episode's time from scheduling to outcome, summed) the run may use; reaching it asks like max_cost"`
}

// StopWhen ends an eval early once its estimate is precise enough: once at least MinEpisodes
// episodes scored and the standard error of the mean score is below StdErrBelow, no further
// episode is scheduled (those in flight finish). The standard error assumes independent
// episodes.
type StopWhen struct {
	StdErrBelow float64 `json:"std_err_below" jsonschema:"stop scheduling once the standard error of the mean score is below this (assumes independent episodes)"`
	MinEpisodes int     `json:"min_episodes,omitempty" jsonschema:"never stop before this many episodes scored (at least 2; default 30)"`
}

// Why an eval stopped before running every episode it was asked for (EvalSummary.Stopped).
const (
	StoppedBudget    = "budget"
	StoppedPrecision = "precision"
)

// JobError is the machine-readable reason a job failed or was cancelled.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// EvalSummary is the summary a succeeded eval ends with: the head of its result as the workflow
// records it (workflows.EvalResult) and as get_eval shows it (wire.EvalResultView), embedded in
// both so the two cannot drift.
type EvalSummary struct {
	Episodes   int     `json:"episodes" jsonschema:"episodes the run was asked for"`
	Scored     int     `json:"scored" jsonschema:"episodes that returned a score"`
	Passed     int     `json:"passed" jsonschema:"scored episodes at or above the suite's pass threshold"`
	Failed     int     `json:"failed" jsonschema:"episodes that failed after their retries"`
	MeanScore  float64 `json:"mean_score" jsonschema:"mean of the scores"`
	StdErr     float64 `json:"std_err" jsonschema:"standard error of the mean score"`
	ApprovedBy string  `json:"approved_by,omitempty" jsonschema:"who approved the run, when it needed approval"`
	// Costs and budgets (absent for runs without them, and for every run from before them).
	CostSoFar      *float64 `json:"cost_so_far,omitempty" jsonschema:"what the episodes cost, in cost_unit (suites that report costs)"`
	CostUnit       string   `json:"cost_unit,omitempty" jsonschema:"the unit of cost_so_far and cost_per_episode"`
	CostPerEpisode *float64 `json:"cost_per_episode,omitempty" jsonschema:"mean cost of the episodes that reported one"`
	EpisodeSeconds float64  `json:"episode_seconds,omitempty" jsonschema:"seconds the episodes ran (scheduling to outcome), summed"`
	Budget         *Budget  `json:"budget,omitempty" jsonschema:"the budget the run ended under, extensions included"`
	// BudgetOvershoot is what was spent past budget.max_cost: only episodes already in flight
	// when the budget was reached can cause it, and only when the suite declares no worst case.
	BudgetOvershoot *float64 `json:"budget_overshoot,omitempty" jsonschema:"cost spent past budget.max_cost by episodes already in flight (0 when none)"`
	Stopped         string   `json:"stopped,omitempty" jsonschema:"why the run ended before all its episodes: budget (the owner declined to raise it, or did not answer) or precision (stop_when was met)"`
	Skipped         int      `json:"skipped,omitempty" jsonschema:"episodes never run because the run stopped early"`
	StoppedBy       string   `json:"stopped_by,omitempty" jsonschema:"who declined to raise the budget"`
}

// Usage is what a finished job used, recorded in its memo (workflows.MemoUsage) when it ends:
// what get_usage sums. Absent on jobs that ended before usage was recorded.
type Usage struct {
	Episodes       int     `json:"episodes,omitempty" jsonschema:"episodes run (scored or failed)"`
	EpisodeSeconds float64 `json:"episode_seconds,omitempty" jsonschema:"seconds the episodes ran, scheduling to outcome, summed"`
	// Cost is by cost unit (a job has at most one; a rollup may hold several).
	Cost  map[string]float64 `json:"cost,omitempty" jsonschema:"what the episodes cost, by cost unit"`
	Rows  int64              `json:"rows,omitempty" jsonschema:"rows exported"`
	Bytes int64              `json:"bytes,omitempty" jsonschema:"bytes of exported artifact"`
}

// Add adds u to the running sum s.
func (s *Usage) Add(u Usage) {
	s.Episodes += u.Episodes
	s.EpisodeSeconds += u.EpisodeSeconds
	s.Rows += u.Rows
	s.Bytes += u.Bytes
	for unit, c := range u.Cost {
		if s.Cost == nil {
			s.Cost = map[string]float64{}
		}
		s.Cost[unit] += c
	}
}
