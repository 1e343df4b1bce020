package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/workflows"
	"github.com/jobgate/jobgate/workflows/testdata/gen"
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

	datasets := activities.DemoDatasets(db)
	e, err := gen.Start(ctx, tq, workflows.KindExport, &workflows.Workflows{},
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
	run, err := e.StartJob(ctx, id, workflows.KindExport, in.Tenant, in.Owner, in)
	if err != nil {
		return err
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
