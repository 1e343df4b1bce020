package app

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// exportServe is the export kind in serve: the dataset catalog callers may name, and the
// artifact store downloads read from.
func exportServe() serveKind {
	return serveKind{name: workflows.KindExport,
		flags: func(fs *flag.FlagSet, c *ServeConfig) {
			fs.StringVar(&c.DatasetsFile, "datasets", "", "JSON export dataset catalog file; share it with the workers")
			fs.StringVar(&c.ArtifactsURL, "artifacts", "", "artifact store URL (as given to the workers): export downloads and eval episode logs")
			fs.DurationVar(&c.DownloadTTL, "download-ttl", jobcore.DownloadTTLDefault, "how long an export's download link stays valid")
		},
		spec: func(ctx context.Context, m *ServeMain) (jobcore.KindSpec, error) {
			c := m.Config
			datasets := c.Datasets
			if datasets == nil {
				var err error
				if datasets, err = contract.LoadDatasets(c.DatasetsFile); err != nil {
					return nil, err
				}
			}
			artifacts, err := m.artifactStore(ctx)
			if err != nil {
				return nil, err
			}
			return jobcore.ExportKind(jobcore.ExportOptions{Datasets: datasets, Artifacts: artifacts,
				DownloadTTL: c.DownloadTTL, Tuning: c.Export}), nil
		},
		devFlags: exportDevFlags, dev: exportDev}
}

func exportDevFlags(fs *flag.FlagSet, c *DevConfig) {
	fs.StringVar(&c.DatasetsFile, "datasets", "", "export dataset catalog file (default: the demo customers dataset, seeded in the data dir)")
	fs.StringVar(&c.ArtifactsURL, "artifacts", "", "export artifact store URL (default: file://<data dir>/artifacts)")
}

// exportDev gives dev's worker and frontend the same dataset catalog and artifact store: by
// default the demo "customers" dataset over a SQLite database seeded in dir, and artifacts
// under it.
func exportDev(c DevConfig, dir string, w *WorkerConfig, s *ServeConfig) error {
	artifacts := c.ArtifactsURL
	if artifacts == "" {
		artifacts = (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(dir, "artifacts"))}).String()
	}
	var datasets contract.Datasets
	if c.DatasetsFile != "" {
		var err error
		if datasets, err = contract.LoadDatasets(c.DatasetsFile); err != nil {
			return err
		}
	} else {
		db := filepath.Join(dir, "demo.db")
		if err := activities.SeedDemoDB(db); err != nil {
			return fmt.Errorf("seed demo dataset: %w", err)
		}
		datasets = contract.DemoDatasets(db)
	}
	w.Datasets, w.ArtifactsURL = datasets, artifacts
	s.Datasets, s.ArtifactsURL = datasets, artifacts
	return nil
}

// artifactStore is --artifacts, opened on first use and shared by the kinds; nil without it.
// It returns the interface the kinds hold, never a nil *ArtifactStore inside one, so their
// nil checks (no store: no downloads) hold.
func (m *ServeMain) artifactStore(ctx context.Context) (contract.ArtifactReader, error) {
	if m.artifacts != nil || m.Config.ArtifactsURL == "" {
		return m.artifacts, nil
	}
	s, err := activities.OpenArtifactStore(ctx, m.Config.ArtifactsURL)
	if err != nil {
		return nil, err
	}
	m.artifacts = s
	m.closeOnExit(s.Close)
	return s, nil
}
