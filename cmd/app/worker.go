package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/workflows"
)

// HeartbeatThrottleDefault is WorkerConfig.HeartbeatThrottle's default.
const HeartbeatThrottleDefault = time.Second

// MaxConcurrentEpisodesDefault is WorkerConfig.MaxConcurrentEpisodes when left zero.
const MaxConcurrentEpisodesDefault = 200

// WorkerConfig configures `jobgate worker`.
type WorkerConfig struct {
	Temporal TemporalConfig
	// SuitesFile is a JSON suite catalog added to the built-in demo suite. Defaults to none.
	SuitesFile string
	// MaxConcurrentEpisodes bounds episode activities running in this process. Defaults to 200.
	MaxConcurrentEpisodes int
	// DatasetsFile is the JSON export dataset catalog ({"datasets":[...]}). Defaults to none.
	DatasetsFile string
	// Datasets, if set, is used instead of DatasetsFile (dev).
	Datasets activities.Datasets
	// ArtifactsURL is the export artifact store (gocloud.dev/blob URL: file:///dir, s3://…, gs://…,
	// azblob://…). Required for exports; share it with the frontends.
	ArtifactsURL string
	// HeartbeatThrottle caps how long the SDK may batch an episode's heartbeats. A cancel reaches a
	// running episode only on a heartbeat reply, so this bounds cancel latency. Defaults to 1 second.
	HeartbeatThrottle time.Duration
	// MetricsListen is where Prometheus /metrics is served. Defaults to empty: no metrics.
	MetricsListen string
}

// Flags registers the worker's flags.
func (c *WorkerConfig) Flags(fs *flag.FlagSet) {
	c.Temporal.Flags(fs)
	fs.StringVar(&c.SuitesFile, "suites", "", "JSON suite catalog file ({\"suites\":[...]}); the demo suite is always present")
	fs.IntVar(&c.MaxConcurrentEpisodes, "max-concurrent-episodes", MaxConcurrentEpisodesDefault, "episode activities this worker runs at once")
	fs.StringVar(&c.DatasetsFile, "datasets", "", "JSON export dataset catalog file ({\"datasets\":[...]}); share it with serve")
	fs.StringVar(&c.ArtifactsURL, "artifacts", "", "export artifact store URL: file:///dir, s3://bucket, gs://bucket, azblob://container (share it with serve)")
	fs.DurationVar(&c.HeartbeatThrottle, "heartbeat-throttle", HeartbeatThrottleDefault, "longest delay before a cancel reaches a running episode")
	metricsFlag(fs, &c.MetricsListen)
}

// WorkerMain runs workflows and activities.
type WorkerMain struct {
	Config WorkerConfig
	Logger *zap.Logger
	// Client, if set, is used instead of dialing (dev shares one).
	Client client.Client
	// QueryHook, if set, sees every statement an export sends to a dataset (tests).
	QueryHook func(dataset, query string)

	own       bool
	w         worker.Worker
	artifacts *activities.ArtifactStore
	db        *activities.DBPool
	metrics   *metricsServer
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
	datasets := m.Config.Datasets
	if datasets == nil {
		if datasets, err = activities.LoadDatasets(m.Config.DatasetsFile); err != nil {
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
	if m.metrics, err = startMetricsFor(m.Config.MetricsListen, &m.Config.Temporal, m.Logger); err != nil {
		return err
	}
	if m.Client == nil {
		opts, err := m.Config.Temporal.options(m.Logger)
		if err == nil {
			m.Client, err = waitTemporal(ctx, opts)
		}
		if err != nil {
			_ = m.metrics.close()
			m.metrics = nil
			return err
		}
		m.own = true
	}
	tq := m.Config.Temporal.TaskQueue
	if tq == "" {
		tq = workflows.TaskQueueDefault
	}
	hb := m.Config.HeartbeatThrottle
	if hb <= 0 {
		hb = HeartbeatThrottleDefault
	}
	slots := m.Config.MaxConcurrentEpisodes
	if slots <= 0 {
		slots = MaxConcurrentEpisodesDefault
	}
	m.w = worker.New(m.Client, tq, worker.Options{
		MaxConcurrentActivityExecutionSize: slots,
		// Without this cap the SDK batches heartbeats for 0.8 × the heartbeat timeout, and a
		// cancel waits that long to reach an episode.
		MaxHeartbeatThrottleInterval:     hb,
		DefaultHeartbeatThrottleInterval: hb,
	})
	for _, k := range workflows.Kinds {
		m.w.RegisterWorkflowWithOptions(k.Workflow, workflow.RegisterOptions{Name: k.WorkflowName})
	}
	m.w.RegisterWorkflowWithOptions(workflows.ExportRetention, workflow.RegisterOptions{Name: workflows.RetentionWorkflowName})
	m.db = &activities.DBPool{}
	m.w.RegisterActivity(&activities.Activities{Suites: suites, Datasets: datasets, Artifacts: m.artifacts, DB: m.db,
		QueryHook: m.QueryHook})
	if err := m.w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	m.Logger.Info("worker polling", zap.String("task_queue", tq), zap.Strings("suites", suites.Names()),
		zap.Strings("datasets", datasets.Names()))
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
	var errs []error
	if m.db != nil {
		errs = append(errs, m.db.Close())
		m.db = nil
	}
	if m.artifacts != nil {
		errs = append(errs, m.artifacts.Close())
		m.artifacts = nil
	}
	errs = append(errs, m.metrics.close())
	m.metrics = nil
	return errors.Join(errs...)
}
