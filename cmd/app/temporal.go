package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/cmd/devtemporal"
)

// TemporalConfigDev configures `jobgate temporal`: the embedded Temporal server (SQLite) and its
// Web UI as a process of their own, for multi-process setups and chaos tests where Temporal
// itself is killed and restarted on its file database.
type TemporalConfigDev struct {
	// DataDir keeps the SQLite database. Defaults to ./.jobgate-temporal. Empty with Ephemeral.
	DataDir string
	// Ephemeral keeps everything in memory.
	Ephemeral bool
	// Port is the gRPC port. Defaults to 7233; 0 picks one.
	Port int
	// UIPort is the Web UI port. Defaults to 8233; -1 disables it.
	UIPort int
}

// Flags registers temporal's flags.
func (c *TemporalConfigDev) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", ".jobgate-temporal", "directory for the SQLite database")
	fs.BoolVar(&c.Ephemeral, "ephemeral", false, "keep everything in memory")
	fs.IntVar(&c.Port, "port", 7233, "gRPC port (0 picks one)")
	fs.IntVar(&c.UIPort, "ui-port", 8233, "Web UI port (0 picks one, -1 disables)")
}

// TemporalMain runs the embedded Temporal server alone. It registers jobgate's search
// attributes, so `serve` and `worker` processes can point at it.
type TemporalMain struct {
	Config TemporalConfigDev
	Logger *zap.Logger
	// Out receives one line with the bound addresses ("temporal <grpc> ui <url>"). Defaults to os.Stdout.
	Out io.Writer

	srv *devtemporal.Server
}

// Run starts the server and returns once it answers.
func (m *TemporalMain) Run(ctx context.Context) error {
	if m.Logger == nil {
		m.Logger = zap.NewNop()
	}
	if m.Out == nil {
		m.Out = os.Stdout
	}
	dir := m.Config.DataDir
	if m.Config.Ephemeral {
		dir = ""
	} else if dir == "" {
		return errors.New("--data-dir is required unless --ephemeral")
	}
	sas := SearchAttributes()
	srv, err := devtemporal.Start(ctx, devtemporal.Options{DataDir: dir, FrontendPort: m.Config.Port, UIPort: m.Config.UIPort,
		SearchAttributes: sas, Logger: m.Logger})
	if err != nil {
		return fmt.Errorf("embedded temporal: %w", err)
	}
	m.srv = srv
	fmt.Fprintf(m.Out, "temporal %s ui %s\n", srv.FrontendHostPort(), srv.UIURL())
	return nil
}

// HostPort is the gRPC address.
func (m *TemporalMain) HostPort() string { return m.srv.FrontendHostPort() }

// Close stops the server.
func (m *TemporalMain) Close() error {
	if m.srv == nil {
		return nil
	}
	err := m.srv.Stop()
	m.srv = nil
	return err
}
