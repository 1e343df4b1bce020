package app

import (
	"context"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
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
func (m *WorkerMain) warnCommandSuites(suites contract.Catalog, tq string, datasets contract.Datasets) {
	if len(datasets) == 0 && m.artifacts == nil {
		return
	}
	for _, name := range suites.Names() {
		s := suites[name]
		if s.Kind == contract.SuiteCommand && (s.TaskQueue == "" || s.TaskQueue == tq) {
			m.Logger.Warn("command suite's episodes run on a worker holding dataset or artifact credentials; "+
				"give the suite a task_queue served by a worker started with --kinds eval",
				zap.String("suite", name), zap.String("task_queue", tq))
		}
	}
}

// segmentEpisodes answers WriteEpisodes' read of a run's segment with the run's own
// jobgate.episodes query: the outcomes go from the workflow's memory to the artifact store
// without passing through history. The run is named by its run ID, so a later run of the job
// is never asked for an earlier one's segment.
func segmentEpisodes(c client.Client) activities.SegmentEpisodesFunc {
	return func(ctx context.Context, jobID, runID string) (int, []contract.EpisodeOutcome, error) {
		v, err := c.QueryWorkflow(ctx, jobID, runID, workflows.QueryEpisodes, workflows.EpisodesQuery{})
		if err != nil {
			return 0, nil, err
		}
		var res workflows.EpisodesQueryResult
		if err := v.Get(&res); err != nil {
			return 0, nil, err
		}
		return res.Segment, res.Episodes, nil
	}
}
