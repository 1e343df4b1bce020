package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// Activities holds the dependencies of the episode and export activities.
type Activities struct {
	Suites contract.Catalog
	// HeartbeatEvery is how often a running episode heartbeats. Defaults to 1 second.
	HeartbeatEvery time.Duration
	// HTTPClient sends the episodes of http suites; shared by all of them. Nil: a default client
	// with bounded dial and TLS timeouts that follows no redirects.
	HTTPClient *http.Client

	// Datasets is the export catalog; callers only name datasets.
	Datasets contract.Datasets
	// Artifacts stores export chunks, artifacts and manifests.
	Artifacts *ArtifactStore
	// DB caches the dataset connections. Nil: a pool created on first use.
	DB *DBPool
	// QueryHook, when set, is called with every statement an export activity sends to a
	// dataset, just before it is sent: tests use it to prove nothing is read before approval.
	QueryHook func(dataset, query string)
	// SegmentEpisodes reads a running eval run's current segment of outcomes for WriteEpisodes
	// (cmd/app: the run's jobgate.episodes query). Nil: WriteEpisodes fails whenever it has an
	// artifact store and outcomes to write.
	SegmentEpisodes SegmentEpisodesFunc
	// ManifestSealer seals each export manifest with an HMAC (manifest_seal: legacy, for a
	// worker without signing keys). Nil, with no ManifestSigner: manifests are written unsealed,
	// and verify fails them unless --allow-legacy.
	ManifestSealer ManifestSealer
	// ManifestSigner signs each export manifest with Ed25519 (manifest_signature, version 2)
	// instead of sealing it, and writes the public keys beside it. Nil: ManifestSealer's seal.
	ManifestSigner ManifestSigner

	// sqlRowsOnly sends every export query through database/sql, never the PostgreSQL raw
	// path: tests compare the two paths' bytes with it.
	sqlRowsOnly bool

	lazyDBOnce sync.Once // creates lazyDB
	lazyDB     *DBPool   // used while DB is nil
}

// withAttempt adds the attempt to a final application error, keeping its message and type; other
// errors (retried ones, whose last attempt is known from the retry policy) pass unchanged.
func withAttempt(ctx context.Context, err error) error {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || !ae.NonRetryable() || ae.HasDetails() {
		return err
	}
	return temporal.NewNonRetryableApplicationError(ae.Message(), ae.Type(), ae.Unwrap(),
		contract.EpisodeErrorDetails{Attempt: int(activity.GetInfo(ctx).Attempt)})
}

// RunEpisode runs one episode of the named suite.
func (a *Activities) RunEpisode(ctx context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
	s, ok := a.Suites[in.Suite]
	if !ok {
		return contract.EpisodeResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("suite %q is not configured on this worker", in.Suite), contract.ErrTypeSuiteMissing, nil)
	}
	var (
		res contract.EpisodeResult
		err error
	)
	switch s.Kind {
	case contract.SuiteDemo:
		res, err = a.runDemo(ctx, in)
	case contract.SuiteCommand:
		res, err = a.runCommand(ctx, s, in)
	case contract.SuiteHTTP:
		res, err = a.runHTTP(ctx, s, in)
	default:
		return res, temporal.NewNonRetryableApplicationError("unknown suite kind", contract.ErrTypeSuiteMissing, nil)
	}
	if err != nil {
		return res, withAttempt(ctx, err)
	}
	res.Passed = res.Score >= s.PassThreshold
	res.Attempt = int(activity.GetInfo(ctx).Attempt)
	if s.CostUnit == "" {
		res.Cost = nil // a suite without a cost unit reports no cost, whatever its episodes say
	}
	return res, nil
}

func (a *Activities) heartbeatEvery() time.Duration {
	if a.HeartbeatEvery > 0 {
		return a.HeartbeatEvery
	}
	return time.Second
}

// runDemo simulates work. The outcome is a pure function of the operation ID, so a retry after
// a worker death reproduces the original outcome instead of rolling the dice again.
func (a *Activities) runDemo(ctx context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
	ms, _ := in.Params["episode_ms"].(float64)
	failRate, _ := in.Params["fail_rate"].(float64)
	fails, score := contract.DemoOutcome(in.OperationID, failRate)

	// The first heartbeat comes one interval in, not at the start: an attempt's first heartbeat
	// is a synchronous round trip and a write of the job's workflow state on the server, which
	// for short episodes cost more than the episode itself. The heartbeat timeout runs from the
	// attempt's start, and a cancel still arrives within an interval, as before.
	if d := time.Duration(ms) * time.Millisecond; d > 0 {
		done := time.NewTimer(d)
		defer done.Stop()
		tick := time.NewTicker(a.heartbeatEvery())
		defer tick.Stop()
	wait:
		for {
			select {
			case <-ctx.Done():
				return contract.EpisodeResult{}, ctx.Err()
			case <-tick.C:
				activity.RecordHeartbeat(ctx, in.Index)
			case <-done.C:
				break wait
			}
		}
	}
	if fails {
		return contract.EpisodeResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("episode %d failed (simulated, fail_rate %.2f)", in.Index, failRate), contract.ErrTypeEpisodeFailed, nil)
	}
	res := contract.EpisodeResult{Score: score}
	if c, ok := in.Params["cost"].(float64); ok {
		cost := contract.DemoCost(in.OperationID, c)
		res.Cost = &cost
	}
	return res, nil
}

const outputTailBytes = 2048

// runCommand runs the suite's command for one episode. The whole process group is killed when
// the activity is cancelled (job cancel) or times out, so no orphan keeps running.
func (a *Activities) runCommand(ctx context.Context, s contract.Suite, in contract.EpisodeInput) (contract.EpisodeResult, error) {
	params, _ := json.Marshal(in.Params)
	info := activity.GetInfo(ctx)
	cmd := exec.CommandContext(ctx, s.Command[0], s.Command[1:]...)
	cmd.Dir = s.Dir
	cmd.Env = commandEnv(s,
		"JOBGATE_JOB_ID="+in.JobID,
		"JOBGATE_EPISODE_INDEX="+strconv.Itoa(in.Index),
		"JOBGATE_OPERATION_ID="+in.OperationID,
		"JOBGATE_ATTEMPT="+strconv.Itoa(int(info.Attempt)),
		"JOBGATE_PARAMS="+string(params),
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr tailBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr

	if err := cmd.Start(); err != nil {
		return contract.EpisodeResult{}, fmt.Errorf("start episode command: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(a.heartbeatEvery())
	defer tick.Stop()
	for {
		activity.RecordHeartbeat(ctx, in.Index)
		select {
		case err := <-done:
			// Make sure nothing of the group outlives the episode, even on success.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			if ctx.Err() != nil {
				return contract.EpisodeResult{}, ctx.Err()
			}
			if err != nil {
				return contract.EpisodeResult{}, fmt.Errorf("episode command: %w; stderr: %s", err, stderr.String())
			}
			return parseScore(stdout.String())
		case <-tick.C:
		}
	}
}

// commandEnv is a command episode's environment: an allow-list, never the worker's whole
// environment. A command is caller-influenced code (its params, and often what it runs, come
// from callers), while the worker may hold dataset and artifact credentials
// (AWS_SECRET_ACCESS_KEY, PGPASSWORD, AZURE_STORAGE_KEY, …) and its own JOBGATE_* settings.
// The episode gets commandEnvBase and the variables its suite names, as the worker has them,
// then the JOBGATE_* variables of the episode itself (set last: they cannot be overridden).
func commandEnv(s contract.Suite, episode ...string) []string {
	base := commandEnvBase()
	env := make([]string, 0, len(base)+len(s.Env)+len(episode))
	seen := map[string]bool{}
	for _, names := range [][]string{base, s.Env} {
		for _, n := range names {
			if seen[n] || strings.HasPrefix(n, "JOBGATE_") {
				continue
			}
			seen[n] = true
			if v, ok := os.LookupEnv(n); ok {
				env = append(env, n+"="+v)
			}
		}
	}
	return append(env, episode...)
}

// scoreLimit bounds a score so that 20,000 of them cannot overflow the running sums.
const scoreLimit = 1e9

// parseScore reads the last non-empty stdout line as {"score": <finite number>}, with an
// optional "cost" (a finite number within 0..contract.CostLimit, the suite's cost_unit).
func parseScore(out string) (contract.EpisodeResult, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	var v struct {
		Score *float64 `json:"score"`
		Cost  *float64 `json:"cost"`
	}
	if err := json.Unmarshal([]byte(last), &v); err != nil || v.Score == nil {
		return contract.EpisodeResult{}, errors.New(`episode command: last stdout line is not {"score": <number>}`)
	}
	if math.IsNaN(*v.Score) || math.Abs(*v.Score) > scoreLimit {
		return contract.EpisodeResult{}, fmt.Errorf("episode command: score must be a finite number within ±%g", scoreLimit)
	}
	if v.Cost != nil {
		if msg := contract.CheckCost(*v.Cost); msg != "" {
			return contract.EpisodeResult{}, errors.New("episode command: " + msg)
		}
	}
	return contract.EpisodeResult{Score: *v.Score, Cost: v.Cost}, nil
}

// tailBuffer keeps only the last outputTailBytes written, so a chatty command cannot exhaust memory.
type tailBuffer struct{ b bytes.Buffer }

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > outputTailBytes {
		p = p[len(p)-outputTailBytes:]
	}
	t.b.Write(p)
	if over := t.b.Len() - outputTailBytes; over > 0 {
		t.b.Next(over)
	}
	return n, nil
}

func (t *tailBuffer) String() string { return t.b.String() }

// commandEnvBase are the worker variables every command episode receives when the worker has
// them: what a program needs to find binaries, its home and its locale. Nothing else of the
// worker's environment reaches a command unless its suite names it (Suite.Env). A function, so
// the allow-list is no package state anything could append to.
func commandEnvBase() []string { return []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ"} }
