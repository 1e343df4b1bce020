package contract

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// Application error types an episode can end with. Both are final: retrying cannot change them.
const (
	ErrTypeEpisodeFailed = "EpisodeFailed"
	ErrTypeSuiteMissing  = "SuiteMissing"
)

// EpisodeInput names one episode of one job.
type EpisodeInput struct {
	JobID string `json:"job_id"`
	// FirstRunID is the job's first run ID: stable across retries, worker deaths and
	// continue-as-new, and unique per job instance (a workflow ID is reused once Temporal has
	// purged a closed job). Empty in episodes scheduled before it existed.
	FirstRunID string `json:"first_run_id,omitempty"`
	Suite      string `json:"suite"`
	Index      int    `json:"index"`
	// OperationID is stable across retries, worker deaths and continue-as-new, and never
	// repeats across job instances: the workflow ID, the first run ID and the episode index.
	// Commands and receivers get it so an uncertain attempt can be reconciled, never with the
	// result of another job that once had the same ID.
	OperationID string         `json:"operation_id"`
	Params      map[string]any `json:"params,omitempty"`
}

// EpisodeResult is one episode's score.
type EpisodeResult struct {
	Score  float64 `json:"score"`
	Passed bool    `json:"passed"`
	// Attempt is the attempt that scored (1 for the first); 0 in results recorded before it.
	Attempt int `json:"attempt,omitempty"`
	// Cost is what the episode reported it cost, in its suite's cost_unit; nil when it
	// reported none (and in every result recorded before costs).
	Cost *float64 `json:"cost,omitempty"`
}

// CostLimit bounds one episode's reported cost, so that 20,000 of them cannot overflow the
// running sums and a typo (a cost in micro-units) is refused rather than believed.
const CostLimit = 1e9

// CheckCost says what is wrong with a reported cost ("" when it is a finite number within
// 0..CostLimit).
func CheckCost(c float64) string {
	if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || c > CostLimit {
		return fmt.Sprintf("cost must be a finite number within 0..%g", float64(CostLimit))
	}
	return ""
}

// DemoCost is what a demo episode of operationID costs when its params set cost c (the most
// one episode may cost): between c/2 and c, a pure function of the operation ID (a hash apart
// from DemoOutcome's, so scores are unchanged), rounded to 1e-6.
func DemoCost(operationID string, c float64) float64 {
	h := fnv.New64a()
	h.Write([]byte("cost|" + operationID))
	u := float64(h.Sum64()>>11) / (1 << 53)
	return math.Round(c*(0.5+0.5*u)*1e6) / 1e6
}

// EpisodeErrorDetails ride on an episode's final (non-retryable) failure, for its episode log:
// the attempt it ended on.
type EpisodeErrorDetails struct {
	Attempt int `json:"attempt"`
}

// DemoOutcome is what a demo episode of operationID reports at failRate: whether it fails
// (simulated) and otherwise its score. Tests predict a run's outcomes with it.
func DemoOutcome(operationID string, failRate float64) (fails bool, score float64) {
	h := fnv.New64a()
	h.Write([]byte(operationID))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x6a6f6267617465))
	fails = rng.Float64() < failRate
	return fails, math.Round(rng.Float64()*1000) / 1000
}

// ErrTypeEpisodeRejected: an http suite's receiver refused the episode with a 4xx (other than
// 408, 409, 425 and 429), or answered in a way retrying cannot change. Final, like EpisodeFailed.
const ErrTypeEpisodeRejected = "EpisodeRejected"
