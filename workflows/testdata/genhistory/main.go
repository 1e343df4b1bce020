package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/handle/resumeseal"
	"github.com/jobgate/jobgate/workflows"
	"github.com/jobgate/jobgate/workflows/testdata/gen"
)

const tq = "genhistory"

var owner = authz.Principal{Tenant: "acme", Subject: "ann", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}

func input(episodes, conc int, failRate, episodeMS float64) workflows.EvalInput {
	return workflows.EvalInput{
		Tenant: "acme", Owner: "ann",
		Args: workflows.EvalArgs{Suite: "demo", Episodes: episodes, Concurrency: conc,
			Params: map[string]any{"episode_ms": episodeMS, "fail_rate": failRate}},
		Approval: workflows.ApprovalPolicy{Threshold: 5, Approver: authz.ApproverOwner, Timeout: workflows.Duration(time.Hour)},
		Episode:  workflows.EpisodePolicy{Timeout: workflows.Duration(time.Minute), HeartbeatTimeout: workflows.Duration(10 * time.Second), MaxAttempts: 3},
	}
}

func main() {
	out := flag.String("out", "workflows/testdata", "directory for the history files")
	only := flag.String("only", "", `record only this group: "episodes" (the episode log's continue-as-new) or "budget" (a budget asked, raised and declined; stop_when across continue-as-new); default: every history`)
	flag.Parse()
	if err := run(*out, *only); err != nil {
		log.Fatal(err)
	}
}

// recorder is one recording: the embedded server and worker, the sealing keys, the in-memory
// store the episode log goes to, and the directory the histories are written to.
type recorder struct {
	ctx   context.Context
	e     *gen.Env
	c     client.Client
	keys  *handle.Keyring
	store *activities.ArtifactStore
	out   string
}

func run(out, only string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, stop, err := startRecorder(ctx, out)
	if err != nil {
		return err
	}
	defer stop()
	switch only {
	case "episodes":
		return r.episodes()
	case "budget":
		if err := r.budget(); err != nil {
			return err
		}
		return r.precision()
	}
	// The order is the recordings' numbering; each job has its own id, so none depends on
	// another, but the embedded server sees them in this order.
	for _, record := range []func() error{r.small, r.approved, r.rejected, r.cancelled, r.continueAsNew, r.episodes, r.budget, r.precision} {
		if err := record(); err != nil {
			return err
		}
	}
	return nil
}

// startRecorder starts the embedded server and a worker wired as cmd/app wires one: resumes
// verified with a fresh keyring, the episode log in an in-memory store, each segment read with
// the run's own query. stop shuts both down.
func startRecorder(ctx context.Context, out string) (r *recorder, stop func(), err error) {
	r = &recorder{ctx: ctx, out: out}
	// Resumes are sealed as a frontend seals them (the recorded histories from before seals
	// carry unsealed requests and still replay: validators do not run on replay).
	if r.keys, err = handle.NewKeyring("gen", map[string][]byte{"gen": handle.GenerateKey()}); err != nil {
		return nil, nil, err
	}
	wfs := &workflows.Workflows{Resume: resumeseal.Verifier(r.keys)}
	// The episode log goes to an in-memory store: history records the writes and their
	// references, never the store.
	if r.store, err = activities.OpenArtifactStore(ctx, "mem://"); err != nil {
		return nil, nil, err
	}
	acts := &activities.Activities{Suites: contract.DefaultCatalog(), HeartbeatEvery: 100 * time.Millisecond, Artifacts: r.store}
	if r.e, err = gen.Start(ctx, tq, workflows.KindEval, wfs, acts); err != nil {
		r.store.Close()
		return nil, nil, err
	}
	r.c = r.e.Client
	// WriteEpisodes reads each segment with the run's own query, as cmd/app wires it (set before
	// any job starts, so no activity has read the field yet).
	acts.SegmentEpisodes = func(ctx context.Context, jobID, runID string) (int, []contract.EpisodeOutcome, error) {
		v, err := r.c.QueryWorkflow(ctx, jobID, runID, workflows.QueryEpisodes, workflows.EpisodesQuery{})
		if err != nil {
			return 0, nil, err
		}
		var res workflows.EpisodesQueryResult
		err = v.Get(&res)
		return res.Segment, res.Episodes, err
	}
	return r, func() { r.e.Stop(); r.store.Close() }, nil
}

func (r *recorder) start(id string, in workflows.EvalInput) (client.WorkflowRun, error) {
	return r.e.StartJob(r.ctx, id, workflows.KindEval, in.Tenant, in.Owner, in)
}

func (r *recorder) save(name, id, runID string) error {
	events, err := r.e.Save(r.ctx, r.out, name, id, runID)
	if err == nil {
		fmt.Printf("%s: %d events\n", name, events)
	}
	return err
}

// waitOpenInput polls the job's memo until it shows an open input request.
func (r *recorder) waitOpenInput(id string) (*workflows.NeedsInput, error) {
	for range 100 {
		d, err := r.c.DescribeWorkflowExecution(r.ctx, id, "")
		if err != nil {
			return nil, err
		}
		if p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoNeedsInput]; p != nil {
			var n *workflows.NeedsInput
			if err := converterGet(p, &n); err != nil {
				return nil, err
			}
			if n != nil {
				return n, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, errors.New("no open input request")
}

// resume sends req as the tool surface would, sealed for the job's current run.
func (r *recorder) resume(id string, req workflows.ResumeRequest) error {
	d, err := r.c.DescribeWorkflowExecution(r.ctx, id, "")
	if err != nil {
		return err
	}
	req.Surface, req.SignedInWith = workflows.SurfaceTool, workflows.SignedInBearerJWT
	req.Seal = resumeseal.Seal(r.keys, id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), req,
		time.Now().Add(5*time.Minute))
	h, err := r.c.UpdateWorkflow(r.ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: workflows.UpdateResume, Args: []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	return h.Get(r.ctx, nil)
}

// startWaiting starts a job that asks for approval and returns once its request is open.
func (r *recorder) startWaiting(id string, in workflows.EvalInput) (client.WorkflowRun, *workflows.NeedsInput, error) {
	run, err := r.start(id, in)
	if err != nil {
		return nil, nil, err
	}
	n, err := r.waitOpenInput(id)
	return run, n, err
}

// saveWhen saves run's history once it ends as ended says (nil: completed).
func (r *recorder) saveWhen(name, id string, run client.WorkflowRun, ended func(error) error) error {
	err := run.Get(r.ctx, nil)
	if ended == nil && err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	if ended != nil {
		if err := ended(err); err != nil {
			return err
		}
	}
	return r.save(name, id, run.GetRunID())
}

// wantCancelled is saveWhen's check for a job that must end cancelled.
func wantCancelled(id string) func(error) error {
	return func(err error) error {
		var canceled *temporal.CanceledError
		if !errors.As(err, &canceled) {
			return fmt.Errorf("%s: want cancelled, got %v", id, err)
		}
		return nil
	}
}

// 1. Small run, real demo activity, some simulated failures.
func (r *recorder) small() error {
	id := "acme/eval/replay-small"
	in := input(8, 3, 0.3, 0)
	in.Approval.Threshold = 0
	run, err := r.start(id, in)
	if err != nil {
		return err
	}
	return r.saveWhen("eval_small.json", id, run, nil)
}

// 2. Approval: a bad resume (rejected by the validator, so absent from history), then the owner's.
func (r *recorder) approved() error {
	id := "acme/eval/replay-approved"
	run, n, err := r.startWaiting(id, input(6, 2, 0, 0))
	if err != nil {
		return err
	}
	bad := workflows.ResumeRequest{Principal: owner, InputID: n.InputID, ScopeDigest: "sha256:00", Decision: workflows.DecisionApprove}
	if err := r.resume(id, bad); err == nil {
		return errors.New("a resume with a wrong scope_digest was accepted")
	}
	good := workflows.ResumeRequest{Principal: owner, InputID: n.InputID, ScopeDigest: n.ScopeDigest, Decision: workflows.DecisionApprove}
	if err := r.resume(id, good); err != nil {
		return err
	}
	return r.saveWhen("eval_approved.json", id, run, nil)
}

// 3. Rejected by the owner.
func (r *recorder) rejected() error {
	id := "acme/eval/replay-rejected"
	run, n, err := r.startWaiting(id, input(6, 2, 0, 0))
	if err != nil {
		return err
	}
	if err := r.resume(id, workflows.ResumeRequest{Principal: owner, InputID: n.InputID, ScopeDigest: n.ScopeDigest,
		Decision: workflows.DecisionReject, Comment: "not today"}); err != nil {
		return err
	}
	return r.saveWhen("eval_rejected.json", id, run, wantCancelled(id))
}

// 4. Cancelled while episodes run.
func (r *recorder) cancelled() error {
	id := "acme/eval/replay-cancelled"
	in := input(4, 2, 0, 3000)
	in.Approval.Threshold = 0
	run, err := r.start(id, in)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	if err := r.c.CancelWorkflow(r.ctx, id, ""); err != nil {
		return err
	}
	return r.saveWhen("eval_cancelled.json", id, run, wantCancelled(id))
}

// 5. Continue-as-new: 5 episodes, 3 per run.
func (r *recorder) continueAsNew() error {
	_, err := r.recordTwoRuns("acme/eval/replay-can", "eval_can_run1.json", "eval_can_run2.json")
	return err
}

// 6. The episode log (changeEvalEpisodes): 5 episodes, 3 per run, some simulated failures;
// each run writes its segment before it continues as new, the last one the whole log.
func (r *recorder) episodes() error {
	id := "acme/eval/replay-episodes"
	firstRunID, err := r.recordTwoRuns(id, "eval_episodes_run1.json", "eval_episodes_run2.json")
	if err != nil {
		return err
	}
	// The log itself, which history only names (count and digest): the replay test checks
	// the two agree, and that its lines are the episodes each run ran.
	rd, err := r.store.OpenEpisodeLog(r.ctx, id, firstRunID)
	if err != nil {
		return err
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	fmt.Printf("eval_episodes_log.jsonl: %d bytes\n", len(b))
	return os.WriteFile(filepath.Join(r.out, "eval_episodes_log.jsonl"), b, 0o644)
}

// 7. A budget (changeEvalBudget): demo episodes of params.cost 0.1 under max_cost 0.25; the
// owner raises it by 0.2 (extend_by), then declines the second request: succeeded, stopped by
// the budget.
func (r *recorder) budget() error {
	id := "acme/eval/replay-budget"
	in := input(8, 2, 0, 0)
	in.Approval.Threshold = 0
	in.Args.Params["cost"] = 0.1
	b := workflows.Budget{MaxCost: 0.25}
	in.Args.Budget = &b
	in.Cost = workflows.CostPolicy{Unit: "usd", WorstEpisode: 0.1, Budget: &b, BudgetFrom: "start_eval"}
	run, n, err := r.startWaiting(id, in)
	if err != nil {
		return err
	}
	if err := r.resume(id, workflows.ResumeRequest{Principal: owner, InputID: n.InputID, ScopeDigest: n.ScopeDigest,
		Decision: workflows.DecisionApprove, ExtendBy: &workflows.Budget{MaxCost: 0.2}}); err != nil {
		return err
	}
	var n2 *workflows.NeedsInput
	for range 100 {
		if n2, err = r.waitOpenInput(id); err != nil {
			return err
		}
		if n2.InputID != n.InputID {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := r.resume(id, workflows.ResumeRequest{Principal: owner, InputID: n2.InputID, ScopeDigest: n2.ScopeDigest,
		Decision: workflows.DecisionReject, Comment: "enough"}); err != nil {
		return err
	}
	return r.saveWhen("eval_budget.json", id, run, nil)
}

// 8. stop_when across continue-as-new: 40 episodes, 20 per run, std_err_below 0.12 after at
// least 25 scored: the first run continues as new at 20, the second stops at 25 (and those in
// flight), succeeded with stopped: precision.
func (r *recorder) precision() error {
	id := "acme/eval/replay-precision"
	in := input(40, 2, 0, 0)
	in.Approval.Threshold = 0
	in.EpisodesPerRun = 20
	in.Args.StopWhen = &workflows.StopWhen{StdErrBelow: 0.12, MinEpisodes: 25}
	first, err := r.start(id, in)
	if err != nil {
		return err
	}
	if err := r.c.GetWorkflow(r.ctx, id, "").Get(r.ctx, nil); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	if err := r.save("eval_precision_run1.json", id, first.GetRunID()); err != nil {
		return err
	}
	d, err := r.c.DescribeWorkflowExecution(r.ctx, id, "")
	if err != nil {
		return err
	}
	return r.save("eval_precision_run2.json", id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId())
}

// recordTwoRuns runs job id with 5 episodes, 3 per run, so it continues as new once, and saves
// the first run as run1 and the last as run2 (5 and 6 differ only in what they read after).
func (r *recorder) recordTwoRuns(id, run1, run2 string) (firstRunID string, err error) {
	in := input(5, 2, 0.3, 0)
	in.Approval.Threshold = 0
	in.EpisodesPerRun = 3
	first, err := r.start(id, in)
	if err != nil {
		return "", err
	}
	if err := r.c.GetWorkflow(r.ctx, id, "").Get(r.ctx, nil); err != nil {
		return "", fmt.Errorf("%s: %w", id, err)
	}
	if err := r.save(run1, id, first.GetRunID()); err != nil {
		return "", err
	}
	d, err := r.c.DescribeWorkflowExecution(r.ctx, id, "")
	if err != nil {
		return "", err
	}
	if err := r.save(run2, id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId()); err != nil {
		return "", err
	}
	return first.GetRunID(), nil
}

func converterGet(p *commonpb.Payload, v any) error {
	return converter.GetDefaultDataConverter().FromPayload(p, v)
}
