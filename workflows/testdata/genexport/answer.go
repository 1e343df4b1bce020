package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle/resumeseal"
	"github.com/jobgate/jobgate/workflows"
)

// waitInput waits for the job's open input request other than the one named skip.
func (r *recorder) waitInput(ctx context.Context, id, skip string) (*workflows.NeedsInput, error) {
	for range 300 {
		d, err := r.e.Client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return nil, err
		}
		if p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoNeedsInput]; p != nil {
			var n *workflows.NeedsInput
			if err := converter.GetDefaultDataConverter().FromPayload(p, &n); err != nil {
				return nil, err
			}
			if n != nil && n.InputID != skip {
				return n, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, errors.New("no open approval request")
}

// approve waits for the job's open approval request (other than skip), calls before (if set),
// and answers it as a steward would through a frontend: a sealed resume. It returns the
// input ID answered.
func (r *recorder) approve(ctx context.Context, id, skip string, before func()) (string, error) {
	n, err := r.waitInput(ctx, id, skip)
	if err != nil {
		return "", err
	}
	if before != nil {
		before()
	}
	d, err := r.e.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return "", err
	}
	runID := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	steward := authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove}}
	req := workflows.ResumeRequest{Principal: steward, InputID: n.InputID, ScopeDigest: n.ScopeDigest,
		Decision: workflows.DecisionApprove, Comment: "ok for replay",
		Surface: workflows.SurfaceTool, SignedInWith: workflows.SignedInBearerJWT}
	req.Seal = resumeseal.Seal(r.keys, id, runID, req, time.Now().Add(5*time.Minute))
	h, err := r.e.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: workflows.UpdateResume, Args: []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return "", err
	}
	return n.InputID, h.Get(ctx, nil)
}

// cancelAndWait cancels the job and waits until it closed as cancelled.
func (r *recorder) cancelAndWait(ctx context.Context, id string, run client.WorkflowRun) error {
	if err := r.e.Client.CancelWorkflow(ctx, id, ""); err != nil {
		return err
	}
	return r.waitClosed(ctx, id, run)
}

// waitClosed waits for the run to end, and wants it cancelled.
func (r *recorder) waitClosed(ctx context.Context, id string, run client.WorkflowRun) error {
	err := run.Get(ctx, nil)
	var canceled *temporal.CanceledError
	if !errors.As(err, &canceled) {
		return fmt.Errorf("%s: want cancelled, got %v", id, err)
	}
	return nil
}
