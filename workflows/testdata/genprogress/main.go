// Command genprogress records the replay histories of a job.progress run in workflows/testdata
// against an embedded Temporal server: an eval (6 episodes, 3 per run, so it continues as new)
// whose tenant wants job.progress and job.finished, with its notifier. Rerun it after a
// deliberate, versioned change to these workflows:
//
//	go run ./workflows/testdata/genprogress -out workflows/testdata
//
// It writes eval_progress_run1.json, eval_progress_run2.json (the job: the notifier's child
// start, then in the last run the end signal) and notify_progress.json (the notifier: windows,
// the end signal, job.finished). Deliveries go to a local receiver that answers 204.
//
// It lives under testdata so `go build ./...`, `go vet ./...` and `go test ./...` skip it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
	"github.com/jobgate/jobgate/workflows/testdata/gen"
)

const tq = "genprogress"

// wants is a tenants file whose acme wants job.progress and job.finished.
type wants struct{}

func (wants) Wants(tenant, event string) bool {
	return tenant == "acme" && (event == authz.EventJobProgress || event == authz.EventJobFinished)
}

func main() {
	out := flag.String("out", "workflows/testdata", "directory for the history files")
	flag.Parse()
	if err := run(*out); err != nil {
		log.Fatal(err)
	}
}

func run(out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer recv.Close()
	target := activities.NotifyTarget{NotifyEndpoint: authz.NotifyEndpoint{Name: "recv", URL: recv.URL,
		Events: []string{authz.EventJobProgress, authz.EventJobFinished}, ProgressEvery: "5s", AllowPrivate: true},
		Secret: []byte("0123456789abcdef0123456789abcdef")}
	var c client.Client
	n := &activities.Notifier{PublicURL: "https://jobgate.example",
		Targets: func(tenant, event string) []activities.NotifyTarget {
			if tenant == "acme" && target.Wants(event) {
				return []activities.NotifyTarget{target}
			}
			return nil
		},
		Snapshot: func(ctx context.Context, jobID, firstRunID string) (activities.JobSnapshot, error) {
			d, err := c.DescribeWorkflowExecution(ctx, jobID, "")
			if err != nil {
				return activities.JobSnapshot{}, err
			}
			info := d.GetWorkflowExecutionInfo()
			s := activities.JobSnapshot{Closed: info.GetCloseTime() != nil}
			if p := info.GetSearchAttributes().GetIndexedFields()[workflows.SAJobStatus.GetName()]; p != nil {
				_ = converterGet(p, &s.Status)
			}
			if p := info.GetMemo().GetFields()[workflows.MemoProgress]; p != nil {
				var prog workflows.Progress
				if err := converterGet(p, &prog); err == nil {
					s.Progress = contract.EventProgress{Done: prog.Done, Failed: prog.Failed, Total: prog.Total, Unit: prog.Unit,
						Message: prog.Message, AsOf: prog.AsOf}
				}
			}
			return s, nil
		}}
	e, err := gen.StartWith(ctx, tq, workflows.KindEval, &workflows.Workflows{Notify: wants{}},
		&activities.Activities{Suites: contract.DefaultCatalog(), HeartbeatEvery: 100 * time.Millisecond},
		func(r workflows.Registry) { workflows.RegisterNotify(r, n) })
	if err != nil {
		return err
	}
	defer e.Stop()
	c = e.Client

	id := "acme/eval/replay-progress"
	in := workflows.EvalInput{Tenant: "acme", Owner: "ann",
		Args: workflows.EvalArgs{Suite: "demo", Episodes: 6, Concurrency: 2,
			Params: map[string]any{"episode_ms": float64(2000), "fail_rate": float64(0)}},
		Approval:       workflows.ApprovalPolicy{Approver: authz.ApproverOwner, Timeout: workflows.Duration(time.Hour)},
		Episode:        workflows.EpisodePolicy{Timeout: workflows.Duration(time.Minute), HeartbeatTimeout: workflows.Duration(10 * time.Second), MaxAttempts: 3},
		EpisodesPerRun: 3,
	}
	first, err := e.StartJob(ctx, id, workflows.KindEval, in.Tenant, in.Owner, in)
	if err != nil {
		return err
	}
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	notifier := id + "/progress/" + first.GetRunID()
	if err := c.GetWorkflow(ctx, notifier, "").Get(ctx, nil); err != nil {
		return fmt.Errorf("%s: %w", notifier, err)
	}
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return err
	}
	for _, f := range []struct{ name, id, run string }{
		{"eval_progress_run1.json", id, first.GetRunID()},
		{"eval_progress_run2.json", id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId()},
		{"notify_progress.json", notifier, ""},
	} {
		events, err := e.Save(ctx, out, f.name, f.id, f.run)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %d events\n", f.name, events)
	}
	return nil
}

func converterGet(p *commonpb.Payload, v any) error {
	return converter.GetDefaultDataConverter().FromPayload(p, v)
}
