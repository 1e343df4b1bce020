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
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/handle"
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
	only := flag.String("only", "", `record only this group: "episodes" (the episode log's continue-as-new); default: every history`)
	flag.Parse()
	if err := run(*out, *only); err != nil {
		log.Fatal(err)
	}
}

func run(out, only string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Resumes are sealed as a frontend seals them (the recorded histories from before seals
	// carry unsealed requests and still replay: validators do not run on replay).
	keys, err := handle.NewKeyring("gen", map[string][]byte{"gen": handle.GenerateKey()})
	if err != nil {
		return err
	}
	wfs := &workflows.Workflows{Resume: frontend.ResumeVerifier(keys)}
	// The episode log goes to an in-memory store: history records the writes and their
	// references, never the store.
	store, err := activities.OpenArtifactStore(ctx, "mem://")
	if err != nil {
		return err
	}
	defer store.Close()
	acts := &activities.Activities{Suites: contract.DefaultCatalog(), HeartbeatEvery: 100 * time.Millisecond, Artifacts: store}
	e, err := gen.Start(ctx, tq, workflows.KindEval, wfs, acts)
	if err != nil {
		return err
	}
	defer e.Stop()
	c := e.Client
	// WriteEpisodes reads each segment with the run's own query, as cmd/app wires it (set before
	// any job starts, so no activity has read the field yet).
	acts.SegmentEpisodes = func(ctx context.Context, jobID, runID string) (int, []contract.EpisodeOutcome, error) {
		v, err := c.QueryWorkflow(ctx, jobID, runID, workflows.QueryEpisodes, workflows.EpisodesQuery{})
		if err != nil {
			return 0, nil, err
		}
		var res workflows.EpisodesQueryResult
		err = v.Get(&res)
		return res.Segment, res.Episodes, err
	}

	start := func(id string, in workflows.EvalInput) (client.WorkflowRun, error) {
		return e.StartJob(ctx, id, workflows.KindEval, in.Tenant, in.Owner, in)
	}
	save := func(name, id, runID string) error {
		events, err := e.Save(ctx, out, name, id, runID)
		if err == nil {
			fmt.Printf("%s: %d events\n", name, events)
		}
		return err
	}
	waitOpenInput := func(id string) (*workflows.NeedsInput, error) {
		for range 100 {
			d, err := c.DescribeWorkflowExecution(ctx, id, "")
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
	resume := func(id string, req workflows.ResumeRequest) error {
		d, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return err
		}
		req.Surface, req.SignedInWith = workflows.SurfaceTool, workflows.SignedInBearerJWT
		req.Seal = frontend.SealResume(keys, id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), req,
			time.Now().Add(5*time.Minute))
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: id, UpdateName: workflows.UpdateResume, Args: []any{req},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err != nil {
			return err
		}
		return h.Get(ctx, nil)
	}
	// startWaiting starts a job that asks for approval and returns once its request is open.
	startWaiting := func(id string, in workflows.EvalInput) (client.WorkflowRun, *workflows.NeedsInput, error) {
		run, err := start(id, in)
		if err != nil {
			return nil, nil, err
		}
		n, err := waitOpenInput(id)
		return run, n, err
	}

	// 6. The episode log (changeEvalEpisodes): 5 episodes, 3 per run, some simulated failures;
	// each run writes its segment before it continues as new, the last one the whole log.
	episodes := func() error {
		id := "acme/eval/replay-episodes"
		in := input(5, 2, 0.3, 0)
		in.Approval.Threshold = 0
		in.EpisodesPerRun = 3
		first, err := start(id, in)
		if err != nil {
			return err
		}
		if err := c.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		if err := save("eval_episodes_run1.json", id, first.GetRunID()); err != nil {
			return err
		}
		d, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return err
		}
		if err := save("eval_episodes_run2.json", id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId()); err != nil {
			return err
		}
		// The log itself, which history only names (count and digest): the replay test checks
		// the two agree, and that its lines are the episodes each run ran.
		rd, err := store.OpenEpisodeLog(ctx, id, first.GetRunID())
		if err != nil {
			return err
		}
		defer rd.Close()
		b, err := io.ReadAll(rd)
		if err != nil {
			return err
		}
		fmt.Printf("eval_episodes_log.jsonl: %d bytes\n", len(b))
		return os.WriteFile(filepath.Join(out, "eval_episodes_log.jsonl"), b, 0o644)
	}
	if only == "episodes" {
		return episodes()
	}
	// 1. Small run, real demo activity, some simulated failures.
	{
		id := "acme/eval/replay-small"
		in := input(8, 3, 0.3, 0)
		in.Approval.Threshold = 0
		run, err := start(id, in)
		if err != nil {
			return err
		}
		if err := run.Get(ctx, nil); err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		if err := save("eval_small.json", id, run.GetRunID()); err != nil {
			return err
		}
	}
	// 2. Approval: a bad resume (rejected by the validator, so absent from history), then the owner's.
	{
		id := "acme/eval/replay-approved"
		run, n, err := startWaiting(id, input(6, 2, 0, 0))
		if err != nil {
			return err
		}
		bad := workflows.ResumeRequest{Principal: owner, InputID: n.InputID, ScopeDigest: "sha256:00", Decision: workflows.DecisionApprove}
		if err := resume(id, bad); err == nil {
			return errors.New("a resume with a wrong scope_digest was accepted")
		}
		good := workflows.ResumeRequest{Principal: owner, InputID: n.InputID, ScopeDigest: n.ScopeDigest, Decision: workflows.DecisionApprove}
		if err := resume(id, good); err != nil {
			return err
		}
		if err := run.Get(ctx, nil); err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		if err := save("eval_approved.json", id, run.GetRunID()); err != nil {
			return err
		}
	}
	// 3. Rejected by the owner.
	{
		id := "acme/eval/replay-rejected"
		run, n, err := startWaiting(id, input(6, 2, 0, 0))
		if err != nil {
			return err
		}
		if err := resume(id, workflows.ResumeRequest{Principal: owner, InputID: n.InputID, ScopeDigest: n.ScopeDigest,
			Decision: workflows.DecisionReject, Comment: "not today"}); err != nil {
			return err
		}
		var canceled *temporal.CanceledError
		if err := run.Get(ctx, nil); !errors.As(err, &canceled) {
			return fmt.Errorf("%s: want cancelled, got %v", id, err)
		}
		if err := save("eval_rejected.json", id, run.GetRunID()); err != nil {
			return err
		}
	}
	// 4. Cancelled while episodes run.
	{
		id := "acme/eval/replay-cancelled"
		in := input(4, 2, 0, 3000)
		in.Approval.Threshold = 0
		run, err := start(id, in)
		if err != nil {
			return err
		}
		time.Sleep(time.Second)
		if err := c.CancelWorkflow(ctx, id, ""); err != nil {
			return err
		}
		var canceled *temporal.CanceledError
		if err := run.Get(ctx, nil); !errors.As(err, &canceled) {
			return fmt.Errorf("%s: want cancelled, got %v", id, err)
		}
		if err := save("eval_cancelled.json", id, run.GetRunID()); err != nil {
			return err
		}
	}
	// 5. Continue-as-new: 5 episodes, 3 per run.
	{
		id := "acme/eval/replay-can"
		in := input(5, 2, 0.3, 0)
		in.Approval.Threshold = 0
		in.EpisodesPerRun = 3
		first, err := start(id, in)
		if err != nil {
			return err
		}
		last := c.GetWorkflow(ctx, id, "")
		if err := last.Get(ctx, nil); err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		if err := save("eval_can_run1.json", id, first.GetRunID()); err != nil {
			return err
		}
		d, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return err
		}
		if err := save("eval_can_run2.json", id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId()); err != nil {
			return err
		}
	}
	return episodes()
}

func converterGet(p *commonpb.Payload, v any) error {
	return converter.GetDefaultDataConverter().FromPayload(p, v)
}
