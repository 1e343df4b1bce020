package devtemporal

import (
	"net"
	"strconv"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/temporal"
)

const (
	// internalIP is where history, matching and worker listen: they are never exposed.
	internalIP  = "127.0.0.1"
	clusterName = "active"
	storeName   = "sqlite-default"
)

// dynamicConfig is the dev-oriented dynamic config; each entry says why. unfairTaskQueues
// are task queues on which fairness stays off (Options.UnfairTaskQueues).
func dynamicConfig(unfairTaskQueues []string) dynamicconfig.StaticClient {
	return dynamicconfig.StaticClient{
		// Task queue fairness: jobgate keys every job's tasks by tenant with the tenant's
		// weight, so one tenant's 20,000-episode eval cannot starve another tenant's small
		// job. Off by default in Temporal 1.32 (FIFO dispatch, keys carried and ignored); on,
		// matching dispatches backlogged tasks by weighted round robin over the keys (stride
		// scheduling; it implies the new matcher, which keeps its own task tables, present in
		// the SQLite schema). A production cluster needs the same setting.
		dynamicconfig.MatchingEnableFairness.Key(): fairness(unfairTaskQueues),
		// Newly registered search attributes must be usable at once (we register them on
		// every Start); rarely written, so bypassing the cache is cheap.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
		dynamicconfig.ForceNexusEndpointRefreshOnRead.Key():         true,
		// The bypassed caches above cost persistence QPS; keep the defaults' ratio (as the CLI).
		dynamicconfig.FrontendPersistenceMaxQPS.Key(): 10000,
		dynamicconfig.HistoryPersistenceMaxQPS.Key():  45000,
		// The UI and tests poll visibility, and jobgate's quota check reads it once per start;
		// the default of 10 RPS throttles them.
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 1000,
		// jobgate uses workflow updates, including the async "accepted" stage.
		dynamicconfig.FrontendEnableUpdateWorkflowExecution.Key():              true,
		dynamicconfig.FrontendEnableUpdateWorkflowExecutionAsyncAccepted.Key(): true,
		// Worker versioning APIs, as the CLI's dev server test setup enables them.
		dynamicconfig.FrontendEnableWorkerVersioningDataAPIs.Key():     true,
		dynamicconfig.FrontendEnableWorkerVersioningWorkflowAPIs.Key(): true,
		dynamicconfig.FrontendEnableWorkerVersioningRuleAPIs.Key():     true,
		dynamicconfig.EnableDeploymentVersions.Key():                   true,
		// Worker Deployment versions (jobgate deploy): the keys above are what 1.32 needs (all
		// but the rule APIs default on; set anyway so a default change cannot turn them off).
		// A version no longer current re-counts its open pinned workflows every 3 minutes, after
		// a 3-minute grace for visibility lag; SQLite visibility has no lag worth waiting for,
		// so `jobgate deploy status` in dev and the deploy test see "drained" within seconds.
		dynamicconfig.VersionDrainageStatusRefreshInterval.Key():       5 * time.Second,
		dynamicconfig.VersionDrainageStatusVisibilityGracePeriod.Key(): 5 * time.Second,
		// One partition per task queue: with the default 4, a poll can land on an empty
		// partition and wait for forwarding, which slows worker/activity start in dev.
		dynamicconfig.MatchingNumTaskqueueReadPartitions.Key():  1,
		dynamicconfig.MatchingNumTaskqueueWritePartitions.Key(): 1,
		// Lets SDKs skip the matching round trip for the first workflow task.
		dynamicconfig.EnableEagerWorkflowStart.Key(): true,
		// Bound memory of the mutable state cache (as the CLI).
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key(): 8192,
	}
}

// fairness is the matching.enableFairness value: on, except on the named task queues (a
// constraint by task queue name takes precedence over the unconstrained value).
func fairness(unfairTaskQueues []string) []dynamicconfig.ConstrainedValue {
	cvs := make([]dynamicconfig.ConstrainedValue, 0, len(unfairTaskQueues)+1)
	for _, tq := range unfairTaskQueues {
		cvs = append(cvs, dynamicconfig.ConstrainedValue{Constraints: dynamicconfig.Constraints{TaskQueueName: tq}, Value: false})
	}
	return append(cvs, dynamicconfig.ConstrainedValue{Value: true})
}

func (s *Server) serverConfig(p servicePorts) *config.Config {
	var c config.Config
	broadcastIP := dialableIP(s.opts.IP)
	// Static hosts below replace ringpop; this only bounds the membership wait.
	c.Global.Membership.MaxJoinDuration = 30 * time.Second
	c.Global.Membership.BroadcastAddress = broadcastIP
	c.Global.TLS = s.opts.TLS.serverTLS()

	c.Persistence.DefaultStore = storeName
	c.Persistence.VisibilityStore = storeName
	// One shard: a single process and a single SQLite writer.
	c.Persistence.NumHistoryShards = 1
	c.Persistence.DataStores = map[string]config.DataStore{storeName: {SQL: s.sqlCfg}}

	c.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             s.frontendHostPort,
				HTTPAddress:            s.httpHostPort,
				// ClusterID empty: generated once, then read back from the database.
			},
		},
	}
	c.DCRedirectionPolicy.Policy = "noop"
	c.Services = map[string]config.Service{
		string(primitives.FrontendService): {RPC: config.RPC{
			GRPCPort: p.frontend, HTTPPort: p.frontendHTTP, BindOnIP: s.opts.IP,
		}},
		string(primitives.HistoryService):  {RPC: config.RPC{GRPCPort: p.history, BindOnIP: internalIP}},
		string(primitives.MatchingService): {RPC: config.RPC{GRPCPort: p.matching, BindOnIP: internalIP}},
		string(primitives.WorkerService):   {RPC: config.RPC{GRPCPort: p.worker, BindOnIP: internalIP}},
	}
	c.Archival.History.State = "disabled"
	c.Archival.Visibility.State = "disabled"
	c.NamespaceDefaults.Archival.History.State = "disabled"
	c.NamespaceDefaults.Archival.Visibility.State = "disabled"
	// The worker service's SDK client dials this.
	c.PublicClient.HostPort = s.frontendHostPort
	return &c
}

func (s *Server) serverOptions(p servicePorts) []temporal.ServerOption {
	hostPort := func(ip string, port int) static.Hosts {
		return static.SingleLocalHost(net.JoinHostPort(ip, strconv.Itoa(port)))
	}
	return []temporal.ServerOption{
		temporal.WithConfig(s.serverConfig(p)),
		temporal.ForServices(temporal.DefaultServices),
		// Static membership: no ringpop ports, no join delay.
		temporal.WithStaticHosts(map[primitives.ServiceName]static.Hosts{
			primitives.FrontendService: hostPort(dialableIP(s.opts.IP), p.frontend),
			primitives.HistoryService:  hostPort(internalIP, p.history),
			primitives.MatchingService: hostPort(internalIP, p.matching),
			primitives.WorkerService:   hostPort(internalIP, p.worker),
		}),
		temporal.WithLogger(s.logger),
		temporal.WithDynamicConfigClient(dynamicConfig(s.opts.UnfairTaskQueues)),
	}
}

// dialableIP maps a wildcard bind address to loopback, which clients can dial.
func dialableIP(ip string) string {
	if parsed := net.ParseIP(ip); parsed != nil && parsed.IsUnspecified() {
		if parsed.To4() == nil {
			return "::1"
		}
		return "127.0.0.1"
	}
	return ip
}
