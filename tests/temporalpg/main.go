package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/headers"
	"go.temporal.io/server/common/log"
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql" // the postgres12 plugins
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/temporal"
)

func main() {
	if err := runServer(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "temporalpg:", err)
		os.Exit(1)
	}
}

type serverFlags struct {
	pgAddr, pgUser, pgPassword, db, visibilityDB, plugin  string
	ip                                                    string
	port, httpPort, historyPort, matchingPort, workerPort int
	membershipPorts                                       string
	shards                                                int
	logLevel                                              string
	visibilityRPS                                         int
}

func runServer(args []string) error {
	var f serverFlags
	fs := flag.NewFlagSet("temporalpg", flag.ContinueOnError)
	fs.StringVar(&f.pgAddr, "pg-addr", "127.0.0.1:5432", "PostgreSQL host:port")
	fs.StringVar(&f.pgUser, "pg-user", "temporal", "PostgreSQL user")
	fs.StringVar(&f.pgPassword, "pg-password", "", "PostgreSQL password")
	fs.StringVar(&f.db, "db", "temporal", "database of the default store")
	fs.StringVar(&f.visibilityDB, "visibility-db", "temporal_visibility", "database of the visibility store")
	fs.StringVar(&f.plugin, "plugin", "postgres12", "SQL plugin: postgres12 or postgres12_pgx")
	fs.StringVar(&f.ip, "ip", "127.0.0.1", "IP every service binds to and broadcasts")
	fs.IntVar(&f.port, "port", 7233, "frontend gRPC port")
	fs.IntVar(&f.httpPort, "http-port", 7243, "frontend HTTP port")
	fs.IntVar(&f.historyPort, "history-port", 7234, "history gRPC port")
	fs.IntVar(&f.matchingPort, "matching-port", 7235, "matching gRPC port")
	fs.IntVar(&f.workerPort, "worker-port", 7239, "worker gRPC port")
	fs.StringVar(&f.membershipPorts, "membership-ports", "6933,6934,6935,6939", "ringpop membership ports of frontend, history, matching, worker")
	fs.IntVar(&f.shards, "shards", 4, "numHistoryShards: fixed for the life of the cluster")
	fs.StringVar(&f.logLevel, "log-level", "warn", "server log level")
	fs.IntVar(&f.visibilityRPS, "visibility-rps", 0, "frontend.namespaceRPS.visibility (visibility calls per namespace and second); 0 keeps the server's default (10)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var mp [4]int
	if n, err := fmt.Sscanf(f.membershipPorts, "%d,%d,%d,%d", &mp[0], &mp[1], &mp[2], &mp[3]); err != nil || n != 4 {
		return fmt.Errorf("--membership-ports %q: want four comma-separated ports", f.membershipPorts)
	}
	logger := log.NewZapLogger(log.BuildZapLogger(log.Config{Level: f.logLevel, Format: "json"}))
	opts := []temporal.ServerOption{
		temporal.WithConfig(serverConfig(f, mp)),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithLogger(logger),
	}
	if f.visibilityRPS > 0 {
		opts = append(opts, temporal.WithDynamicConfigClient(dynamicconfig.StaticClient{
			dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): f.visibilityRPS,
		}))
	}
	srv, err := temporal.NewServer(opts...)
	if err != nil {
		return fmt.Errorf("new server: %w", err)
	}
	start := time.Now()
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	fmt.Fprintf(os.Stderr, "temporalpg: Temporal %s started in %s, frontend %s, store %s/%s, visibility %s/%s\n",
		headers.ServerVersion, time.Since(start).Round(time.Millisecond), net.JoinHostPort(f.ip, fmt.Sprint(f.port)),
		f.plugin, f.db, f.plugin, f.visibilityDB)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	<-ch
	return srv.Stop()
}

// serverConfig is what an operator's YAML (config/development-postgres12.yaml in the server
// repository) says, in code: two SQL data stores on postgres12, ringpop membership on loopback,
// a single cluster, archival off.
func serverConfig(f serverFlags, mp [4]int) *config.Config {
	sqlStore := func(db string) config.DataStore {
		return config.DataStore{SQL: &config.SQL{
			PluginName:      f.plugin,
			DatabaseName:    db,
			ConnectAddr:     f.pgAddr,
			ConnectProtocol: "tcp",
			User:            f.pgUser,
			Password:        f.pgPassword,
			MaxConns:        20,
			MaxIdleConns:    20,
			MaxConnLifetime: time.Hour,
		}}
	}
	frontend := net.JoinHostPort(f.ip, fmt.Sprint(f.port))
	var c config.Config
	c.Global.Membership.MaxJoinDuration = 30 * time.Second
	c.Global.Membership.BroadcastAddress = f.ip
	c.Persistence.DefaultStore = "postgres-default"
	c.Persistence.VisibilityStore = "postgres-visibility"
	c.Persistence.NumHistoryShards = int32(f.shards)
	c.Persistence.DataStores = map[string]config.DataStore{
		"postgres-default":    sqlStore(f.db),
		"postgres-visibility": sqlStore(f.visibilityDB),
	}
	c.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: 10,
		MasterClusterName:        "active",
		CurrentClusterName:       "active",
		ClusterInformation: map[string]cluster.ClusterInformation{
			"active": {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontend,
				HTTPAddress: net.JoinHostPort(f.ip, fmt.Sprint(f.httpPort))},
		},
	}
	c.DCRedirectionPolicy.Policy = "noop"
	rpc := func(grpc, membership, http int) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: grpc, MembershipPort: membership, HTTPPort: http, BindOnIP: f.ip}}
	}
	c.Services = map[string]config.Service{
		string(primitives.FrontendService): rpc(f.port, mp[0], f.httpPort),
		string(primitives.HistoryService):  rpc(f.historyPort, mp[1], 0),
		string(primitives.MatchingService): rpc(f.matchingPort, mp[2], 0),
		string(primitives.WorkerService):   rpc(f.workerPort, mp[3], 0),
	}
	c.Archival.History.State = "disabled"
	c.Archival.Visibility.State = "disabled"
	c.NamespaceDefaults.Archival.History.State = "disabled"
	c.NamespaceDefaults.Archival.Visibility.State = "disabled"
	c.PublicClient.HostPort = frontend
	return &c
}
