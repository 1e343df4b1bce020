package app

import (
	"context"
	"flag"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/workflows"
)

// WorkerConfig configures `jobgate worker`.
type WorkerConfig struct {
	Temporal TemporalConfig
	// SuitesFile is a JSON suite catalog added to the built-in demo suite. Defaults to none.
	SuitesFile string
	// MaxConcurrentEpisodes bounds episode activities running in this process. Defaults to 200.
	MaxConcurrentEpisodes int
}

// Flags registers the worker's flags.
func (c *WorkerConfig) Flags(fs *flag.FlagSet) {
	c.Temporal.Flags(fs)
	strFlag(fs, &c.SuitesFile, "suites", "", "JSON suite catalog file ({\"suites\":[...]}); the demo suite is always present")
	intFlag(fs, &c.MaxConcurrentEpisodes, "max-concurrent-episodes", 200, "episode activities this worker runs at once")
}

// WorkerMain runs workflows and activities.
type WorkerMain struct {
	Config WorkerConfig
	Logger *zap.Logger
	// Client, if set, is used instead of dialing (dev shares one).
	Client client.Client

	own bool
	w   worker.Worker
}

// Run starts polling and returns; Close stops.
func (m *WorkerMain) Run(ctx context.Context) error {
	if m.Logger == nil {
		m.Logger = zap.NewNop()
	}
	suites, err := activities.LoadCatalog(m.Config.SuitesFile)
	if err != nil {
		return err
	}
	if m.Client == nil {
		c, err := waitTemporal(ctx, m.Config.Temporal.options(m.Logger))
		if err != nil {
			return err
		}
		m.Client, m.own = c, true
	}
	tq := m.Config.Temporal.TaskQueue
	if tq == "" {
		tq = workflows.TaskQueueDefault
	}
	m.w = worker.New(m.Client, tq, worker.Options{
		MaxConcurrentActivityExecutionSize: max(1, m.Config.MaxConcurrentEpisodes),
		WorkerStopTimeout:                  0,
	})
	m.w.RegisterWorkflowWithOptions(workflows.Eval, workflow.RegisterOptions{Name: workflows.EvalWorkflowName})
	m.w.RegisterActivity(&activities.Activities{Suites: suites, Logger: m.Logger})
	if err := m.w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	m.Logger.Info("worker polling", zap.String("task_queue", tq), zap.Strings("suites", suites.Names()))
	return nil
}

// Close stops polling and waits for running task handlers to return.
func (m *WorkerMain) Close() error {
	if m.w != nil {
		m.w.Stop()
		m.w = nil
	}
	if m.own && m.Client != nil {
		m.Client.Close()
		m.Client = nil
	}
	return nil
}
