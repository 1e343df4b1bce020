package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/handle/resumeseal"
	"github.com/jobgate/jobgate/workflows"
	"github.com/jobgate/jobgate/workflows/testdata/gen"
)

const tq = "genexport"

// scenarios are what -scenario records, each the default file name it writes.
var scenarios = map[string]string{
	"plain":          "export_v1.json",
	"approve":        "export_v2.json",
	"reask":          "export_reask.json",
	"cancel-waiting": "export_cancel_waiting.json",
	"cancel-parts":   "export_cancel_parts.json",
	"retention":      "export_retention.json",
}

func main() {
	out := flag.String("out", "workflows/testdata", "directory for the history file")
	name := flag.String("name", "", "history file name (default: the scenario's, e.g. export_v1.json)")
	approve := flag.Bool("approve", false, "same as -scenario approve (kept for the command that recorded export_v2.json)")
	scenario := flag.String("scenario", "plain", "what to record: "+strings.Join(slices.Sorted(func(yield func(string) bool) {
		for k := range scenarios {
			if !yield(k) {
				return
			}
		}
	}), ", "))
	flag.Parse()
	if *approve {
		*scenario = "approve"
	}
	if _, ok := scenarios[*scenario]; !ok {
		log.Fatalf("-scenario %q: unknown", *scenario)
	}
	if *name == "" {
		*name = scenarios[*scenario]
	}
	if err := run(*out, *name, *scenario); err != nil {
		log.Fatal(err)
	}
}

// recorder is one recording: the embedded server and worker, the dataset catalog the worker
// reads (the reask scenario changes it while the job waits), the sealing keys, and a gate the
// cancel-parts scenario holds a part's first statement at.
type recorder struct {
	e        *gen.Env
	keys     *handle.Keyring
	datasets contract.Datasets
	// partGate, when set, receives once when a part sends its first statement, which then
	// waits until release is closed.
	mu       sync.Mutex
	partGate chan struct{}
	release  chan struct{}
}

// hook is the activities' QueryHook: it holds the first part statement for cancel-parts. The
// plan's statement selects only the key column; a part's selects the exported columns.
func (r *recorder) hook(_ string, q string) {
	r.mu.Lock()
	gate := r.partGate
	if gate != nil && strings.Contains(q, `"name"`) {
		r.partGate = nil
	} else {
		gate = nil
	}
	r.mu.Unlock()
	if gate != nil {
		gate <- struct{}{}
		<-r.release
	}
}

func run(out, name, scenario string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "genexport")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r, stop, err := startRecorder(ctx, dir)
	if err != nil {
		return err
	}
	defer stop()

	id := "acme/export/replay"
	in := r.input(scenario)
	if scenario == "cancel-parts" {
		r.partGate, r.release = make(chan struct{}, 1), make(chan struct{})
	}
	run, err := r.e.StartJob(ctx, id, workflows.KindExport, in.Tenant, in.Owner, in)
	if err != nil {
		return err
	}
	saveID, saveRun := id, run.GetRunID()
	var summary string
	switch scenario {
	case "plain", "approve", "reask", "retention":
		if saveID, saveRun, summary, err = r.complete(ctx, scenario, id, run); err != nil {
			return err
		}
	case "cancel-waiting":
		if summary, err = r.cancelWaiting(ctx, id, run); err != nil {
			return err
		}
	case "cancel-parts":
		if summary, err = r.cancelParts(ctx, id, run); err != nil {
			return err
		}
	}
	events, err := r.e.Save(ctx, out, name, saveID, saveRun)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d events, %s\n", name, events, summary)
	return nil
}

// startRecorder seeds the demo database and the artifact store under dir and starts the
// embedded server and worker; stop shuts down both.
func startRecorder(ctx context.Context, dir string) (r *recorder, stop func(), err error) {
	db := filepath.Join(dir, "demo.db")
	if err := activities.SeedDemoDB(db); err != nil {
		return nil, nil, err
	}
	store, err := activities.OpenArtifactStore(ctx, "file://"+filepath.Join(dir, "artifacts"))
	if err != nil {
		return nil, nil, err
	}
	r = &recorder{datasets: contract.DemoDatasets(db)}
	// Resumes are sealed as a frontend seals them.
	if r.keys, err = handle.NewKeyring("gen", map[string][]byte{"gen": handle.GenerateKey()}); err != nil {
		store.Close()
		return nil, nil, err
	}
	r.e, err = gen.Start(ctx, tq, workflows.KindExport, &workflows.Workflows{Resume: resumeseal.Verifier(r.keys)},
		&activities.Activities{Datasets: r.datasets, Artifacts: store, DB: &activities.DBPool{}, QueryHook: r.hook})
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return r, func() { r.e.Stop(); store.Close() }, nil
}

// input is the job every scenario starts: the approval scenarios add a sensitive column (email)
// so the job asks, and retention shortens the artifact's life so its child deletes in time.
func (r *recorder) input(scenario string) workflows.ExportInput {
	d := r.datasets["customers"]
	in := workflows.ExportInput{Tenant: "acme", Owner: "ann",
		Args: workflows.ExportArgs{Dataset: "customers", Format: "csv", Columns: []string{"id", "name", "country"},
			Purpose: "replay history"},
		ConfigDigest: d.ConfigDigest(), MaxRows: d.MaxRows, Retention: workflows.Duration(time.Hour),
		PartRows: 2000, PageRows: 500, Concurrency: 2}
	if scenario != "plain" && scenario != "retention" {
		in.Args.Columns = append(in.Args.Columns, "email")
	}
	if scenario == "retention" {
		// Short enough that the child's timer fires and it deletes while we wait.
		in.Retention = workflows.Duration(2 * time.Second)
	}
	return in
}

// complete runs the scenarios that end in an artifact (plain, approve, reask, retention),
// answering the approvals they ask for. It returns the run to save: the job's, or for retention
// its retention child's, which has then deleted the artifact.
func (r *recorder) complete(ctx context.Context, scenario, id string, run client.WorkflowRun) (saveID, saveRun, summary string, err error) {
	if scenario == "approve" || scenario == "reask" {
		first, err := r.approve(ctx, id, "", func() {
			if scenario == "reask" {
				// The dataset's config changes after the job asked: its plan reports the
				// change, and it asks again (approve-2) before reading any row.
				d := r.datasets["customers"]
				d.MaxRows++
				r.datasets["customers"] = d
			}
		})
		if err != nil {
			return "", "", "", fmt.Errorf("%s: %w", id, err)
		}
		if scenario == "reask" {
			if _, err := r.approve(ctx, id, first, nil); err != nil {
				return "", "", "", fmt.Errorf("%s: second approval: %w", id, err)
			}
		}
	}
	var res workflows.ExportResult
	if err := run.Get(ctx, &res); err != nil {
		return "", "", "", fmt.Errorf("%s: %w", id, err)
	}
	summary = fmt.Sprintf("%d rows, artifact %s", res.Manifest.Rows, res.Manifest.Object)
	if scenario != "retention" {
		return id, run.GetRunID(), summary, nil
	}
	saveID = id + "/retention/" + run.GetRunID()
	if err := r.e.Client.GetWorkflow(ctx, saveID, "").Get(ctx, nil); err != nil {
		return "", "", "", fmt.Errorf("%s: %w", saveID, err)
	}
	return saveID, "", "retention child of a " + summary, nil
}

// cancelWaiting cancels the job while it waits for approval.
func (r *recorder) cancelWaiting(ctx context.Context, id string, run client.WorkflowRun) (string, error) {
	if _, err := r.waitInput(ctx, id, ""); err != nil {
		return "", err
	}
	if err := r.cancelAndWait(ctx, id, run); err != nil {
		return "", err
	}
	return "cancelled while awaiting approval", nil
}

// cancelParts approves the job, then cancels it while a part is held at its first statement.
func (r *recorder) cancelParts(ctx context.Context, id string, run client.WorkflowRun) (string, error) {
	if _, err := r.approve(ctx, id, "", nil); err != nil {
		return "", err
	}
	select {
	case <-r.partGate:
	case <-ctx.Done():
		return "", fmt.Errorf("%s: no part started", id)
	}
	// The part is held at its first statement: cancel, then let it go on (it sees the
	// cancel at its next heartbeat, or finishes; the job is cancelled either way).
	err := r.e.Client.CancelWorkflow(ctx, id, "")
	close(r.release)
	if err != nil {
		return "", err
	}
	if err := r.waitClosed(ctx, id, run); err != nil {
		return "", err
	}
	return "cancelled while parts ran", nil
}
