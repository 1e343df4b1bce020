package contract

import (
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
