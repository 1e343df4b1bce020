package activities

import (
	"math"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

// TestParseScoreCost: a command's output line may carry its episode's cost; a cost that is not
// a finite number within 0..CostLimit fails the attempt, and a line without one reports none.
func TestParseScoreCost(t *testing.T) {
	for _, c := range []struct {
		out  string
		cost *float64
		ok   bool
	}{
		{`{"score": 0.5}`, nil, true},
		{`{"score": 0.5, "cost": 0.0125}`, ptrF(0.0125), true},
		{`{"score": 0.5, "cost": 0}`, ptrF(0), true},
		{`{"score": 0.5, "cost": -1}`, nil, false},
		{`{"score": 0.5, "cost": 1e12}`, nil, false},
		{`{"score": 0.5, "cost": "3"}`, nil, false},
	} {
		got, err := parseScore(c.out)
		if (err == nil) != c.ok {
			t.Errorf("%q: err %v, want ok=%v", c.out, err, c.ok)
			continue
		}
		if c.ok && !sameCost(got.Cost, c.cost) {
			t.Errorf("%q: cost %v, want %v", c.out, fmtCost(got.Cost), fmtCost(c.cost))
		}
	}
}

// TestHTTPEpisode_Cost: a receiver's answer may carry the episode's cost (POST and reconcile
// GET alike); an old receiver's answer without one still scores, with no cost; a bad cost is
// a bad answer (retryable, like a bad score).
func TestHTTPEpisode_Cost(t *testing.T) {
	for _, c := range []struct {
		body string
		cost *float64
		ok   bool
	}{
		{`{"score": 0.5}`, nil, true},
		{`{"score": 0.5, "cost": 0.25}`, ptrF(0.25), true},
		{`{"score": 0.5, "cost": -0.25}`, nil, false},
		{`{"score": 0.5, "cost": null}`, nil, true},
	} {
		for _, attempt := range []int32{1, 2} {
			_, url := newFake(t, 200, c.body)
			h := newHTTPHarness(t, url, nil)
			res, err := h.runAt(httpIn(0), attempt)
			if !c.ok {
				appErr(t, err, errTypeEpisodeBadAnswer, true)
				continue
			}
			if err != nil || !sameCost(res.Cost, c.cost) {
				t.Errorf("%q attempt %d: cost %v err %v, want %v", c.body, attempt, fmtCost(res.Cost), err, fmtCost(c.cost))
			}
		}
	}
}

// TestDemoCost: a demo episode's cost is a pure function of its operation ID and params.cost,
// within [cost/2, cost].
func TestDemoCost(t *testing.T) {
	for i := range 200 {
		id := "acme/eval/k#run#" + string(rune('a'+i%26)) + string(rune('0'+i%10))
		c := contract.DemoCost(id, 0.02)
		if c < 0.01-1e-9 || c > 0.02+1e-9 || c != contract.DemoCost(id, 0.02) {
			t.Fatalf("%s: cost %v outside [0.01, 0.02] or not deterministic", id, c)
		}
	}
}

// FuzzParseScore: a command's last line never panics the parser, and what it accepts is a
// finite score within the limit and, when present, a cost within 0..CostLimit.
func FuzzParseScore(f *testing.F) {
	for _, s := range []string{`{"score": 0.5}`, `{"score": 0.5, "cost": 0.01}`, `{"score": 1, "cost": -1}`, "x\n{\"score\":2}", ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		res, err := parseScore(s)
		if err != nil {
			return
		}
		if math.IsNaN(res.Score) || math.Abs(res.Score) > scoreLimit {
			t.Fatalf("accepted score %v", res.Score)
		}
		if res.Cost != nil && contract.CheckCost(*res.Cost) != "" {
			t.Fatalf("accepted cost %v", *res.Cost)
		}
	})
}

func ptrF(f float64) *float64 { return &f }

func sameCost(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func fmtCost(c *float64) any {
	if c == nil {
		return "none"
	}
	return *c
}
