// Command genexport records Export workflow histories for the replay tests in
// workflows/export_test.go, against an embedded Temporal server, real activities, the demo
// SQLite dataset and a file artifact store:
//
//	go run ./workflows/testdata/genexport -out workflows/testdata -name export_v1.json
//
// export_v0.json was recorded with this program at 972cb3d, before artifacts, the retention
// child and operation IDs were scoped by the job's first run: it proves that jobs started by
// older workers still replay (workflow.GetVersion keeps them on the legacy prefix and child
// ID). It lives under testdata so `go build ./...`, `go vet ./...` and `go test ./...` skip it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/cmd/devtemporal"
	"github.com/jobgate/jobgate/workflows"
)

const tq = "genexport"

func main() {
	out := flag.String("out", "workflows/testdata", "directory for the history file")
	name := flag.String("name", "export_v1.json", "history file name")
	flag.Parse()
	if err := run(*out, *name); err != nil {
		log.Fatal(err)
	}
}

func run(out, name string) error {
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

	sas := map[string]enumspb.IndexedValueType{}
	for _, n := range workflows.SearchAttributeNames() {
		sas[n] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	srv, err := devtemporal.Start(ctx, devtemporal.Options{UIPort: devtemporal.UIDisabled, SearchAttributes: sas})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Stop() }()
	c, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Namespace: srv.Namespace()})
	if err != nil {
		return err
	}
	defer c.Close()
	w := worker.New(c, tq, worker.Options{})
	datasets := activities.DemoDatasets(db)
	k, _ := workflows.LookupKind(workflows.KindExport)
	if _, _, err := k.Register(w, &workflows.Workflows{}, &activities.Activities{Datasets: datasets, Artifacts: store, DB: &activities.DBPool{}}); err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return err
	}
	defer w.Stop()

	d := datasets["customers"]
	in := workflows.ExportInput{Tenant: "acme", Owner: "ann",
		Args: workflows.ExportArgs{Dataset: "customers", Format: "csv", Columns: []string{"id", "name", "country"},
			Purpose: "replay history"},
		ConfigDigest: d.ConfigDigest(), MaxRows: d.MaxRows, Retention: workflows.Duration(time.Hour),
		PartRows: 2000, PageRows: 500, Concurrency: 2}
	id := "acme/export/replay"
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: tq,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.SAJobTenant.ValueSet(in.Tenant), workflows.SAJobOwner.ValueSet(in.Owner),
			workflows.SAJobKind.ValueSet(workflows.KindExport), workflows.SAJobStatus.ValueSet(string(workflows.StatusQueued))),
	}, workflows.ExportWorkflowName, in)
	if err != nil {
		return err
	}
	var res workflows.ExportResult
	if err := run.Get(ctx, &res); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	it := c.GetWorkflowHistory(ctx, id, run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return err
		}
		h.Events = append(h.Events, ev)
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d events, %d rows, artifact %s\n", name, len(h.Events), res.Manifest.Rows, res.Manifest.Object)
	return os.WriteFile(filepath.Join(out, name), append(b, '\n'), 0o644)
}
