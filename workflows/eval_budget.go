package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows/jobstate"
)

// An eval's costs, budget and early stop (CONTRACT.md "Budgets"). Episodes may report a cost
// in the suite's cost unit; the run tallies it, with the seconds its episodes took, in its
// carried state. A budget gates scheduling: an episode starts only when its worst case still
// fits beside what was spent and the worst case of every episode in flight, so with a declared
// worst case (the suite's max_episode_cost, the demo's params.cost) the run never passes the
// budget, and with none (the largest cost seen so far stands in) only the episodes in flight
// can pass it. At the budget the run asks its owner (an input request like any other) to raise
// it (extend_by) or stop; a declined or unanswered request ends the job succeeded, its result
// marked stopped: "budget". stop_when ends it succeeded once the standard error of the mean
// score is small enough (stopped: "precision"). Both are decided in the workflow from history
// alone, behind changeEvalBudget.

// Budget and StopWhen are jobstate's (the caller's words, and the result's).
type (
	Budget   = jobstate.Budget
	StopWhen = jobstate.StopWhen
)

// Why an eval stopped early.
const (
	StoppedBudget    = jobstate.StoppedBudget
	StoppedPrecision = jobstate.StoppedPrecision
)

// changeEvalBudget is the workflow.GetVersion change ID of an eval gating its episodes on a
// budget or stop_when. Asked only by runs that have either, so every other history (all from
// before it) replays without the marker.
const changeEvalBudget = "eval-budget"

// StopWhenMinEpisodesDefault is stop_when.min_episodes when the caller gives none.
const StopWhenMinEpisodesDefault = 30

// CostPolicy is what the frontend resolved at start about an eval's costs.
type CostPolicy struct {
	// Unit is the suite's cost unit ("" when it reports none).
	Unit string `json:"unit,omitempty"`
	// WorstEpisode is the most one episode can cost (0: unknown; the running maximum stands in).
	WorstEpisode float64 `json:"worst_episode,omitempty"`
	// Budget is the budget in force at start: the caller's, else the owner's or tenant's
	// default from the tenants file (BudgetFrom says which). Nil: none.
	Budget     *Budget `json:"budget,omitempty"`
	BudgetFrom string  `json:"budget_from,omitempty"`
}

// Spend is an eval's cost and time tally, carried across continue-as-new.
type Spend struct {
	Cost       float64 `json:"cost,omitempty"`
	Costed     int     `json:"costed,omitempty"` // episodes that reported a cost
	MaxCost    float64 `json:"max_cost_seen,omitempty"`
	Seconds    float64 `json:"seconds,omitempty"`
	MaxSeconds float64 `json:"max_seconds_seen,omitempty"`
	// Budget is the budget now, extensions included (nil: none).
	Budget *Budget `json:"budget,omitempty"`
	// Asks counts the budget requests opened so far (their input IDs are budget-<n>-…).
	Asks      int    `json:"asks,omitempty"`
	Stopped   string `json:"stopped,omitempty"`
	StoppedBy string `json:"stopped_by,omitempty"`
}

// spent tallies one finished episode: its time and, when it reported one, its cost.
func (r *evalRun) spent(ctx workflow.Context, scheduled time.Time, cost *float64) {
	sp := &r.st.Spend
	secs := workflow.Now(ctx).Sub(scheduled).Seconds()
	sp.Seconds += secs
	sp.MaxSeconds = max(sp.MaxSeconds, secs)
	if cost != nil {
		sp.Cost += *cost
		sp.Costed++
		sp.MaxCost = max(sp.MaxCost, *cost)
	}
}

// usage is what the eval used so far (the memo's usage when it ends).
func (r *evalRun) usage() Usage {
	sp := r.st.Spend
	u := Usage{Episodes: r.st.Scored + r.st.Failed, EpisodeSeconds: math.Round(sp.Seconds*1000) / 1000}
	if r.in.Cost.Unit != "" && sp.Costed > 0 {
		u.Cost = map[string]float64{r.in.Cost.Unit: sp.Cost}
	}
	return u
}

// progressCost adds the cost so far to p when the suite reports costs.
func (r *evalRun) progressCost(p *Progress) {
	sp := r.st.Spend
	if r.in.Cost.Unit == "" {
		return
	}
	cost := sp.Cost
	p.CostSoFar, p.CostUnit = &cost, r.in.Cost.Unit
	if sp.Costed > 0 {
		per := sp.Cost / float64(sp.Costed)
		p.CostPerEpisode = &per
	}
}

// summarizeSpend puts the tally, the budget and why the run stopped early in s.
func (r *evalRun) summarizeSpend(s *EvalSummary) {
	sp := r.st.Spend
	if r.in.Cost.Unit != "" {
		cost := sp.Cost
		s.CostSoFar, s.CostUnit = &cost, r.in.Cost.Unit
		if sp.Costed > 0 {
			per := sp.Cost / float64(sp.Costed)
			s.CostPerEpisode = &per
		}
	}
	s.EpisodeSeconds = math.Round(sp.Seconds*1000) / 1000
	if sp.Budget != nil {
		b := *sp.Budget
		s.Budget = &b
		if b.MaxCost > 0 {
			over := math.Max(0, sp.Cost-b.MaxCost)
			s.BudgetOvershoot = &over
		}
	}
	s.Stopped, s.StoppedBy = sp.Stopped, sp.StoppedBy
	if sp.Stopped != "" {
		s.Skipped = r.in.Args.Episodes - r.st.Next
	}
}

// gate decides whether the run may start another episode: a budget's room and stop_when.
type gate struct {
	r  *evalRun
	on bool
	// inflight are the episodes started and not yet finished.
	inflight int
	// blocked is what the last refusal was for: "cost", "seconds", or "" (it was not the budget).
	blocked string
	// stop: stop_when was met (sticky for the run).
	stop bool
}

func (r *evalRun) newGate(ctx workflow.Context) *gate {
	g := &gate{r: r}
	if r.st.Spend.Budget == nil && r.in.Cost.Budget != nil && r.st.Next == 0 {
		b := *r.in.Cost.Budget
		r.st.Spend.Budget = &b
	}
	if r.st.Spend.Budget != nil || r.in.Args.StopWhen != nil {
		g.on = workflow.GetVersion(ctx, changeEvalBudget, workflow.DefaultVersion, 1) >= 1
	}
	return g
}

// mayStart reports whether one more episode fits; when the budget is what refuses, blocked says which.
func (g *gate) mayStart() bool {
	if !g.on {
		return true
	}
	if g.precise() {
		return false
	}
	sp := &g.r.st.Spend
	b := sp.Budget
	if b == nil {
		return true
	}
	if b.MaxCost > 0 && !fits(sp.Cost, g.inflight, g.worstCost(), b.MaxCost) {
		g.blocked = "cost"
		return false
	}
	if b.MaxEpisodeSeconds > 0 && !fits(sp.Seconds, g.inflight, g.worstSeconds(), b.MaxEpisodeSeconds) {
		g.blocked = "seconds"
		return false
	}
	return true
}

// fits: one more episode of worst case worst (negative: unknown) fits under limit beside
// spent and inflight episodes of the same worst case. With the worst case unknown (nothing
// finished yet) only one episode runs at a time, to learn it.
func fits(spent float64, inflight int, worst, limit float64) bool {
	if worst < 0 {
		return inflight == 0 && spent < limit
	}
	return spent+float64(inflight+1)*worst <= limit+1e-9*math.Max(1, limit)
}

func (g *gate) finished() int { return g.r.st.Scored + g.r.st.Failed }

// worstCost is the most one episode may cost: declared, else the largest seen, else 0 once
// episodes finished without reporting any, else unknown (-1).
func (g *gate) worstCost() float64 {
	sp := g.r.st.Spend
	switch {
	case g.r.in.Cost.WorstEpisode > 0:
		return g.r.in.Cost.WorstEpisode
	case sp.Costed > 0:
		return sp.MaxCost
	case g.finished() > 0:
		return 0
	}
	return -1
}

// worstSeconds is the longest an episode took so far (-1 before any finished).
func (g *gate) worstSeconds() float64 {
	if g.finished() == 0 {
		return -1
	}
	return g.r.st.Spend.MaxSeconds
}

// precise reports whether stop_when is met: at least min_episodes scored and the standard
// error of their mean below std_err_below. The standard error assumes independent episodes.
func (g *gate) precise() bool {
	sw := g.r.in.Args.StopWhen
	if !g.on || sw == nil {
		return false
	}
	if !g.stop {
		st := g.r.st
		if st.Scored >= max(2, sw.MinEpisodes) {
			_, se := st.estimate()
			g.stop = se < sw.StdErrBelow
		}
	}
	return g.stop
}

// askBudget asks the owner to raise the budget the run has reached (which: "cost" or
// "seconds"). true: raised, go on; false: declined or unanswered (the run stops, succeeded).
// An error is a cancel while waiting (the job's end is recorded).
func (r *evalRun) askBudget(ctx workflow.Context, which string) (bool, error) {
	sp := &r.st.Spend
	sp.Asks++
	ext := Budget{}
	if b := r.in.Cost.Budget; b != nil {
		// Approving without extend_by (a page, MRTR, Tasks) raises each bound by its first amount.
		ext = *b
	}
	if ext.MaxCost == 0 && sp.Budget.MaxCost > 0 {
		ext.MaxCost = sp.Budget.MaxCost
	}
	if ext.MaxEpisodeSeconds == 0 && sp.Budget.MaxEpisodeSeconds > 0 {
		ext.MaxEpisodeSeconds = sp.Budget.MaxEpisodeSeconds
	}
	a := r.in.Args
	scope := map[string]any{"suite": a.Suite, "episodes": a.Episodes, "episodes_done": r.st.Scored + r.st.Failed,
		"budget": *sp.Budget, "spent": map[string]any{"cost": sp.Cost, "episode_seconds": sp.Seconds},
		"approve_extends_by": ext}
	if r.in.Cost.Unit != "" {
		scope["cost_unit"] = r.in.Cost.Unit
	}
	timeout := r.in.Approval.Timeout.D()
	if timeout <= 0 {
		timeout = 24 * time.Hour
	}
	current := *sp.Budget
	err := r.askInput(ctx, InputRequest{
		Name:         fmt.Sprintf("budget-%d", sp.Asks),
		Prompt:       r.budgetPrompt(which),
		Scope:        scope,
		ScopeDigest:  Digest(scope),
		Approver:     authz.ApproverOwner,
		Timeout:      timeout,
		Soft:         true,
		AnswerSchema: budgetAnswerSchema(),
		CheckExtend:  func(b Budget) string { return checkExtend(current, b) },
	}, r.progress)
	if errors.Is(err, errInputDeclined) {
		sp.Stopped = StoppedBudget
		if r.answer != nil && r.answer.Decision == DecisionReject {
			sp.StoppedBy = r.answer.Principal.Subject
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if r.answer.ExtendBy != nil {
		ext = *r.answer.ExtendBy
	}
	if sp.Budget.MaxCost > 0 {
		sp.Budget.MaxCost += ext.MaxCost
	}
	if sp.Budget.MaxEpisodeSeconds > 0 {
		sp.Budget.MaxEpisodeSeconds += ext.MaxEpisodeSeconds
	}
	r.setStatus(ctx, StatusRunning)
	r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "running")})
	return true, nil
}

// budgetPrompt says what was spent, on how many episodes, and the estimate so far:
// "Spent 50.00 usd on 1,234 of 20,000 episodes (mean 0.712 ± 0.013). Raise the budget?"
func (r *evalRun) budgetPrompt(which string) string {
	sp := r.st.Spend
	spent := fmt.Sprintf("%s episode-seconds", thousands(strconv.FormatFloat(sp.Seconds, 'f', 0, 64)))
	if which == "cost" {
		unit := r.in.Cost.Unit
		if unit == "" {
			unit = "(cost)"
		}
		spent = thousands(strconv.FormatFloat(sp.Cost, 'f', 2, 64)) + " " + unit
	}
	mean, se := r.st.estimate()
	return fmt.Sprintf("Spent %s on %s of %s episodes (mean %.3f ± %.3f). Raise the budget?", spent,
		thousands(strconv.Itoa(r.st.Scored+r.st.Failed)), thousands(strconv.Itoa(r.in.Args.Episodes)), mean, se)
}

// thousands puts commas in the integer part of a formatted non-negative number.
func thousands(s string) string {
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String()
}

// checkExtend says what is wrong with extend_by against the budget it would raise ("" if nothing).
func checkExtend(current, ext Budget) string {
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1e12 }
	switch {
	case bad(ext.MaxCost):
		return "extend_by.max_cost must be a finite number within 0..1e12"
	case bad(ext.MaxEpisodeSeconds):
		return "extend_by.max_episode_seconds must be a finite number within 0..1e12"
	case ext.MaxCost == 0 && ext.MaxEpisodeSeconds == 0:
		return "extend_by must raise max_cost or max_episode_seconds by more than 0"
	case ext.MaxCost > 0 && current.MaxCost == 0:
		return "extend_by.max_cost: the budget has no max_cost to raise"
	case ext.MaxEpisodeSeconds > 0 && current.MaxEpisodeSeconds == 0:
		return "extend_by.max_episode_seconds: the budget has no max_episode_seconds to raise"
	}
	return ""
}

// ExtendByText is how a resume seal binds extend_by: "" for none, else its canonical JSON.
func ExtendByText(b *Budget) string {
	if b == nil {
		return ""
	}
	out, _ := json.Marshal(b) // a struct of two float64s: never fails (NaN is refused before sealing)
	return string(out)
}

func budgetAnswerSchema() map[string]any {
	s := approvalAnswerSchema()
	s["properties"].(map[string]any)["extend_by"] = map[string]any{
		"type":        "object",
		"description": "with approve: how much to raise the budget by (default: scope.approve_extends_by)",
		"properties": map[string]any{
			"max_cost":            map[string]any{"type": "number", "minimum": 0},
			"max_episode_seconds": map[string]any{"type": "number", "minimum": 0},
		},
	}
	return s
}
