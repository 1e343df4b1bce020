package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/handle/resumeseal"
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
	Datasets contract.Datasets
	// ArtifactsURL is the export artifact store (gocloud.dev/blob URL: file:///dir, s3://…, gs://…,
	// azblob://…). Required for exports; share it with the frontends.
	ArtifactsURL string
	// HeartbeatThrottle caps how long the SDK may batch an episode's heartbeats. A cancel reaches a
	// running episode only on a heartbeat reply, so this bounds cancel latency. Defaults to 1 second.
	HeartbeatThrottle time.Duration
	// MetricsListen is where Prometheus /metrics is served. Defaults to empty: no metrics.
	MetricsListen string
	// Kinds are the job kinds whose workflows and activities this worker registers on its task
	// queue (--kinds eval,export). Defaults to nil: every kind. A worker without the export kind
	// opens no dataset or artifact store and refuses --datasets and --artifacts, so it can run
	// command episodes while holding none of their credentials.
	Kinds []string
	// ServeSuiteQueues also polls every task_queue the suite catalog names, serving the eval
	// kind there, so one process runs every episode (dev). Not a flag: a deployment runs a
	// worker per queue. Defaults to false.
	ServeSuiteQueues bool
	// ResumeKeys (or ResumeKeysFile) verify the seals frontends put on answers: the same keyring
	// as serve's. Defaults to none, and then every resume is refused (fail closed).
	ResumeKeys, ResumeKeysFile string
	// SigningKeys (or SigningKeysFile) is serve's Ed25519 signing keyring: the worker signs each
	// export manifest with it and writes its public half beside the manifest. Required by a
	// worker serving exports (the only kind whose worker signs); one without exports, such as an
	// episode worker running caller-influenced commands, needs none and should hold none.
	SigningKeys, SigningKeysFile string
	// DevDeployment lets the worker verify with resume keys marked DEV-ONLY (public placeholders).
	DevDeployment bool
	// TenantsFile names the notification endpoints (its "notify" section; share it with serve).
	// Defaults to none: no notification is sent.
	TenantsFile string
	// PublicURL is the browser-facing base URL of the frontends; notifications link to
	// <public-url>/approvals/<job-id>. Required (absolute http or https) when the tenants file
	// configures any notification endpoint: a relative link leads nowhere from an email or chat,
	// and Slack refuses the message. Defaults to empty, allowed only without endpoints.
	PublicURL string
	// Deployment is the Worker Deployment and build ID (worker_deploy.go). Defaults to none:
	// unversioned (dev, tests); the worker command's flags default to DeploymentNameDefault.
	Deployment DeploymentConfig
	// devKinds are further kinds registered on the task queue that only dev serves (the
	// conformance fixtures, serve_fixture.go); the worker command has no flag for them, and
	// --kinds does not name them.
	devKinds []string
}

// kindsFlag is --kinds: a comma-separated list of known kinds, each at most once.
type kindsFlag struct{ kinds *[]string }

func (f kindsFlag) String() string {
	if f.kinds == nil || *f.kinds == nil {
		return strings.Join(workflows.DefaultKindNames(), ",")
	}
	return strings.Join(*f.kinds, ",")
}

func (f kindsFlag) Set(v string) error {
	kinds, err := ParseKinds(v)
	if err != nil {
		return err
	}
	*f.kinds = kinds
	return nil
}

// ParseKinds reads a --kinds value: comma-separated kind names, at least one, no repeats.
func ParseKinds(v string) ([]string, error) {
	known := strings.Join(workflows.DefaultKindNames(), ", ")
	var out []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil, fmt.Errorf("kinds %q: empty kind name (known: %s)", v, known)
		case slices.Contains(out, name):
			return nil, fmt.Errorf("kinds %q: kind %q named twice", v, name)
		}
		if !slices.Contains(workflows.DefaultKindNames(), name) { // a kind served on request (Kind.OnRequest) is dev's to name
			return nil, fmt.Errorf("kinds %q: unknown kind %q (known: %s)", v, name, known)
		}
		out = append(out, name)
	}
	return out, nil
}

// Flags registers the worker's flags.
func (c *WorkerConfig) Flags(fs *flag.FlagSet) {
	c.Temporal.Flags(fs)
	fs.StringVar(&c.SuitesFile, "suites", "", "JSON suite catalog file ({\"suites\":[...]}); the demo suite is always present")
	fs.IntVar(&c.MaxConcurrentEpisodes, "max-concurrent-episodes", MaxConcurrentEpisodesDefault, "episode activities this worker runs at once")
	fs.StringVar(&c.DatasetsFile, "datasets", "", "JSON export dataset catalog file ({\"datasets\":[...]}); share it with serve")
	fs.StringVar(&c.ArtifactsURL, "artifacts", "", "export artifact store URL: file:///dir, s3://bucket, gs://bucket, azblob://container (share it with serve)")
	fs.DurationVar(&c.HeartbeatThrottle, "heartbeat-throttle", HeartbeatThrottleDefault, "longest delay before a cancel reaches a running episode")
	fs.Var(kindsFlag{&c.Kinds}, "kinds", "job kinds this worker serves on its task queue, comma-separated: "+
		strings.Join(workflows.DefaultKindNames(), ",")+"; without export it holds no dataset or artifact store (activities/README.md \"Command episodes\")")
	metricsFlag(fs, &c.MetricsListen)
	resumeKeysFlags(fs, &c.ResumeKeys, &c.ResumeKeysFile)
	signingKeysFlags(fs, &c.SigningKeys, &c.SigningKeysFile)
	fs.BoolVar(&c.DevDeployment, "dev-deployment", false, "this is a dev deployment: accept resume keys marked "+DevOnlyMarker+" (public placeholders)")
	fs.StringVar(&c.TenantsFile, "tenants", "", "JSON tenants file; its \"notify\" section names each tenant's notification endpoints (share it with serve); without it no notification is sent")
	c.Deployment.Flags(fs)
	fs.StringVar(&c.PublicURL, "public-url", "", "browser-facing base URL of the frontends, for the links in notifications (<public-url>/approvals/<job-id>); required, absolute http(s), when the tenants file names notification endpoints")
}

// serves reports whether the worker serves kind.
func (c *WorkerConfig) serves(kind string) bool {
	return c.Kinds == nil || slices.Contains(c.Kinds, kind)
}

// WorkerMain runs workflows and activities.
type WorkerMain struct {
	Config WorkerConfig
	Logger *zap.Logger
	// Client, if set, is used instead of dialing (dev shares one).
	Client client.Client
	// QueryHook, if set, sees every statement an export sends to a dataset (tests).
	QueryHook func(dataset, query string)
	// ResumeKeys, if set, replaces what Config would load (dev and tests).
	ResumeKeys *handle.Keyring
	// SigningKeys, if set, replaces what Config would load (dev and tests).
	SigningKeys *handle.SigningKeyring
	// Tracing, if set, is the worker's traces (dev, tests); defaults to StartTracing(ServiceWorker).
	Tracing *Tracing

	own     bool
	workers []worker.Worker
	// registered is what Run registered, per task queue: "workflow:<name>", "activity:<name>".
	registered map[string][]string
	artifacts  *activities.ArtifactStore
	db         *activities.DBPool
	metrics    *metricsServer
	// closePayloadKeys releases the payload key store connect opened.
	closePayloadKeys func() error

	ownTracing bool // Run started Tracing: Close flushes it
}

// Run starts polling and returns; Close stops.
func (m *WorkerMain) Run(ctx context.Context) error {
	if m.Logger == nil {
		m.Logger = zap.NewNop()
	}
	kinds, err := m.kinds()
	if err != nil {
		return err
	}
	deploy, err := m.Config.Deployment.resolve()
	if err != nil {
		return err
	}
	suites, err := contract.LoadCatalog(m.Config.SuitesFile)
	if err != nil {
		return err
	}
	acts := &activities.Activities{Suites: suites, QueryHook: m.QueryHook}
	for _, wk := range workerKinds() {
		if wk.prepare == nil {
			continue
		}
		if err := wk.prepare(ctx, m, acts, m.Config.serves(wk.name)); err != nil {
			return err
		}
	}
	wfs, notes, err := m.bindWorkflows(acts)
	if err != nil {
		return err
	}
	if err := m.connect(ctx); err != nil {
		return err
	}
	acts.SegmentEpisodes = segmentEpisodes(m.Client)
	tq := m.Config.Temporal.TaskQueue
	if tq == "" {
		tq = workflows.TaskQueueDefault
	}
	opts, err := m.workerOptions(ctx, deploy)
	if err != nil {
		return err
	}
	m.db = &activities.DBPool{}
	acts.DB = m.db
	notifier := &activities.Notifier{Targets: notes.Targets, PublicURL: m.Config.PublicURL,
		Observe: notifyDeliveries(m.metrics.registerer()), Snapshot: jobSnapshot(m.Client, m.Config.Temporal.DataConverter())}
	queues := m.queues(acts, tq, kinds)
	if err := m.startWorkers(queues, tq, opts, wfs, acts, notifier); err != nil {
		return err
	}
	if deploy.Name != "" {
		bootstrapCurrent(ctx, m.Client, deploy, m.Logger)
	}
	for _, wk := range workerKinds() {
		if wk.polling != nil && m.Config.serves(wk.name) {
			wk.polling(ctx, m, acts, tq)
		}
	}
	m.Config.Temporal.warnClearPayloads(m.Logger)
	if m.ResumeKeys == nil {
		// Said once the worker runs: a start that fails says only why.
		m.Logger.Error("no --resume-keys / --resume-keys-file: this worker refuses every resume (approvals, rejections); give it the frontends' resume keys")
	}
	m.Logger.Info("worker polling", zap.String("task_queue", tq), zap.Strings("kinds", kinds),
		zap.Strings("suites", suites.Names()), zap.Strings("datasets", acts.Datasets.Names()),
		zap.Strings("suite_queues", slices.DeleteFunc(slices.Sorted(maps.Keys(queues)), func(q string) bool { return q == tq })),
		zap.Any("registered", m.registered), zap.String("deployment", deploy.Name), zap.String("build_id", deploy.BuildID))
	return nil
}

// kinds is the kinds this worker registers: Config.Kinds (default every kind), checked as the
// flag is, then the kinds only dev serves.
func (m *WorkerMain) kinds() ([]string, error) {
	kinds := m.Config.Kinds
	if kinds == nil {
		kinds = workflows.DefaultKindNames()
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("kinds: want at least one of %s", strings.Join(workflows.DefaultKindNames(), ", "))
	}
	// Set in code (dev, tests) rather than by the flag: the same checks, so an unknown or
	// repeated kind is an error here, not a registration panic.
	if _, err := ParseKinds(strings.Join(kinds, ",")); err != nil {
		return nil, err
	}
	return append(slices.Clone(kinds), m.Config.devKinds...), nil
}

// bindWorkflows is what the workflows are bound to: the resume verifier (the keys also seal export
// manifests) and the tenants' notifications.
func (m *WorkerMain) bindWorkflows(acts *activities.Activities) (*workflows.Workflows, *notifications, error) {
	if m.ResumeKeys == nil {
		// The worker is the side that verifies: a public placeholder here would let anyone with
		// Temporal access forge approvals, whatever keys the frontends hold.
		k, err := loadKeyring(m.Config.ResumeKeys, m.Config.ResumeKeysFile, "resume-keys", m.Config.DevDeployment)
		if err != nil {
			return nil, nil, err
		}
		m.ResumeKeys = k
	}
	tenants, err := authz.LoadTenants(m.Config.TenantsFile)
	if err != nil {
		return nil, nil, err
	}
	notes, err := loadNotifications(tenants, m.Config.TenantsFile)
	if err != nil {
		return nil, nil, err
	}
	if err := notes.checkPublicURL(m.Config.PublicURL); err != nil {
		return nil, nil, err
	}
	wfs := &workflows.Workflows{Notify: notes}
	if m.Config.serves(workflows.KindExport) {
		// Each export manifest is signed with Ed25519, checked by anyone with the public keys.
		if err := requireSigningKeys(&m.SigningKeys, m.Config.SigningKeys, m.Config.SigningKeysFile, m.Config.DevDeployment,
			"a worker serving exports signs every manifest with serve's signing keys"); err != nil {
			return nil, nil, err
		}
	} else if m.SigningKeys == nil {
		k, err := loadSigningKeys(m.Config.SigningKeys, m.Config.SigningKeysFile, m.Config.DevDeployment)
		if err != nil {
			return nil, nil, err
		}
		m.SigningKeys = k
	}
	if m.SigningKeys != nil {
		acts.ManifestSigner = m.SigningKeys
	}
	if m.ResumeKeys != nil {
		wfs.Resume = resumeseal.Verifier(m.ResumeKeys)
		// The legacy HMAC seal, used only where no ManifestSigner is set: never by a worker
		// serving exports, which requires signing keys; jobgate verify accepts it only with
		// --allow-legacy.
		acts.ManifestSealer = m.ResumeKeys
	}
	return wfs, notes, nil
}

// connect starts the metrics listener and, unless one was given, dials Temporal (waiting for
// it); a failed dial stops the listener again.
func (m *WorkerMain) connect(ctx context.Context) error {
	var err error
	if m.metrics, err = startMetricsFor(m.Config.MetricsListen, &m.Config.Temporal, m.Logger); err != nil {
		return err
	}
	// Before the client: its converters seal with these keys (the artifact store's by default).
	// A given client brings its own converters, but the worker's interceptor and its job
	// snapshots follow the config.
	if m.closePayloadKeys, err = m.Config.Temporal.OpenPayloadKeys(ctx, m.Config.ArtifactsURL, m.Config.DevDeployment); err != nil {
		_ = m.metrics.close()
		m.metrics = nil
		return err
	}
	if m.Client != nil {
		return nil
	}
	opts, err := m.Config.Temporal.Options(m.Logger)
	if err == nil {
		m.Client, err = WaitTemporal(ctx, opts)
	}
	if err != nil {
		_ = m.metrics.close()
		m.metrics = nil
		return err
	}
	m.own = true
	return nil
}

// workerOptions is the options every task queue's worker shares: episode slots, the heartbeat
// cap, the deployment and tracing.
func (m *WorkerMain) workerOptions(ctx context.Context, deploy DeploymentConfig) (worker.Options, error) {
	hb := m.Config.HeartbeatThrottle
	if hb <= 0 {
		hb = HeartbeatThrottleDefault
	}
	slots := m.Config.MaxConcurrentEpisodes
	if slots <= 0 {
		slots = MaxConcurrentEpisodesDefault
	}
	opts := worker.Options{
		MaxConcurrentActivityExecutionSize: slots,
		// Without this cap the SDK batches heartbeats for 0.8 × the heartbeat timeout, and a
		// cancel waits that long to reach an episode.
		MaxHeartbeatThrottleInterval:     hb,
		DefaultHeartbeatThrottleInterval: hb,
		DeploymentOptions:                deploy.deploymentOptions(),
	}
	if err := m.startTracing(ctx, &opts); err != nil {
		return worker.Options{}, err
	}
	if m.Config.Temporal.payload != nil {
		// A cancelled workflow's details would be encoded with no tenant to seal them for.
		opts.Interceptors = append(opts.Interceptors, payloadcrypt.WorkerInterceptor())
	}
	return opts, nil
}

// queues maps each task queue to the kinds registered on it: every kind on tq, and a served
// kind's further queues (e.g. eval's suite queues) to that kind.
func (m *WorkerMain) queues(acts *activities.Activities, tq string, kinds []string) map[string][]string {
	queues := map[string][]string{tq: kinds}
	for _, wk := range workerKinds() {
		if wk.queues == nil || !m.Config.serves(wk.name) {
			continue
		}
		for _, q := range wk.queues(m, acts, tq) {
			if q != tq && !slices.Contains(queues[q], wk.name) {
				queues[q] = append(queues[q], wk.name)
			}
		}
	}
	return queues
}

// startWorkers starts one worker per queue with its kinds registered (and, on tq, the
// notifications), recording each name in m.registered; on an error it stops those started.
func (m *WorkerMain) startWorkers(queues map[string][]string, tq string, opts worker.Options,
	wfs *workflows.Workflows, acts *activities.Activities, notifier *activities.Notifier) error {
	m.registered = map[string][]string{}
	for _, q := range slices.Sorted(maps.Keys(queues)) {
		w := worker.New(m.Client, q, opts)
		for _, name := range queues[q] {
			k, _ := workflows.LookupKind(name)
			names, as, err := k.Register(w, wfs, acts)
			if err != nil {
				m.stopWorkers()
				return err
			}
			for _, n := range names {
				m.registered[q] = append(m.registered[q], "workflow:"+n)
			}
			for _, n := range as {
				m.registered[q] = append(m.registered[q], "activity:"+n)
			}
		}
		// Every kind's jobs notify, on their workflow's queue (further queues only run episodes).
		if q == tq {
			workflows.RegisterNotify(w, notifier)
			m.registered[q] = append(m.registered[q], "workflow:"+workflows.NotifyWorkflowName, "activity:"+contract.NotifyActivityName,
				"workflow:"+workflows.NotifyProgressWorkflowName, "activity:"+contract.NotifyProgressActivityName)
		}
		if err := w.Start(); err != nil {
			m.stopWorkers()
			return fmt.Errorf("start worker on task queue %s: %w", q, err)
		}
		m.workers = append(m.workers, w)
	}
	return nil
}

// Registered lists what Run registered on each task queue it polls ("workflow:<name>",
// "activity:<name>"), as the "worker polling" log line says.
func (m *WorkerMain) Registered() map[string][]string { return m.registered }

func (m *WorkerMain) stopWorkers() {
	for _, w := range m.workers {
		w.Stop()
	}
	m.workers = nil
}

// Close stops polling and waits for running task handlers to return.
func (m *WorkerMain) Close() error {
	m.stopWorkers()
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
	if m.closePayloadKeys != nil {
		errs = append(errs, m.closePayloadKeys())
		m.closePayloadKeys = nil
	}
	errs = append(errs, m.metrics.close())
	m.metrics = nil
	if m.ownTracing {
		errs = append(errs, m.Tracing.Shutdown()) // after the last activity ended its span
	}
	return errors.Join(errs...)
}
