package jobcore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// StartEvalIn are start_eval's arguments.
type StartEvalIn struct {
	IdempotencyKey string              `json:"idempotency_key" jsonschema:"your name for this logical run, 1-128 chars of [A-Za-z0-9._:@=+-]; keys are per owner (yours never collide with another principal's); retrying with the same key and arguments returns the same job"`
	Suite          string              `json:"suite" jsonschema:"name of a server-configured eval suite, e.g. demo"`
	Episodes       int                 `json:"episodes" jsonschema:"number of episodes to run (1 to the suite's limit, 20000 by default); runs above the suite's approval threshold wait for approval first"`
	Concurrency    int                 `json:"concurrency,omitempty" jsonschema:"episodes in flight at once (1 to the suite's limit, 64 by default); defaults to min(episodes, 8)"`
	Params         map[string]any      `json:"params,omitempty" jsonschema:"suite parameters; demo takes episode_ms (default 1000), fail_rate (0-1, default 0.05) and cost (usd: each episode then costs between cost/2 and cost)"`
	Budget         *workflows.Budget   `json:"budget,omitempty" jsonschema:"what the run may spend: max_cost (in the suite's cost_unit) and/or max_episode_seconds; at the budget the job waits (awaiting_input) for its owner to raise it (resume_eval extend_by) or stop it with a partial result. Default: the tenant's or owner's from the server's tenants file"`
	StopWhen       *workflows.StopWhen `json:"stop_when,omitempty" jsonschema:"end early once the estimate is precise enough: std_err_below (the mean score's standard error, assuming independent episodes) after at least min_episodes scored (default 30); the result then says stopped: precision and how many episodes were skipped"`
}

const concurrencyDefaultCap = 8

func (in StartEvalIn) idempotencyKey() string { return in.IdempotencyKey }

// EvalOptions configure the eval kind.
type EvalOptions struct {
	// Suites are the eval suites callers may name. Defaults to contract.DefaultCatalog().
	Suites contract.Catalog
	// Artifacts is the artifact store the workers keep episode logs in (list_episodes,
	// episodes_url). Nil: neither is served.
	Artifacts contract.ArtifactReader
	// DownloadTTL is how long an episodes_url stays valid. Defaults to DownloadTTLDefault.
	DownloadTTL time.Duration
}

// EvalKind is the eval job kind with options o: start_eval runs episodes of a configured
// suite; the result is the workflow's EvalResult as recorded; its jobs hold episode slots.
func EvalKind(o EvalOptions) KindSpec {
	if o.Suites == nil {
		o.Suites = contract.DefaultCatalog()
	}
	return &evalKind{opts: o}
}

type evalKind struct{ opts EvalOptions }

func (k *evalKind) Name() string { return workflows.KindEval }

func (k *evalKind) Serve(f *Core) ServedKind {
	jk := JobKind[EvalResultView]{Name: workflows.KindEval, Noun: "eval run", Result: k.result}
	maxConc := k.suiteMax(func(s contract.Suite) int { return s.MaxConcurrency })
	sk := jk.served(f, startTool(f, jk, &mcp.Tool{
		Title: "Start an eval run",
		Description: "Start an eval run of a suite, or find the one already started with this idempotency_key. " +
			"Returns at once, after the job is durably recorded, with a handle to poll via get_eval. " +
			"Keys are per owner. Same key and arguments: the same job (created=false). Same key, other arguments: idempotency_key_reused.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(_ context.Context, p authz.Principal, in StartEvalIn) (StartSpec, error) {
		return k.startSpec(f, p, in)
	}).
		bounds("episodes", 1, float64(k.suiteMax(func(s contract.Suite) int { return s.MaxEpisodes }))).
		bounds("concurrency", 1, float64(maxConc)))
	sk.Reads = append(sk.Reads, k.listEpisodesTool(f))
	sk.Routes = map[string]http.Handler{
		"GET /episodes/{token}": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { k.downloadEpisodes(f, w, r) }),
	}
	// An eval holds at most its concurrency: the largest any suite allows bounds one job.
	sk.MaxSlots = func() int { return maxConc }
	sk.FreshResult = []string{"episodes_url", "episodes_url_expires_at"}
	sk.PageResult = evalPageResult(f, k)
	return sk
}

// suiteMax is the largest limit any configured suite allows (the schema's bound; each suite
// is checked exactly at start).
func (k *evalKind) suiteMax(limit func(contract.Suite) int) int {
	m := 1
	for _, s := range k.opts.Suites {
		m = max(m, limit(s))
	}
	return m
}

// evalArgs validates and normalizes start_eval's arguments against the suite catalog.
func (k *evalKind) evalArgs(in StartEvalIn) (workflows.EvalArgs, contract.Suite, error) {
	var zero workflows.EvalArgs
	if in.Suite == "" {
		return zero, contract.Suite{}, invalidArg("suite", "is required (available: %s)", strings.Join(k.opts.Suites.Names(), ", "))
	}
	s, ok := k.opts.Suites[in.Suite]
	if !ok {
		return zero, contract.Suite{}, invalidArg("suite", "unknown suite %q (available: %s)", truncate(in.Suite, 64), strings.Join(k.opts.Suites.Names(), ", "))
	}
	if in.Episodes < 1 || in.Episodes > s.MaxEpisodes {
		return zero, s, invalidArg("episodes", "must be between 1 and %d", s.MaxEpisodes)
	}
	conc := in.Concurrency
	if conc == 0 {
		conc = min(in.Episodes, concurrencyDefaultCap)
	}
	if conc < 1 || conc > s.MaxConcurrency {
		return zero, s, invalidArg("concurrency", "must be between 1 and %d", s.MaxConcurrency)
	}
	params, err := s.NormalizeParams(in.Params)
	if err != nil {
		var pe *contract.ParamError
		if errors.As(err, &pe) {
			return zero, s, invalidArg(pe.Field, "%s", pe.Reason)
		}
		return zero, s, invalidArg("params", "%v", err)
	}
	args := workflows.EvalArgs{Suite: s.Name, Episodes: in.Episodes, Concurrency: conc, Params: params}
	if args.Budget, err = checkBudget(in.Budget, s, params); err != nil {
		return zero, s, err
	}
	if args.StopWhen, err = checkStopWhen(in.StopWhen, in.Episodes); err != nil {
		return zero, s, err
	}
	return args, s, nil
}

// startSpec validates start_eval's arguments (past the key) and says what to start.
func (k *evalKind) startSpec(f *Core, p authz.Principal, in StartEvalIn) (StartSpec, error) {
	args, suite, err := k.evalArgs(in)
	if err != nil {
		return StartSpec{}, err
	}
	hash := workflows.Digest(args)
	cost := k.costPolicy(f, p, args, suite)
	return StartSpec{
		Admit: f.costQuota(p.Tenant, cost),
		Hash:  hash,
		Input: workflows.EvalInput{
			Tenant: p.Tenant, Owner: p.Subject, Args: args,
			Approval: workflows.ApprovalPolicy{Threshold: suite.ApprovalThreshold, Approver: suite.Approver,
				Timeout: suite.ApprovalTimeout},
			// The suite's task queue is recorded here so the workflow dispatches episodes from
			// its input (deterministic), and a later catalog change does not move running jobs.
			Episode: workflows.EpisodePolicy{Timeout: suite.EpisodeTimeout,
				HeartbeatTimeout: suite.HeartbeatTimeout, MaxAttempts: suite.MaxAttempts,
				TaskQueue: suite.TaskQueue, Retention: suite.EpisodeRetention},
			Fairness: f.fairness(p.Tenant),
			Cost:     cost,
		},
		Total: args.Episodes,
		slots: min(args.Concurrency, args.Episodes),
		OwnerInput: suite.ApprovalThreshold > 0 && args.Episodes > suite.ApprovalThreshold &&
			suite.Approver != authz.ApproverApprover,
		Summary: fmt.Sprintf("eval %s · %d episodes · owner %s", args.Suite, args.Episodes, p.Subject),
		Details: fmt.Sprintf("**eval** of suite `%s`\n\n- owner: `%s` (tenant `%s`)\n- episodes: %d, concurrency: %d\n- idempotency key: `%s`\n- args digest: `%s`",
			args.Suite, p.Subject, p.Tenant, args.Episodes, args.Concurrency, in.IdempotencyKey, hash),
	}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// EvalResultView is a succeeded eval's result (wire.EvalResultView).
type EvalResultView = wire.EvalResultView

// result renders the workflow's EvalResult for p: its decision record without the seal, and
// the episode log with a download link bound to p (episodes.go).
func (k *evalKind) result(_ context.Context, f *Core, p authz.Principal, j *jobstore.Job, decode func(any) error) (*EvalResultView, error) {
	var r workflows.EvalResult
	if err := decode(&r); err != nil {
		return nil, err
	}
	v := &EvalResultView{EvalSummary: r.EvalSummary, Decision: decisionView(r.Decision)}
	k.episodesLink(f, p, j, r.EpisodeLog, r.EpisodesKeptUntil, v)
	return v, nil
}
