package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/workflows"
)

// exportWorker is the export kind in a worker: its dataset catalog and artifact store, opened
// only by workers serving exports, and the namespace retention check.
func exportWorker() workerKind {
	return workerKind{name: workflows.KindExport, prepare: prepareExport,
		polling: func(ctx context.Context, m *WorkerMain, acts *activities.Activities, _ string) {
			// The workers that write artifacts warn; serve replicas do not repeat the check.
			go warnRetention(ctx, m.Client, m.Config.Temporal.Namespace, acts.Datasets, m.Logger)
		}}
}

func prepareExport(ctx context.Context, m *WorkerMain, acts *activities.Activities, serving bool) error {
	var err error
	datasets := m.Config.Datasets
	if !serving {
		// The point of a worker without exports is to hold none of their credentials: refuse
		// them rather than open them unused.
		if m.Config.DatasetsFile != "" || len(datasets) > 0 || m.Config.ArtifactsURL != "" {
			return fmt.Errorf("--datasets and --artifacts serve the export kind, which this worker does not (--kinds %s): "+
				"leave them unset so it holds no dataset or artifact credentials", strings.Join(m.Config.Kinds, ","))
		}
		datasets = nil
	} else if datasets == nil {
		if datasets, err = contract.LoadDatasets(m.Config.DatasetsFile); err != nil {
			return err
		}
	}
	if m.Config.ArtifactsURL != "" {
		if m.artifacts, err = activities.OpenArtifactStore(ctx, m.Config.ArtifactsURL); err != nil {
			return err
		}
	} else if len(datasets) > 0 {
		return errors.New("--artifacts is required when datasets are configured (exports write there)")
	}
	acts.Datasets, acts.Artifacts = datasets, m.artifacts
	return nil
}
