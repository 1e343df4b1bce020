package devtemporal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"
)

const (
	// NamespaceRetentionDefault is the retention used when Options.Retention is zero.
	NamespaceRetentionDefault = 7 * 24 * time.Hour
	// MinRetention is the server's minimum retention for local namespaces
	// (system.namespaceMinRetentionLocal).
	MinRetention = time.Hour
	// DefaultNamespace is used when Options.Namespace is empty.
	DefaultNamespace = "default"
	// DefaultIP is used when Options.IP is empty.
	DefaultIP = "127.0.0.1"
	// DBFileName is the SQLite file created in Options.DataDir.
	DBFileName = "jobgate.db"
	// UIDisabled as Options.UIPort turns the Web UI off.
	UIDisabled = -1

	// defaultStartTimeout bounds Start when ctx has no deadline.
	defaultStartTimeout = 2 * time.Minute
)

// Options configure an embedded server. Zero values give sensible defaults.
type Options struct {
	// DataDir holds the SQLite database file (jobgate.db). Empty means in-memory (ephemeral).
	// The directory is created if missing and locked while the server runs.
	DataDir string
	// Namespace to register idempotently. Defaults to "default".
	Namespace string
	// Retention for the namespace. Defaults to 7 days (NamespaceRetentionDefault); at least
	// MinRetention. An existing namespace is updated to this value.
	Retention time.Duration
	// IP to bind. Defaults to 127.0.0.1 ("localhost" is accepted as 127.0.0.1).
	// Internal services always bind to 127.0.0.1.
	IP string
	// FrontendPort is the gRPC port; 0 picks a free port.
	FrontendPort int
	// UIPort serves the Temporal Web UI; 0 picks a free port; -1 disables the UI.
	UIPort int
	// SearchAttributes are custom search attributes to register idempotently in the namespace
	// (name -> type). jobgate uses Keyword attributes JobTenant, JobOwner, JobKind, JobStatus, JobAnswerer and the Int JobSlots.
	SearchAttributes map[string]enumspb.IndexedValueType
	// Logger receives server logs at WARN and above (Temporal is very noisy at INFO);
	// nil means quiet.
	Logger *zap.Logger
	// UnfairTaskQueues are task queues (exact names) dispatched without task queue fairness,
	// first in first out, as on a server without it; every other task queue is fair. For
	// tests that compare the two on one server.
	UnfairTaskQueues []string
	// TLS, if set, serves the frontend's gRPC port with TLS (and mutual TLS when
	// TLS.ClientCAPEM is set). Defaults to nil: plaintext, as a dev server.
	TLS *TLSOptions
	// UICodecEndpoint is the Web UI's remote codec (a base URL the UI appends /decode and
	// /encode to; jobgate dev: its frontend's /codec), so the UI shows sealed payloads
	// decoded. Defaults to none: the UI shows payloads as stored. Without UIAuth the UI passes
	// no access token: it has no sign-in (and it passes tokens to https endpoints only).
	UICodecEndpoint string
	// UIAuth, if set, has the Web UI sign people in with OpenID Connect and hand the signed-in
	// user's access token to UICodecEndpoint, which must then be https (uiauth.go). Defaults to
	// nil: no sign-in.
	UIAuth *UIAuth
}

// TLSOptions serve the frontend with TLS. The server's own clients (the system worker, the
// namespace registration of Start, the Web UI) dial the frontend with RootCAPEM and, with mutual
// TLS, ClientCertPEM/ClientKeyPEM. All PEM; tests generate them with devpki.
type TLSOptions struct {
	// CertPEM and KeyPEM are the frontend's certificate (chain) and private key. Required. The
	// certificate must name the address clients dial (an IP SAN for 127.0.0.1) or ServerName.
	CertPEM, KeyPEM []byte
	// RootCAPEM verifies the frontend's certificate for the server's own clients. Required.
	RootCAPEM []byte
	// ServerName is the name the server's own clients verify in the frontend's certificate.
	// Defaults to empty: the host of the frontend address.
	ServerName string
	// ClientCAPEM, when set, turns on mutual TLS: the frontend refuses clients without a
	// certificate signed by one of these CAs. Defaults to empty: no client certificates.
	ClientCAPEM []byte
	// ClientCertPEM and ClientKeyPEM are what the server's own clients present under mutual
	// TLS. Required with ClientCAPEM.
	ClientCertPEM, ClientKeyPEM []byte
}

// Server is a running embedded Temporal server. Create it with Start.
type Server struct {
	opts Options

	frontendHostPort string
	httpHostPort     string
	uiURL            string

	temporal temporal.Server
	ui       *uiServer
	sqlCfg   *config.SQL
	unlock   func() error
	logger   *serverLogger

	stopOnce sync.Once
	stopErr  error
	// releaseErr records a failure to close the SQLite connection (see releaseSQLite).
	releaseErr error
}

// Start runs an embedded Temporal server and returns once the frontend answers and the
// namespace and search attributes are registered and usable in visibility queries.
// ctx bounds the whole start-up (2 minutes if it has no deadline); it does not bound the
// server's lifetime: call Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if ctx == nil {
		return nil, errors.New("devtemporal: nil context")
	}
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}

	s := &Server{opts: opts, logger: newServerLogger(opts.Logger)}
	ok := false
	defer func() {
		if !ok {
			// Best effort: the start error is what matters to the caller.
			_ = s.Stop()
		}
	}()

	if err := s.prepareStorage(); err != nil {
		return nil, err
	}
	ports, err := s.allocatePorts()
	if err != nil {
		return nil, err
	}
	if err := s.startTemporal(ports); err != nil {
		return nil, err
	}
	if err := s.register(ctx); err != nil {
		return nil, err
	}
	if s.ui != nil {
		if err := s.ui.start(ctx, s.opts.IP, s.frontendHostPort, &s.opts); err != nil {
			return nil, fmt.Errorf("devtemporal: UI: %w", err)
		}
	}
	ok = true
	return s, nil
}

// FrontendHostPort is the gRPC address for SDK clients, e.g. "127.0.0.1:7233".
func (s *Server) FrontendHostPort() string { return s.frontendHostPort }

// FrontendHTTPHostPort is the frontend's HTTP API address (used e.g. by Nexus callbacks).
func (s *Server) FrontendHTTPHostPort() string { return s.httpHostPort }

// Namespace is the registered namespace.
func (s *Server) Namespace() string { return s.opts.Namespace }

// UIURL is the Web UI base URL, e.g. "http://127.0.0.1:8233", or "" when disabled.
func (s *Server) UIURL() string { return s.uiURL }

// Stop stops the UI and the server and releases their ports, the SQLite database and the
// DataDir lock. It is safe to call more than once; later calls return the first result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		// The server logs expected warnings while shutting down.
		s.logger.quietShutdown()
		var errs []error
		if s.ui != nil {
			if err := s.ui.stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop UI: %w", err))
			}
		}
		if s.temporal != nil {
			if err := s.temporal.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop temporal server: %w", err))
			}
		}
		if s.sqlCfg != nil {
			if err := releaseSQLite(s.sqlCfg); err != nil {
				// Not fatal: the connection just stays open until the process exits.
				s.releaseErr = err
				s.logger.warn("devtemporal: could not close SQLite connection", err)
			}
		}
		if s.unlock != nil {
			if err := s.unlock(); err != nil {
				errs = append(errs, fmt.Errorf("unlock DataDir: %w", err))
			}
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// normalize applies defaults and validates; errors name the offending field.
func (o *Options) normalize() error {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	switch {
	case o.Retention == 0:
		o.Retention = NamespaceRetentionDefault
	case o.Retention < MinRetention:
		return fmt.Errorf("devtemporal: Options.Retention %v is below the server minimum %v", o.Retention, MinRetention)
	}
	switch o.IP {
	case "":
		o.IP = DefaultIP
	case "localhost":
		o.IP = DefaultIP // the server needs an IP, not a host name
	}
	if net.ParseIP(o.IP) == nil {
		return fmt.Errorf("devtemporal: Options.IP %q is not an IP address", o.IP)
	}
	if o.FrontendPort < 0 || o.FrontendPort > 65535 {
		return fmt.Errorf("devtemporal: Options.FrontendPort %d out of range 0..65535", o.FrontendPort)
	}
	if o.UIPort < UIDisabled || o.UIPort > 65535 {
		return fmt.Errorf("devtemporal: Options.UIPort %d out of range -1..65535", o.UIPort)
	}
	if o.UIPort > 0 && o.UIPort == o.FrontendPort {
		return fmt.Errorf("devtemporal: Options.UIPort %d equals Options.FrontendPort", o.UIPort)
	}
	if err := o.checkUIAuth(); err != nil {
		return err
	}
	attrs := make(map[string]enumspb.IndexedValueType, len(o.SearchAttributes))
	for name, typ := range o.SearchAttributes {
		attrs[name] = typ // a copy: the caller may reuse its map
		if name == "" {
			return errors.New("devtemporal: Options.SearchAttributes has an empty name")
		}
		if _, known := enumspb.IndexedValueType_name[int32(typ)]; !known || typ == enumspb.INDEXED_VALUE_TYPE_UNSPECIFIED {
			return fmt.Errorf("devtemporal: Options.SearchAttributes[%q] has invalid type %d", name, typ)
		}
	}
	o.SearchAttributes = attrs
	for _, tq := range o.UnfairTaskQueues {
		if tq == "" {
			return errors.New("devtemporal: Options.UnfairTaskQueues has an empty name")
		}
	}
	o.UnfairTaskQueues = append([]string(nil), o.UnfairTaskQueues...) // a copy, as above
	if err := o.TLS.validate(); err != nil {
		return err
	}
	if o.DataDir != "" {
		abs, err := filepath.Abs(o.DataDir)
		if err != nil {
			return fmt.Errorf("devtemporal: Options.DataDir %q: %w", o.DataDir, err)
		}
		o.DataDir = abs
		if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
			return fmt.Errorf("devtemporal: Options.DataDir %q is not a directory", abs)
		}
	}
	return nil
}

// prepareStorage locks DataDir, creates the schema for a new database and builds the
// SQLite persistence config.
func (s *Server) prepareStorage() error {
	if s.opts.DataDir == "" {
		s.sqlCfg = memorySQLConfig()
		return nil
	}
	if err := os.MkdirAll(s.opts.DataDir, 0o755); err != nil {
		return fmt.Errorf("devtemporal: Options.DataDir: %w", err)
	}
	unlock, err := lockDataDir(s.opts.DataDir)
	if err != nil {
		return fmt.Errorf("devtemporal: Options.DataDir: %w", err)
	}
	s.unlock = unlock
	dbPath := filepath.Join(s.opts.DataDir, DBFileName)
	if err := ensureSchema(dbPath); err != nil {
		return fmt.Errorf("devtemporal: Options.DataDir: %w", err)
	}
	s.sqlCfg = fileSQLConfig(dbPath)
	return nil
}

type servicePorts struct {
	frontend, frontendHTTP, history, matching, worker int
}

// allocatePorts picks free ports for everything the server binds and binds the UI listener.
func (s *Server) allocatePorts() (servicePorts, error) {
	var p servicePorts
	var err error
	if s.opts.FrontendPort != 0 {
		if err := checkPortFree(s.opts.IP, s.opts.FrontendPort); err != nil {
			return p, fmt.Errorf("devtemporal: Options.FrontendPort: %w", err)
		}
		p.frontend = s.opts.FrontendPort
	} else if p.frontend, err = freePort(s.opts.IP); err != nil {
		return p, fmt.Errorf("devtemporal: pick frontend port: %w", err)
	}
	if p.frontendHTTP, err = freePort(s.opts.IP); err != nil {
		return p, fmt.Errorf("devtemporal: pick frontend HTTP port: %w", err)
	}
	for _, dst := range []*int{&p.history, &p.matching, &p.worker} {
		if *dst, err = freePort(internalIP); err != nil {
			return p, fmt.Errorf("devtemporal: pick internal service port: %w", err)
		}
	}
	connectIP := dialableIP(s.opts.IP)
	s.frontendHostPort = net.JoinHostPort(connectIP, strconv.Itoa(p.frontend))
	s.httpHostPort = net.JoinHostPort(connectIP, strconv.Itoa(p.frontendHTTP))

	if s.opts.UIPort != UIDisabled {
		ui, err := listenUI(s.opts.IP, s.opts.UIPort)
		if err != nil {
			if s.opts.UIPort != 0 {
				return p, fmt.Errorf("devtemporal: Options.UIPort: %w", err)
			}
			return p, fmt.Errorf("devtemporal: UI: %w", err)
		}
		s.ui = ui
		s.uiURL = ui.url
	}
	return p, nil
}

func (s *Server) startTemporal(p servicePorts) error {
	srv, err := temporal.NewServer(s.serverOptions(p)...)
	if err != nil {
		return fmt.Errorf("devtemporal: create temporal server: %w", err)
	}
	s.temporal = srv
	if err := srv.Start(); err != nil {
		return fmt.Errorf("devtemporal: start temporal server: %w", err)
	}
	return nil
}
