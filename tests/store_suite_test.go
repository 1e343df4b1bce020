package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/storetest"
	"github.com/jobgate/jobgate/frontend/temporalstore"
	"github.com/jobgate/jobgate/workflows"
)

// TestStoreSuiteTemporal runs the store suite (frontend/jobstore/storetest) against the
// Temporal store on the embedded server: the same filters, counts and pages the in-memory
// store answers in the unit tests (frontend/jobstore/memstore), answered by Temporal's own
// visibility. The jobs are real workflows of a small workflow that ends as the suite says.
func TestStoreSuiteTemporal(t *testing.T) {
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: namespace})
	must(t, err)
	t.Cleanup(c.Close)
	tq := "tq-storesuite-" + randHex(6)
	w := worker.New(c, tq, worker.Options{})
	w.RegisterWorkflowWithOptions(suiteWorkflow, workflow.RegisterOptions{Name: suiteWorkflowName})
	must(t, w.Start())
	t.Cleanup(w.Stop)
	store := temporalstore.New(c, namespace, tq, converter.GetDefaultDataConverter())
	seen := map[string]int{} // by tenant, the runs earlier seeds made visible (the suite seeds twice)
	storetest.Run(t, storetest.Harness{Store: store, Seed: func(t *testing.T, jobs []storetest.Job) {
		seedSuiteJobs(t, c, store, tq, jobs, seen)
	}})
}

const suiteWorkflowName = "jobgate.storesuite"

// suiteIn says how a suite job's run ends: "completed", "canceled" (once cancelled), or never
// (running; a terminated one is terminated by the test). Continue: continue as new first.
type suiteIn struct {
	End      string
	Continue bool
}

func suiteWorkflow(ctx workflow.Context, in suiteIn) error {
	if in.Continue {
		return workflow.NewContinueAsNewError(ctx, suiteWorkflowName, suiteIn{End: in.End})
	}
	switch in.End {
	case "completed":
		return nil
	case "canceled":
		ctx.Done().Receive(ctx, nil)
		return ctx.Err()
	}
	workflow.GetSignalChannel(ctx, "never").Receive(ctx, nil)
	return nil
}

// seedSuiteJobs starts each job's workflow, one after the other, with the search attributes a
// jobgate job carries, brings its run to the suite's end, and returns once the store lists and
// counts every run.
func seedSuiteJobs(t *testing.T, c client.Client, store jobstore.Store, tq string, jobs []storetest.Job, seen map[string]int) {
	t.Helper()
	ctx := t.Context()
	runs := map[string]int{}   // tenant → runs the store must show
	closed := map[string]int{} // tenant → those of them closed
	for _, j := range jobs {
		sa := []temporal.SearchAttributeUpdate{workflows.SAJobTenant.ValueSet(j.Tenant), workflows.SAJobOwner.ValueSet(j.Owner),
			workflows.SAJobKind.ValueSet(j.Kind), workflows.SAJobStatus.ValueSet(string(j.Phase))}
		if j.Answerer != "" {
			sa = append(sa, workflows.SAJobAnswerer.ValueSet(j.Answerer))
		}
		if j.Slots > 0 {
			sa = append(sa, workflows.SAJobSlots.ValueSet(int64(j.Slots)))
		}
		in := suiteIn{Continue: j.Continued}
		switch j.End {
		case jobstore.RunCompleted:
			in.End = "completed"
		case jobstore.RunCanceled:
			in.End = "canceled"
		}
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: j.ID, TaskQueue: tq,
			TypedSearchAttributes: temporal.NewSearchAttributes(sa...)}, suiteWorkflowName, in)
		must(t, err)
		runs[j.Tenant]++
		if j.Continued {
			runs[j.Tenant]++
			closed[j.Tenant]++ // the first run, continued as new
		}
		if j.End != jobstore.RunRunning {
			closed[j.Tenant]++
		}
		switch j.End {
		case jobstore.RunCompleted:
			must(t, c.GetWorkflow(ctx, j.ID, "").Get(ctx, nil))
		case jobstore.RunTerminated:
			must(t, c.TerminateWorkflow(ctx, j.ID, "", "store suite"))
		case jobstore.RunCanceled:
			must(t, c.CancelWorkflow(ctx, j.ID, ""))
			var ce *temporal.CanceledError
			if err := c.GetWorkflow(ctx, j.ID, "").Get(ctx, nil); !errors.As(err, &ce) {
				t.Fatalf("%s: want cancelled, got %v", j.ID, err)
			}
		default:
			if j.Continued { // the continued run is the one that runs now
				eventually(t, 10*time.Second, j.ID+" continued", func() bool {
					d, err := c.DescribeWorkflowExecution(ctx, j.ID, "")
					return err == nil && d.GetWorkflowExecutionInfo().GetExecution().GetRunId() != run.GetRunID()
				})
			}
		}
	}
	// Visibility records a run's start and its close separately, each a little after the fact:
	// wait for both, or a close landing mid-listing moves a run between pages (CI once listed
	// bo's "later" export twice).
	anyClose := time.Unix(1, 0)
	for ten, n := range runs {
		eventually(t, 20*time.Second, "visibility shows the suite's runs of "+ten+", closed ones closed", func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			got, err := store.Count(cctx, jobstore.Filter{Tenant: ten})
			if err != nil || got != n+seen[ten] {
				return false
			}
			got, err = store.Count(cctx, jobstore.Filter{Tenant: ten, ClosedSince: anyClose})
			return err == nil && got == closed[ten]+seen[ten+"\x00closed"]
		})
		seen[ten] += n
		seen[ten+"\x00closed"] += closed[ten]
	}
}
