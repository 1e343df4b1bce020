package tests

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// budgetPrompt is what a budget request says (issue 33): what was spent, on how many episodes,
// and the estimate so far.
var budgetPrompt = regexp.MustCompile(`^Spent \d+\.\d\d usd on \d+ of 12 episodes \(mean \d\.\d{3} ± \d\.\d{3}\)\. Raise the budget\?$`)

func evalResult(t *testing.T, v *jobcore.JobView) wire.EvalResultView {
	t.Helper()
	var r wire.EvalResultView
	raw, err := json.Marshal(v.Result)
	must(t, err)
	must(t, json.Unmarshal(raw, &r))
	return r
}

// waitBudgetRequestN is waitBudgetRequest for any first request of an eval of n episodes.
func waitBudgetRequestN(t *testing.T, cs *mcp.ClientSession, h string, n int) *jobcore.JobView {
	t.Helper()
	v := waitBudgetRequest(t, cs, h, "")
	if !strings.Contains(v.NeedsInput.Prompt, fmt.Sprintf(" of %d episodes", n)) {
		t.Fatalf("prompt %q", v.NeedsInput.Prompt)
	}
	return v
}

// waitBudgetRequest waits for a budget request other than after (an input ID; "" for any).
func waitBudgetRequest(t *testing.T, cs *mcp.ClientSession, h, after string) *jobcore.JobView {
	t.Helper()
	var v *jobcore.JobView
	eventually(t, 60*time.Second, "a budget request", func() bool {
		v = mustView(t, call(t, cs, "get_eval", map[string]any{"handle": h}))
		return v.Status == workflows.StatusAwaitingInput && v.NeedsInput != nil && v.NeedsInput.InputID != after
	})
	if !strings.HasPrefix(v.NeedsInput.InputID, "budget-") {
		t.Fatalf("open request %s is not a budget request", v.NeedsInput.InputID)
	}
	return v
}

// TestEvalBudget: an eval with budget.max_cost (demo episodes of params.cost 0.1, so a
// declared worst case) runs until one more episode could pass the budget, then asks its owner
// with what it spent; approved with extend_by it goes on to the raised budget and asks again;
// rejected it ends succeeded with a partial result marked stopped: "budget". Costs never pass
// the budget, and list_episodes shows each episode's cost, summing to the result's.
func TestEvalBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.session(ana, 0, "")
	args := startArgs(uniqueKey(t), 12, map[string]any{"episode_ms": 0, "fail_rate": 0, "cost": 0.1})
	args["concurrency"] = 3
	args["budget"] = map[string]any{"max_cost": 0.35}
	v := mustView(t, call(t, cs, "start_eval", args))

	first := waitBudgetRequest(t, cs, v.Handle, "")
	ni := first.NeedsInput
	if !budgetPrompt.MatchString(ni.Prompt) {
		t.Fatalf("prompt %q", ni.Prompt)
	}
	if ni.Approver != "owner" || ni.Scope["approve_extends_by"] == nil || first.Progress.CostUnit != "usd" {
		t.Fatalf("budget request %+v, progress %+v", ni, first.Progress)
	}
	spent1 := *first.Progress.CostSoFar
	if spent1 > 0.35+1e-9 || spent1+0.1 <= 0.35 {
		t.Fatalf("at the first ask spent %v: want within (0.25, 0.35]: one more worst case (0.1) must not fit", spent1)
	}
	t.Logf("asked at %.4f usd after %d episodes: %s", spent1, first.Progress.Done, ni.Prompt)

	// extend_by with reject, and extend_by of a bound the budget lacks, are refused naming it.
	e := mustErr(t, call(t, cs, "resume_eval", acResumeArgs(first, "reject", map[string]any{"extend_by": map[string]any{"max_cost": 1}})), "invalid_argument")
	if !strings.HasPrefix(e.Message, "extend_by") {
		t.Fatalf("message %q", e.Message)
	}
	e = mustErr(t, call(t, cs, "resume_eval", acResumeArgs(first, "approve", map[string]any{"extend_by": map[string]any{"max_episode_seconds": 60}})), "invalid_argument")
	if !strings.Contains(e.Message, "extend_by.max_episode_seconds") {
		t.Fatalf("message %q", e.Message)
	}

	mustView(t, call(t, cs, "resume_eval", acResumeArgs(first, "approve", map[string]any{"extend_by": map[string]any{"max_cost": 0.3}})))
	second := waitBudgetRequest(t, cs, v.Handle, ni.InputID)
	spent2 := *second.Progress.CostSoFar
	if spent2 > 0.65+1e-9 || spent2+0.1 <= 0.65 || second.Progress.Done <= first.Progress.Done {
		t.Fatalf("at the second ask spent %v after %d episodes: want within (0.55, 0.65], more than %d", spent2, second.Progress.Done, first.Progress.Done)
	}

	end := mustView(t, call(t, cs, "resume_eval", acResumeArgs(second, "reject", map[string]any{"comment": "enough"})))
	end = waitStatus(t, cs, end.Handle, workflows.StatusSucceeded, 60*time.Second)
	if end.Error != nil {
		t.Fatalf("a budget stop is no error: %+v", end.Error)
	}
	r := evalResult(t, end)
	if r.Stopped != "budget" || r.StoppedBy != "ana" || r.Skipped != 12-r.Scored-r.Failed || r.Skipped == 0 {
		t.Fatalf("result %+v", r)
	}
	if r.CostSoFar == nil || *r.CostSoFar > 0.65+1e-9 || r.Budget == nil || math.Abs(r.Budget.MaxCost-0.65) > 1e-9 ||
		r.BudgetOvershoot == nil || *r.BudgetOvershoot != 0 || r.CostUnit != "usd" || r.CostPerEpisode == nil {
		t.Fatalf("result costs %+v", r)
	}

	// The episode log: every episode's cost, as the demo computes it, summing to the result's.
	page, te, _ := epCall(t, cs, map[string]any{"handle": end.Handle, "page_size": 100})
	if te != nil {
		t.Fatalf("list_episodes: %s", te.Message)
	}
	sum := 0.0
	for _, ep := range page.Episodes {
		if ep.Cost == nil || *ep.Cost != contract.DemoCost(ep.OperationID, 0.1) {
			t.Fatalf("episode %d cost %v, want %v", ep.Index, ep.Cost, contract.DemoCost(ep.OperationID, 0.1))
		}
		sum += *ep.Cost
	}
	if len(page.Episodes) != r.Scored+r.Failed || math.Abs(sum-*r.CostSoFar) > 1e-9 {
		t.Fatalf("%d episodes summing to %v; result: %d, %v", len(page.Episodes), sum, r.Scored+r.Failed, *r.CostSoFar)
	}
	t.Logf("budget run: %d of 12 episodes, %.4f usd (budget 0.35 + 0.30), mean %.3f ± %.3f, skipped %d",
		r.Scored+r.Failed, *r.CostSoFar, r.MeanScore, r.StdErr, r.Skipped)
}

// TestEvalStopWhen: a 20,000-episode demo eval with stop_when stops scheduling once 50 scored
// and the standard error is below 0.02, finishes the episodes in flight and succeeds marked
// stopped: "precision" with the episodes it skipped.
func TestEvalStopWhen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.session(ana, 0, "")
	args := startArgs(uniqueKey(t), 20000, map[string]any{"episode_ms": 0, "fail_rate": 0})
	args["concurrency"] = 16
	args["stop_when"] = map[string]any{"std_err_below": 0.02, "min_episodes": 50}
	v := mustView(t, call(t, cs, "start_eval", args))
	v = waitStatus(t, cs, v.Handle, workflows.StatusAwaitingInput, 30*time.Second) // demo: > 100 episodes asks first
	mustView(t, call(t, cs, "resume_eval", acResumeArgs(v, "approve", nil)))
	end := waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 120*time.Second)
	r := evalResult(t, end)
	ran := r.Scored + r.Failed
	if r.Stopped != "precision" || r.StdErr >= 0.02 || r.Skipped != 20000-ran || ran < 50 || ran > 400 {
		t.Fatalf("result %+v", r)
	}
	t.Logf("stop_when: %d of 20,000 episodes, mean %.4f ± %.4f, skipped %d", ran, r.MeanScore, r.StdErr, r.Skipped)
}

// TestEvalBudgetArguments: every new argument is checked, naming its field; nothing starts.
func TestEvalBudgetArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noWorker: true})
	cs := b.session(ana, 0, "")
	base := func(mod func(map[string]any)) map[string]any {
		a := startArgs("k", 10, map[string]any{"cost": 0.1})
		mod(a)
		return a
	}
	for _, c := range []struct {
		name  string
		args  map[string]any
		field string
	}{
		{"NegativeMaxCost", base(func(a map[string]any) { a["budget"] = map[string]any{"max_cost": -1} }), "budget.max_cost"},
		{"EmptyBudget", base(func(a map[string]any) { a["budget"] = map[string]any{} }), "budget"},
		{"NegativeSeconds", base(func(a map[string]any) { a["budget"] = map[string]any{"max_episode_seconds": -1} }), "budget.max_episode_seconds"},
		{"MaxCostWithoutDemoCost", base(func(a map[string]any) {
			a["params"] = map[string]any{}
			a["budget"] = map[string]any{"max_cost": 1}
		}), "budget.max_cost"},
		{"NegativeDemoCost", base(func(a map[string]any) { a["params"] = map[string]any{"cost": -1} }), "params.cost"},
		{"StopWhenNoStdErr", base(func(a map[string]any) { a["stop_when"] = map[string]any{"std_err_below": 0} }), "stop_when.std_err_below"},
		{"StopWhenMinOne", base(func(a map[string]any) { a["stop_when"] = map[string]any{"std_err_below": 0.1, "min_episodes": 1} }), "stop_when.min_episodes"},
		{"StopWhenMinAboveEpisodes", base(func(a map[string]any) { a["stop_when"] = map[string]any{"std_err_below": 0.1, "min_episodes": 11} }), "stop_when.min_episodes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := mustErr(t, call(t, cs, "start_eval", c.args), "invalid_argument")
			if !strings.HasPrefix(e.Message, c.field+":") {
				t.Fatalf("message %q does not name %s", e.Message, c.field)
			}
		})
	}
}

// TestEvalBudgetMRTR: a budget request is an input request like any other: a 2026 client that
// declares elicitation is asked it by get_eval (the prompt as the tool shows it) and its
// approval, which cannot carry extend_by, raises the budget by approve_extends_by (the first
// amount), until every episode ran; no request is left open and nothing stopped early.
func TestEvalBudgetMRTR(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var asked atomic.Int32
	cs := b.mrtrSession(ana, 0, func(r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked.Add(1)
		if !regexp.MustCompile(`^Spent \d+\.\d\d usd on \d of 6 episodes .*Raise the budget\?`).MatchString(r.Params.Message) {
			t.Errorf("elicitation message: %q", r.Params.Message)
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}, nil
	}, false)
	args := startArgs(uniqueKey(t), 6, map[string]any{"episode_ms": 0, "fail_rate": 0, "cost": 0.1})
	args["concurrency"] = 2
	args["budget"] = map[string]any{"max_cost": 0.2}
	v := mustView(t, call(t, cs, "start_eval", args))
	var end *jobcore.JobView
	eventually(t, 60*time.Second, "succeeded through MRTR answers", func() bool {
		end = mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v.Handle}))
		return end.Status == workflows.StatusSucceeded
	})
	r := evalResult(t, end)
	raises := math.Round((r.Budget.MaxCost - 0.2) / 0.2)
	if r.Stopped != "" || r.Scored != 6 || asked.Load() < 1 || int(raises) != int(asked.Load()) ||
		r.CostSoFar == nil || *r.CostSoFar > r.Budget.MaxCost+1e-9 {
		t.Fatalf("asked %d; result %+v budget %+v", asked.Load(), r, r.Budget)
	}
	t.Logf("MRTR: %d budget requests approved, budget %.2f, spent %.4f", asked.Load(), r.Budget.MaxCost, *r.CostSoFar)
}

// TestEvalStopWhenWorkerSIGKILL: the worker running a stop_when eval is SIGKILLed mid-run; a
// new worker takes the job over by replaying its history (the stop rule is decided from it
// alone) and the job still stops on precision, every episode counted once.
func TestEvalStopWhenWorkerSIGKILL(t *testing.T) {
	testenv.Heavy(t, "spawns jobgate worker processes and SIGKILLs one")
	t.Parallel()
	b := setup(t, setupOpts{noWorker: true})
	cs := b.session(ana, 0, "")
	w1 := b.spawn(t, "worker")
	args := startArgs(uniqueKey(t), 20000, map[string]any{"episode_ms": 100, "fail_rate": 0})
	args["concurrency"] = 8
	args["stop_when"] = map[string]any{"std_err_below": 0.02, "min_episodes": 50}
	v := mustView(t, call(t, cs, "start_eval", args))
	v = waitStatus(t, cs, v.Handle, workflows.StatusAwaitingInput, 60*time.Second)
	mustView(t, call(t, cs, "resume_eval", acResumeArgs(v, "approve", nil)))
	eventually(t, 60*time.Second, "some episodes done", func() bool {
		return mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v.Handle})).Progress.Done >= 40
	})
	w1.kill(t)
	b.spawn(t, "worker")
	end := waitStatus(t, b.session(ana, 1, ""), v.Handle, workflows.StatusSucceeded, 2*time.Minute)
	r := evalResult(t, end)
	ran := r.Scored + r.Failed
	if r.Stopped != "precision" || r.StdErr >= 0.02 || r.Skipped != 20000-ran || ran > 400 || end.Progress.Done != r.Scored {
		t.Fatalf("result %+v, progress %+v", r, end.Progress)
	}
	page, te, _ := epCall(t, cs, map[string]any{"handle": end.Handle, "page_size": 100})
	if te != nil {
		t.Fatalf("list_episodes: %s", te.Message)
	}
	seen, n := map[int]bool{}, 0
	for cur := ""; ; {
		for _, ep := range page.Episodes {
			if seen[ep.Index] {
				t.Fatalf("episode %d listed twice", ep.Index)
			}
			seen[ep.Index] = true
			n++
		}
		if page.NextCursor == "" || page.NextCursor == cur {
			break
		}
		cur = page.NextCursor
		if page, te, _ = epCall(t, cs, map[string]any{"handle": end.Handle, "page_size": 100, "cursor": cur}); te != nil {
			t.Fatalf("list_episodes: %s", te.Message)
		}
	}
	if n != ran {
		t.Fatalf("%d episodes in the log, %d in the result", n, ran)
	}
	t.Logf("stop_when across a worker SIGKILL: %d of 20,000 episodes, mean %.4f ± %.4f", ran, r.MeanScore, r.StdErr)
}
