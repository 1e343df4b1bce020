package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
	"github.com/jobgate/jobgate/workflows/testdata/gen"
)

const tq = "genexport"

func main() {
	out := flag.String("out", "workflows/testdata", "directory for the history file")
	name := flag.String("name", "export_v1.json", "history file name")
	approve := flag.Bool("approve", false, "export a sensitive column too, approved by a steward through a sealed resume")
	flag.Parse()
	if err := run(*out, *name, *approve); err != nil {
		log.Fatal(err)
	}
}

func run(out, name string, approve bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "genexport")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db := filepath.Join(dir, "demo.db")
	if err := activities.SeedDemoDB(db); err != nil {
		return err
	}
	store, err := activities.OpenArtifactStore(ctx, "file://"+filepath.Join(dir, "artifacts"))
	if err != nil {
		return err
	}
	defer store.Close()

	datasets := activities.DemoDatasets(db)
	// Resumes are sealed as a frontend seals them.
	keys, err := handle.NewKeyring("gen", map[string][]byte{"gen": handle.GenerateKey()})
	if err != nil {
		return err
	}
	e, err := gen.Start(ctx, tq, workflows.KindExport, &workflows.Workflows{Resume: frontend.ResumeVerifier(keys)},
		&activities.Activities{Datasets: datasets, Artifacts: store, DB: &activities.DBPool{}})
	if err != nil {
		return err
	}
	defer e.Stop()

	d := datasets["customers"]
	in := workflows.ExportInput{Tenant: "acme", Owner: "ann",
		Args: workflows.ExportArgs{Dataset: "customers", Format: "csv", Columns: []string{"id", "name", "country"},
			Purpose: "replay history"},
		ConfigDigest: d.ConfigDigest(), MaxRows: d.MaxRows, Retention: workflows.Duration(time.Hour),
		PartRows: 2000, PageRows: 500, Concurrency: 2}
	id := "acme/export/replay"
	if approve {
		in.Args.Columns = append(in.Args.Columns, "email")
	}
	run, err := e.StartJob(ctx, id, workflows.KindExport, in.Tenant, in.Owner, in)
	if err != nil {
		return err
	}
	if approve {
		if err := approveSealed(ctx, e.Client, keys, id); err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
	}
	var res workflows.ExportResult
	if err := run.Get(ctx, &res); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	events, err := e.Save(ctx, out, name, id, run.GetRunID())
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d events, %d rows, artifact %s\n", name, events, res.Manifest.Rows, res.Manifest.Object)
	return nil
}

// approveSealed waits for the job's open approval request and answers it as a steward would
// through a frontend: a sealed resume.
func approveSealed(ctx context.Context, c client.Client, keys *handle.Keyring, id string) error {
	steward := authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove}}
	var n *workflows.NeedsInput
	var runID string
	for range 100 {
		d, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return err
		}
		runID = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		if p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoNeedsInput]; p != nil {
			if err := converter.GetDefaultDataConverter().FromPayload(p, &n); err != nil {
				return err
			}
			if n != nil {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n == nil {
		return errors.New("no open approval request")
	}
	req := workflows.ResumeRequest{Principal: steward, InputID: n.InputID, ScopeDigest: n.ScopeDigest,
		Decision: workflows.DecisionApprove, Comment: "ok for replay",
		Surface: workflows.SurfaceTool, SignedInWith: workflows.SignedInBearerJWT}
	req.Seal = frontend.SealResume(keys, id, runID, req, time.Now().Add(5*time.Minute))
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: workflows.UpdateResume, Args: []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}
