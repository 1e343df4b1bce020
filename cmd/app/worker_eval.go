package app

import (
	"context"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/workflows"
)

// evalWorker is the eval kind in a worker: the task queues its suites name (dev serves them
// all in one process) and the command-suite warning.
func evalWorker() workerKind {
	return workerKind{name: workflows.KindEval,
		queues: func(m *WorkerMain, acts *activities.Activities, tq string) []string {
			if !m.Config.ServeSuiteQueues {
				return nil
			}
			return acts.Suites.TaskQueues()
		},
		polling: func(_ context.Context, m *WorkerMain, acts *activities.Activities, tq string) {
			m.warnCommandSuites(acts.Suites, tq, acts.Datasets)
		}}
}

// warnCommandSuites warns about command suites whose episodes this worker runs while it holds
// dataset or artifact credentials: give such a suite a task_queue served by a worker without
// them (activities/README.md "Command episodes").
func (m *WorkerMain) warnCommandSuites(suites activities.Catalog, tq string, datasets activities.Datasets) {
	if len(datasets) == 0 && m.artifacts == nil {
		return
	}
	for _, name := range suites.Names() {
		s := suites[name]
		if s.Kind == activities.SuiteCommand && (s.TaskQueue == "" || s.TaskQueue == tq) {
			m.Logger.Warn("command suite's episodes run on a worker holding dataset or artifact credentials; "+
				"give the suite a task_queue served by a worker started with --kinds eval",
				zap.String("suite", name), zap.String("task_queue", tq))
		}
	}
}
