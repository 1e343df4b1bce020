package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/handle/resumeseal"
	"github.com/jobgate/jobgate/workflows"
	"github.com/jobgate/jobgate/workflows/testdata/gen"
)

const tq = "genfixture"

var owner = authz.Principal{Tenant: "acme", Subject: "ann", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}

func main() {
	out := flag.String("out", "workflows/testdata", "directory for the history files")
	flag.Parse()
	if err := run(*out); err != nil {
		log.Fatal(err)
	}
}

func run(out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys, err := handle.NewKeyring("gen", map[string][]byte{"gen": handle.GenerateKey()})
	if err != nil {
		return err
	}
	e, err := gen.Start(ctx, tq, workflows.KindFixture, &workflows.Workflows{Resume: resumeseal.Verifier(keys)}, &activities.Activities{})
	if err != nil {
		return err
	}
	defer e.Stop()
	c := e.Client
	start := func(id, tool string, seconds int) (client.WorkflowRun, error) {
		in := workflows.FixtureInput{Tenant: "acme", Owner: "ann", Tool: tool, Seconds: seconds, InputTimeout: workflows.Duration(time.Hour)}
		return e.StartJob(ctx, id, workflows.KindFixture, in.Tenant, in.Owner, in)
	}
	save := func(name string, run client.WorkflowRun) error {
		_ = run.Get(ctx, nil) // failed and cancelled runs are recorded too
		events, err := e.Save(ctx, out, name, run.GetID(), run.GetRunID())
		if err == nil {
			fmt.Printf("%s: %d events\n", name, events)
		}
		return err
	}
	// answer waits for the open request to ask for key, then answers it as tasks/update does.
	answer := func(run client.WorkflowRun, key, name string) error {
		for range 100 {
			d, err := c.DescribeWorkflowExecution(ctx, run.GetID(), "")
			if err != nil {
				return err
			}
			var n *workflows.NeedsInput
			if p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoNeedsInput]; p != nil {
				if err := converter.GetDefaultDataConverter().FromPayload(p, &n); err != nil {
					return err
				}
			}
			if n == nil || !askedFor(n, key) {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			b, _ := json.Marshal(map[string]any{"answers": map[string]any{key: map[string]any{"name": name, "confirm": true}}})
			req := workflows.ResumeRequest{Principal: owner, InputID: n.InputID, ScopeDigest: n.ScopeDigest,
				Decision: workflows.DecisionApprove, Comment: string(b), Surface: workflows.SurfaceTasks,
				SignedInWith: workflows.SignedInBearerJWT, Meaning: n.Prompt}
			req.Seal = resumeseal.Seal(keys, run.GetID(), run.GetRunID(), req, time.Now().Add(5*time.Minute))
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: workflows.UpdateResume,
				UpdateID: "answer-" + key, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err != nil {
				return err
			}
			return h.Get(ctx, nil)
		}
		return errors.New("the question " + key + " was never asked")
	}

	run, err := start("acme/fixture/ann/replay-multi", workflows.FixtureMultiInput, 0)
	if err == nil {
		err = answer(run, "first", "one")
	}
	if err == nil {
		err = answer(run, "second", "two")
	}
	if err == nil {
		err = save("fixture_multi_input.json", run)
	}
	if err != nil {
		return err
	}

	if run, err = start("acme/fixture/ann/replay-cancel", workflows.FixtureSlowCompute, 60); err != nil {
		return err
	}
	time.Sleep(time.Second) // let it start waiting
	if err := c.CancelWorkflow(ctx, run.GetID(), ""); err != nil {
		return err
	}
	if err := save("fixture_cancelled.json", run); err != nil {
		return err
	}

	if run, err = start("acme/fixture/ann/replay-protocol-error", workflows.FixtureProtocolError, 0); err != nil {
		return err
	}
	return save("fixture_protocol_error.json", run)
}

func askedFor(n *workflows.NeedsInput, key string) bool {
	pending, _ := n.Scope["pending"].([]any)
	for _, k := range pending {
		if k == key {
			return true
		}
	}
	return false
}
