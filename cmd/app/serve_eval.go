package app

import (
	"context"
	"flag"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// evalServe is the eval kind in serve: the suite catalog callers may name.
func evalServe() serveKind {
	return serveKind{name: workflows.KindEval,
		flags: func(fs *flag.FlagSet, c *ServeConfig) { suitesFlag(fs, &c.SuitesFile) },
		spec: func(ctx context.Context, m *ServeMain) (jobcore.KindSpec, error) {
			suites, err := contract.LoadCatalog(m.Config.SuitesFile)
			if err != nil {
				return nil, err
			}
			// The eval kind reads episode logs from the export kind's artifact store (--artifacts).
			artifacts, err := m.artifactStore(ctx)
			if err != nil {
				return nil, err
			}
			return jobcore.EvalKind(jobcore.EvalOptions{Suites: suites, Artifacts: artifacts, DownloadTTL: m.Config.DownloadTTL}), nil
		},
		devFlags: func(fs *flag.FlagSet, c *DevConfig) { suitesFlag(fs, &c.SuitesFile) },
		dev:      evalDev}
}

// suitesFlag is --suites of serve and dev (the worker's says more about the file's shape).
func suitesFlag(fs *flag.FlagSet, file *string) {
	fs.StringVar(file, "suites", "", "JSON suite catalog file; the demo suite is always present")
}

// evalDev gives dev's worker and frontend the same suites; the worker serves every suite's
// task queue, so a suite with a task_queue of its own runs in dev too.
func evalDev(c DevConfig, _ string, w *WorkerConfig, s *ServeConfig) error {
	w.SuitesFile, w.ServeSuiteQueues, s.SuitesFile = c.SuitesFile, true, c.SuitesFile
	return nil
}
