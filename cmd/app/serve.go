package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/events"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/frontend/quota"
	"github.com/jobgate/jobgate/frontend/telemetry"
)

// ServeConfig configures `jobgate serve`.
type ServeConfig struct {
	Temporal TemporalConfig
	// Listen is the HTTP listen address. Defaults to 127.0.0.1:8080.
	Listen string
	// ResourceURI is this server's resource identifier; tokens' aud must contain it.
	// Defaults to http://localhost:8080/mcp.
	ResourceURI string
	// Issuer is the exact iss tokens must carry. Required.
	Issuer string
	// HS256SecretFile holds the shared HS256 secret (>= 32 bytes), for dev.
	// At most one of HS256SecretFile and JWKSURL; with neither, JWKSURL is discovered.
	HS256SecretFile string
	// JWKSURL is the identity provider's JWK Set URL: tokens are RS256, ES256 or EdDSA
	// signed by its keys. It must answer at start-up. Defaults to the jwks_uri of Issuer's
	// metadata (OpenID Connect Discovery, else RFC 8414) when HS256SecretFile is empty too.
	JWKSURL string
	// JWKSRefresh is how often the JWK Set is re-fetched (default 1h); JWKSUnknownKIDInterval is
	// the least time between re-fetches caused by an unknown kid (default 5m).
	JWKSRefresh, JWKSUnknownKIDInterval time.Duration
	// TenantClaim names the tenant claim. Defaults to "tenant".
	TenantClaim string
	// ScopeClaim names the one claim the identity provider's tokens (JWKSURL) carry their
	// scopes in, a space-separated string or an array: "scp" for Entra ID (a string) and Okta
	// (an array). Defaults to "" (authz.ScopeClaimDefault): "scope" as a string merged with "scp"
	// as an array. HS256 tokens always use "scope".
	ScopeClaim string
	// HandleKeys is "kid:hexkey,kid2:hexkey" (first signs); HandleKeysFile reads the same from a file.
	HandleKeys, HandleKeysFile string
	// ResumeKeys (or ResumeKeysFile) is the resume keyring, same syntax: it seals every answer
	// sent to a job; the workers hold the same keys to verify. Required; never the handle keys.
	ResumeKeys, ResumeKeysFile string
	// SigningKeys (or SigningKeysFile) is the Ed25519 signing keyring "kid:hexseed,..." (first
	// signs): decision records are signed with it and its public half is served as a JWK set;
	// the workers hold the same ring. Required: an unsigned record fails jobgate verify.
	SigningKeys, SigningKeysFile string
	// UIBaseURL is the public Temporal Web UI base for ui_url. Defaults to none.
	UIBaseURL string
	// UIURLFor is who gets ui_url: "admin" (jobs:admin holders, the default), "all" or "none".
	UIURLFor string
	// SuitesFile is the suite catalog callers may name (share it with the workers); eval's
	// option (serve_eval.go). Defaults to none: the demo suite only.
	SuitesFile string
	// DatasetsFile is the export dataset catalog callers may name (share it with the workers);
	// this and the fields down to Export are export's options (serve_export.go). Defaults to none.
	DatasetsFile string
	// Datasets, if set, is used instead of DatasetsFile (dev).
	Datasets contract.Datasets
	// ArtifactsURL is the export artifact store downloads read from (share it with the workers).
	// Defaults to none: no downloads.
	ArtifactsURL string
	// DownloadTTL defaults to 5 minutes.
	DownloadTTL time.Duration
	// Export tunes export jobs (tests); zero fields take the defaults.
	Export jobcore.ExportTuning
	// KindSpecs, if set, replace the specs serve builds from the fields above for the kinds of
	// the same name, and add kinds (tests and embedders configure a kind in code, with no field
	// here). Defaults to none: every kind as its flags say.
	KindSpecs []jobcore.KindSpec
	// HandleTTL defaults to 7 days; CursorTTL to 15 minutes.
	HandleTTL, CursorTTL time.Duration
	// StreamHeartbeat, MaxStreams and MaxStreamsPerCaller are the event streams' heartbeat and
	// limits (frontend.Options); zero takes the frontend's defaults.
	StreamHeartbeat                 time.Duration
	MaxStreams, MaxStreamsPerCaller int
	// MetricsListen is where Prometheus /metrics is served. Defaults to empty: no metrics.
	MetricsListen string
	// TenantsFile holds per-tenant fairness weights and quotas (JSON, authz.Tenants).
	// Defaults to empty: authz.DefaultTenants.
	TenantsFile string
	// Tenants, if set, is used instead of TenantsFile (tests).
	Tenants *authz.Tenants
	// QuotaBudget, QuotaDegraded and QuotaOvershoot say how long a start waits for its quota
	// check and how it is decided past that (frontend.Options); zero takes the defaults (2 s,
	// admit-bounded, 8).
	QuotaBudget    time.Duration
	QuotaDegraded  string
	QuotaOvershoot int
	// QuotaFresh is how old a quota check's figures may be to admit a start far from every
	// limit without a new check (frontend.Options); zero takes the default (1 s), negative
	// turns it off.
	QuotaFresh time.Duration
	// DevDeployment lets serve start with secrets marked DEV-ONLY (the public placeholders
	// under cmd/deploy/secrets that docker-compose.yml mounts). Defaults to false: refused.
	DevDeployment bool
	// Pages is browser sign-in for jobgate's pages (serve_pages.go). Defaults to off.
	Pages PagesConfig
	// CodecCORSOrigins are the Web UI origins (comma-separated) that may call /codec/* from a
	// browser (serve_pages.go). Defaults to none.
	CodecCORSOrigins string

	// kinds are the serveKinds Flags bound, so that build reads the values of the very flags
	// parsed: a kind may keep its options in its own variables, with no field here. nil (a
	// config built in code) is serveKinds() as declared, options from the fields above.
	kinds []serveKind
}

// Flags registers serve's flags.
func (c *ServeConfig) Flags(fs *flag.FlagSet) {
	c.Temporal.Flags(fs)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	fs.StringVar(&c.ResourceURI, "resource-uri", "http://localhost:8080/mcp", "this server's OAuth resource URI (tokens' aud must contain it)")
	fs.StringVar(&c.Issuer, "issuer", "", "required: exact token issuer (iss)")
	fs.StringVar(&c.HS256SecretFile, "hs256-secret-file", "", "file holding the HS256 token secret (>= 32 bytes), for dev; not with --jwks-url")
	fs.StringVar(&c.JWKSURL, "jwks-url", "", "identity provider's JWK Set URL (RS256/ES256/EdDSA tokens); not with --hs256-secret-file; default: the jwks_uri of --issuer's discovery metadata")
	fs.DurationVar(&c.JWKSRefresh, "jwks-refresh", authz.JWKSRefreshIntervalDefault, "how often the JWK Set is re-fetched (outages keep the keys held)")
	fs.DurationVar(&c.JWKSUnknownKIDInterval, "jwks-unknown-kid-interval", authz.JWKSUnknownKIDIntervalDefault, "least time between JWK Set re-fetches caused by tokens with an unknown kid")
	fs.StringVar(&c.TenantClaim, "tenant-claim", authz.TenantClaimDefault, "token claim naming the tenant")
	fs.StringVar(&c.ScopeClaim, "scope-claim", authz.ScopeClaimDefault, "the one claim holding the identity provider's scopes (string or array), e.g. scp for Entra ID; default: scope (string) merged with scp (array)")
	fs.StringVar(&c.HandleKeys, "handle-keys", "", "handle/cursor HMAC keys \"kid:hex,...\"; the first signs, all verify (prefer --handle-keys-file)")
	fs.StringVar(&c.HandleKeysFile, "handle-keys-file", "", "file holding --handle-keys")
	resumeKeysFlags(fs, &c.ResumeKeys, &c.ResumeKeysFile)
	signingKeysFlags(fs, &c.SigningKeys, &c.SigningKeysFile)
	fs.StringVar(&c.UIBaseURL, "ui-base-url", "", "public Temporal Web UI base URL for ui_url links, e.g. https://temporal.example.com")
	fs.StringVar(&c.UIURLFor, "ui-url-for", jobcore.UIURLForAdmin, "who gets ui_url in job views: admin (jobs:admin holders), all or none; the Web UI is an operator tool")
	c.kinds = serveKinds()
	for _, k := range c.kinds {
		if k.flags != nil {
			k.flags(fs, c)
		}
	}
	fs.DurationVar(&c.HandleTTL, "handle-ttl", jobcore.HandleTTLDefault, "how long an issued handle stays valid")
	fs.DurationVar(&c.CursorTTL, "cursor-ttl", jobcore.CursorTTLDefault, "how long a list cursor stays valid")
	fs.DurationVar(&c.StreamHeartbeat, "stream-heartbeat", events.StreamHeartbeatDefault, "how often an idle event stream sends a keep-alive comment")
	fs.IntVar(&c.MaxStreams, "max-streams", events.MaxStreamsDefault, "most event streams this replica holds open (more: 429)")
	fs.IntVar(&c.MaxStreamsPerCaller, "max-streams-per-caller", events.MaxStreamsPerCallerDefault, "most event streams one principal holds open on this replica (more: 429)")
	metricsFlag(fs, &c.MetricsListen)
	tenantsFlag(fs, &c.TenantsFile)
	fs.DurationVar(&c.QuotaBudget, "quota-budget", quota.BudgetDefault, "how long a start waits for its quota check; past it --quota-degraded decides (never unavailable)")
	fs.StringVar(&c.QuotaDegraded, "quota-degraded", string(quota.AdmitBounded), "how a start whose quota check did not answer in time is decided: "+
		string(quota.AdmitBounded)+" (admit up to --quota-overshoot starts per tenant on this replica until a check answers) or "+string(quota.Refuse)+" (quota_exceeded with retry_after_ms)")
	fs.IntVar(&c.QuotaOvershoot, "quota-overshoot", quota.OvershootDefault, "most starts of one tenant this replica admits unchecked under --quota-degraded "+string(quota.AdmitBounded))
	fs.DurationVar(&c.QuotaFresh, "quota-fresh", quota.FreshDefault, "how old a quota check's figures may be to admit a start far from every limit without waiting for a new check (negative: always wait)")
	fs.BoolVar(&c.DevDeployment, "dev-deployment", false, "this is a dev deployment: accept secrets marked "+DevOnlyMarker+" (public placeholders)")
	c.Pages.Flags(fs)
	fs.StringVar(&c.CodecCORSOrigins, "codec-cors-origin", "", "Temporal Web UI origin(s), comma-separated (https://temporal.example.com), allowed to call /codec/decode and /codec/encode from a browser; default none")
}

func tenantsFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "tenants", "", "JSON file of per-tenant fairness weights and quotas (defaults and overrides); without it the built-in defaults apply")
}

// ServeMain runs the stateless MCP frontend.
type ServeMain struct {
	Config ServeConfig
	Logger *zap.Logger
	// Client, Verifier, Keys and ResumeKeys, if set, replace what Config would build (dev and tests).
	Client     client.Client
	Verifier   authz.Verifier
	Keys       *handle.Keyring
	ResumeKeys *handle.Keyring
	// SigningKeys, if set, replaces what Config would load (dev and tests).
	SigningKeys *handle.SigningKeyring
	// Listener, if set, is served instead of binding Config.Listen (dev binds first to learn its port).
	Listener net.Listener
	// Mounts are extra handlers served on the same listener beside the frontend's routes:
	// net/http.ServeMux pattern → handler (dev mounts its identity provider under "/oidc/").
	// The most specific pattern wins, as in ServeMux; a pattern that conflicts with another
	// mount or with "/" (the frontend) fails Run. Defaults to none.
	Mounts map[string]http.Handler
	// Guard, if set, wraps the whole handler, Mounts included: dev's devHostGuard. Default none
	// (serve answers whatever Host its public URL brings).
	Guard func(http.Handler) http.Handler
	// Now, if set, is the frontend's clock (frontend.Options.Now: handle, cursor and download
	// link expiry); nil is time.Now. Tests move it past an expiry instead of sleeping.
	Now func() time.Time
	// CodecDevOperator (dev only) lets tokenless loopback requests to /codec/* act as an
	// operator administering every tenant: dev's Web UI has no sign-in (codecserver.Options).
	CodecDevOperator bool
	// Tracing, if set, is the frontend's traces (dev and tests; its owner shuts it down).
	// Defaults to StartTracing(ServiceFrontend): OTLP when the OTEL_* environment says so.
	Tracing *Tracing

	own     bool
	ln      net.Listener
	srv     *http.Server
	closers []func() error // what the kinds opened (serveKind.spec), released by Close
	// artifacts is --artifacts, opened once for every kind that reads it (exports' downloads,
	// evals' episode logs); nil until one asks.
	artifacts contract.ArtifactReader
	metrics   *metricsServer
	stop      context.CancelFunc // ends what Run started in the background
	pages     *pages.Pages       // browser sign-in, when configured (serve_pages.go)

	ownTracing bool // Run started Tracing: Close flushes it
}

// closeOnExit has Close call f (a kind's resource, opened by its serveKind.spec).
func (m *ServeMain) closeOnExit(f func() error) { m.closers = append(m.closers, f) }

func (m *ServeMain) build(ctx context.Context) (*frontend.Frontend, error) {
	c := m.Config
	if m.Verifier == nil {
		v, err := m.newVerifier(ctx, c)
		if err != nil {
			return nil, err
		}
		m.Verifier = v
	}
	if err := m.loadKeys(c); err != nil {
		return nil, err
	}
	// Before the client: its converters seal with these keys (the artifact store's by default).
	closePayloadKeys, err := m.Config.Temporal.OpenPayloadKeys(ctx, c.ArtifactsURL, c.DevDeployment)
	if err != nil {
		return nil, err
	}
	m.closeOnExit(closePayloadKeys)
	c = m.Config
	var tenants authz.Tenants
	if c.Tenants != nil {
		tenants = *c.Tenants
	} else if tenants, err = authz.LoadTenants(c.TenantsFile); err != nil {
		return nil, err
	}
	kinds, err := m.kindSpecs(ctx)
	if err != nil {
		return nil, err
	}
	if m.Client == nil {
		cl, err := m.lazyClient(ctx, c)
		if err != nil {
			return nil, err
		}
		m.Client, m.own = cl, true
	}
	var authServers []string
	if c.Issuer != "" {
		authServers = []string{c.Issuer}
	}
	return frontend.New(jobcore.Options{
		Temporal: m.Client, Namespace: c.Temporal.Namespace, TaskQueue: c.Temporal.TaskQueue,
		Verifier: m.Verifier, Keys: m.Keys, ResumeKeys: m.ResumeKeys, SigningKeys: m.SigningKeys, ResourceURI: c.ResourceURI, AuthorizationServers: authServers,
		UIBaseURL: c.UIBaseURL, UIURLFor: c.UIURLFor,
		// Every kind is served; those in serveKinds take their options from the flags.
		Kinds:     kinds,
		HandleTTL: c.HandleTTL, CursorTTL: c.CursorTTL, Logger: m.Logger, Metrics: m.metrics.registerer(),
		StreamHeartbeat: c.StreamHeartbeat, MaxStreams: c.MaxStreams, MaxStreamsPerCaller: c.MaxStreamsPerCaller,
		DataConverter: c.Temporal.DataConverter(), Tenants: tenants,
		QuotaBudget: c.QuotaBudget, QuotaDegraded: quota.Policy(c.QuotaDegraded), QuotaOvershoot: c.QuotaOvershoot,
		QuotaFresh: c.QuotaFresh, Now: m.Now, TracerProvider: m.Tracing.frontendProvider(),
		ApprovalMaxAge: c.Pages.ApprovalMaxAge, // the MCP Apps card's step-up, as the pages'
	})
}

// newVerifier is the bearer-token verifier the flags describe: a JWK Set (named, or discovered
// from --issuer's metadata) refreshed in the background until ctx ends, or an HS256 secret.
func (m *ServeMain) newVerifier(ctx context.Context, c ServeConfig) (authz.Verifier, error) {
	if c.Issuer == "" {
		return nil, errors.New("--issuer is required")
	}
	if c.JWKSURL != "" && c.HS256SecretFile != "" {
		return nil, errors.New("exactly one of --jwks-url and --hs256-secret-file is required")
	}
	if c.JWKSURL == "" && c.HS256SecretFile == "" {
		// A standard IdP names its JWK Set in its metadata: --issuer alone is enough.
		u, err := discoverJWKSURL(ctx, c.Issuer, nil)
		if err != nil {
			return nil, err
		}
		c.JWKSURL = u
		if m.Logger != nil {
			m.Logger.Info("JWK Set discovered from the issuer's metadata", zap.String("issuer", c.Issuer), zap.String("jwks_url", u))
		}
	}
	if c.JWKSURL == "" {
		secret, err := readSecretFile(c.HS256SecretFile, "--hs256-secret-file")
		if err != nil {
			return nil, err
		}
		if err := refuseDevOnly(c.DevDeployment, "--hs256-secret-file", c.HS256SecretFile, secret); err != nil {
			return nil, err
		}
		return authz.NewHS256Verifier(c.Issuer, c.ResourceURI, secret, c.TenantClaim)
	}
	log := m.Logger
	if log == nil {
		log = zap.NewNop()
	}
	// The background refresh ends with ctx (serve's lifetime).
	return authz.NewJWKSVerifier(ctx, authz.JWKSOptions{URL: c.JWKSURL, Issuer: c.Issuer, Audience: c.ResourceURI,
		TenantClaim: c.TenantClaim, ScopeClaim: c.ScopeClaim, RefreshInterval: c.JWKSRefresh, UnknownKIDInterval: c.JWKSUnknownKIDInterval,
		RefreshError: func(u string, err error) {
			log.Warn("JWK Set refresh failed; keeping the keys held", zap.String("url", u), zap.Error(err))
		}})
}

// loadKeys loads the handle, resume and signing keyrings not set in code; a frontend needs all three.
func (m *ServeMain) loadKeys(c ServeConfig) error {
	if err := requireKeyring(&m.Keys, c.HandleKeys, c.HandleKeysFile, "handle-keys", c.DevDeployment,
		"all replicas must share them"); err != nil {
		return err
	}
	// The resume keys are the power to approve: refused as placeholders like the handle keys.
	if err := requireKeyring(&m.ResumeKeys, c.ResumeKeys, c.ResumeKeysFile, "resume-keys", c.DevDeployment,
		"frontends seal every answer with them; give the workers the same keys"); err != nil {
		return err
	}
	// Every decision record is signed, so that anyone with the public keys can check it.
	return requireSigningKeys(&m.SigningKeys, c.SigningKeys, c.SigningKeysFile, c.DevDeployment,
		"frontends sign every decision record with them; give the workers the same keys")
}

// lazyClient is the Temporal client: lazy, so the frontend starts (and answers /readyz 503)
// while Temporal is down, but a TLS misconfiguration fails start-up.
func (m *ServeMain) lazyClient(ctx context.Context, c ServeConfig) (client.Client, error) {
	opts, err := c.Temporal.Options(m.Logger)
	if err != nil {
		return nil, err
	}
	if opts.ConnectionOptions.TLS != nil {
		// Fail start-up on a TLS misconfiguration rather than serve /readyz 503 for ever.
		if err := probeTLS(ctx, opts); err != nil {
			return nil, err
		}
	}
	if opts.Interceptors, err = m.Tracing.clientInterceptors(); err != nil {
		return nil, err
	}
	cl, err := client.NewLazyClient(opts)
	if err != nil {
		return nil, fmt.Errorf("temporal client: %w", err)
	}
	return cl, nil
}

// Run listens and serves in the background; it returns once the listener is bound.
func (m *ServeMain) Run(ctx context.Context) error {
	if m.Logger == nil {
		m.Logger = zap.NewNop()
	}
	var err error
	if m.metrics, err = startMetricsFor(m.Config.MetricsListen, &m.Config.Temporal, m.Logger); err != nil {
		return err
	}
	if err := startRoleTracing(ctx, &m.Tracing, &m.ownTracing, ServiceFrontend, m.Logger); err != nil {
		_ = m.metrics.close()
		return err
	}
	// Background work of the server's own (the JWKS refresh) ends with Close, or with ctx.
	ctx, m.stop = context.WithCancel(ctx)
	f, err := m.build(ctx)
	if err != nil {
		_ = m.metrics.close()
		_ = m.closeKinds()
		return err
	}
	// The pages wrap the frontend's routes; Mounts (the dev identity provider) wrap both.
	h, err := m.withPages(f)
	if err == nil {
		h = telemetry.TraceHTTP(m.Tracing.frontendProvider(), m.routes(f), h)
		h, err = m.handler(h)
	}
	if err == nil && m.Guard != nil {
		h = m.Guard(h)
	}
	if err != nil {
		_ = m.Close()
		return err
	}
	ln := m.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", m.Config.Listen); err != nil {
			return fmt.Errorf("listen %s: %w", m.Config.Listen, err)
		}
	}
	m.ln = ln
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute}
	srv.RegisterOnShutdown(f.StopStreams) // open event streams would hold Shutdown to its deadline
	m.srv = srv
	go func() {
		// srv, not m.srv: a Close right after Run clears m.srv while this goroutine starts.
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("http server", zap.Error(err))
		}
	}()
	if err := m.checkPages(ctx); err != nil {
		_ = m.Close()
		return err
	}
	m.Config.Temporal.warnClearPayloads(m.Logger)
	m.Logger.Info("frontend listening", zap.String("addr", ln.Addr().String()), zap.String("resource", m.Config.ResourceURI))
	return nil
}

// handler joins Mounts around the frontend's routes (front).
func (m *ServeMain) handler(front http.Handler) (http.Handler, error) {
	mounts, err := m.codecMount(m.Mounts)
	if err != nil || len(mounts) == 0 {
		return front, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", front)
	for _, p := range slices.Sorted(maps.Keys(mounts)) {
		if err := mount(mux, p, mounts[p]); err != nil {
			return nil, err
		}
	}
	return mux, nil
}

// mount turns ServeMux's panic on a bad or conflicting pattern into Run's error.
func mount(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	if h == nil {
		return fmt.Errorf("ServeMain.Mounts[%q] is nil", pattern)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("ServeMain.Mounts[%q]: %v", pattern, r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// Addr is the bound listen address (useful with :0).
func (m *ServeMain) Addr() string {
	if m.ln == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// Close stops accepting, finishes in-flight requests (bounded), and releases the client.
func (m *ServeMain) Close() error {
	if m.stop != nil {
		m.stop()
		m.stop = nil
	}
	var err error
	if m.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = m.srv.Shutdown(ctx)
		cancel()
		m.srv = nil
	}
	if m.own && m.Client != nil {
		m.Client.Close()
		m.Client = nil
	}
	err = errors.Join(err, m.closeKinds())
	err = errors.Join(err, m.metrics.close())
	m.metrics = nil
	if m.ownTracing {
		err = joinErr(err, m.Tracing) // after the server's last requests ended their spans
	}
	return err
}

// closeKinds releases what the kinds opened, once.
func (m *ServeMain) closeKinds() error {
	var errs []error
	for _, f := range m.closers {
		errs = append(errs, f())
	}
	m.closers, m.artifacts = nil, nil
	return errors.Join(errs...)
}
