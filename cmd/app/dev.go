package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/devtemporal"
	"github.com/jobgate/jobgate/frontend/devidp"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/workflows"
)

// DevIssuer is the issuer of the HS256 tokens minted for the dev stack (`jobgate token`, the
// banner's); the dev identity provider's tokens carry its URL instead (DevMain.IdPIssuer).
const DevIssuer = "jobgate-dev"

// DevConfig configures `jobgate dev`.
type DevConfig struct {
	// DataDir keeps the SQLite database and dev secrets. Defaults to ./.jobgate.
	DataDir string
	// Ephemeral keeps everything in memory; nothing survives exit.
	Ephemeral bool
	// Listen is the MCP frontend address. Defaults to 127.0.0.1:8080.
	Listen string
	// TemporalPort is the embedded Temporal's gRPC port. Defaults to 7233.
	TemporalPort int
	// UIPort is the Temporal Web UI port. Defaults to 8233; -1 disables it.
	UIPort int
	// SuitesFile adds suites to the demo suite (eval's option, serve_eval.go). Defaults to none.
	SuitesFile string
	// TenantsFile holds per-tenant fairness weights and quotas. Defaults to the built-in ones.
	TenantsFile string
	// TokenTTL is the lifetime of the printed dev tokens. Defaults to 24 hours.
	TokenTTL time.Duration
	// DatasetsFile replaces the built-in demo dataset catalog (this and ArtifactsURL are
	// export's options, serve_export.go). Defaults to the demo "customers" dataset over a
	// seeded SQLite database in the data dir.
	DatasetsFile string
	// ArtifactsURL is the export artifact store. Defaults to file://<data dir>/artifacts.
	ArtifactsURL string
	// ConformanceFixtures also serves the MCP conformance suite's Tasks fixtures as jobs of
	// the fixture kind (serve_fixture.go). Off by default; serve has no such option.
	ConformanceFixtures bool
	// IdP configures the dev identity provider's Client ID Metadata Document fetches (devidp.go).
	IdP DevIdPConfig

	// kinds are the serveKinds Flags bound (see ServeConfig.kinds); nil is serveKinds().
	kinds []serveKind
}

// Flags registers dev's flags.
func (c *DevConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", ".jobgate", "directory for the SQLite database and dev secrets")
	fs.BoolVar(&c.Ephemeral, "ephemeral", false, "keep everything in memory; nothing survives exit")
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "MCP frontend listen address")
	fs.IntVar(&c.TemporalPort, "temporal-port", 7233, "embedded Temporal gRPC port (0 picks one)")
	fs.IntVar(&c.UIPort, "ui-port", 8233, "Temporal Web UI port (0 picks one, -1 disables)")
	tenantsFlag(fs, &c.TenantsFile)
	fs.DurationVar(&c.TokenTTL, "token-ttl", 24*time.Hour, "lifetime of the printed dev tokens")
	c.IdP.flags(fs)
	c.kinds = serveKinds()
	for _, k := range c.kinds {
		if k.devFlags != nil {
			k.devFlags(fs, c)
		}
	}
}

// DevMain runs the whole stack in one process: embedded Temporal + UI, a worker, the frontend.
type DevMain struct {
	Config DevConfig
	Logger *zap.Logger
	// Out receives the banner with tokens and client config. Defaults to os.Stdout.
	Out io.Writer

	temporal *devtemporal.Server
	client   client.Client
	worker   *WorkerMain
	serve    *ServeMain
	secret   []byte
	keys     *handle.Keyring
	// resumeKeys seal answers (frontend) and open the seals (worker); dev-resume-keys.
	resumeKeys *handle.Keyring
	// signingKeys sign decision records (frontend) and manifests (worker); dev-signing-keys.
	signingKeys *handle.SigningKeyring
	resource    string
	tmpDir      string // ephemeral stacks keep demo data and artifacts here, removed on Close
	// idp is the dev identity provider (devidp.go); stopIdP ends its JWK Set refresh.
	idp     *devidp.IdP
	stopIdP context.CancelFunc
	// tracing is the frontend's and the worker's traces (tracing.go), flushed by Close.
	tracing devTracing
	// payloadKeys seal the stack's payloads (openPayloadKeys); closed last.
	payloadKeys *payloadcrypt.Opened
}

// DevToken is one printed dev principal.
type DevToken struct {
	Tenant, Subject string
	Scopes          []authz.Scope
	Token           string
}

// DevPrincipals are the principals `jobgate dev` mints tokens for. A function, not a package
// variable: each caller gets its own slice, so nothing can change the list another one reads.
func DevPrincipals() []DevToken {
	return []DevToken{
		{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
		{Tenant: "acme", Subject: "bo", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
		{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove}},
		{Tenant: "acme", Subject: "ops", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}},
		{Tenant: "globex", Subject: "gus", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}},
	}
}

// Run starts the stack and prints the banner.
func (m *DevMain) Run(ctx context.Context) error {
	started := time.Now()
	if m.Logger == nil {
		m.Logger = zap.NewNop()
	}
	if m.Out == nil {
		m.Out = os.Stdout
	}
	c := m.Config
	dataDir := c.DataDir
	if c.Ephemeral {
		dataDir = ""
	}
	if err := m.loadSecrets(dataDir); err != nil {
		return err
	}
	// Bind first so the resource URI (tokens' aud) and the notifications' links name the real
	// port (and the Web UI its codec endpoint), even with :0; the frontend serves this very listener, so no other process can take
	// the port in between. Until serve owns it, a failed start closes it.
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.Listen, err)
	}
	served := false
	defer func() {
		if !served {
			ln.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	sas := SearchAttributes()
	ts, err := devtemporal.Start(ctx, devtemporal.Options{
		DataDir: dataDir, FrontendPort: c.TemporalPort, UIPort: c.UIPort, SearchAttributes: sas,
		Logger: m.Logger.Named("temporal"),
		// The UI decodes through the frontend's codec server (frontend/codecserver) as the dev
		// operator: engineers see payloads in clear with no setup.
		UICodecEndpoint: "http://localhost:" + strconv.Itoa(port) + "/codec",
	})
	if err != nil {
		return fmt.Errorf("embedded temporal: %w", err)
	}
	m.temporal = ts
	tc := TemporalConfig{Address: ts.FrontendHostPort(), Namespace: ts.Namespace(), TaskQueue: workflows.TaskQueueDefault}
	// Notifications link to the pages, at the origin the frontend serves.
	wc := WorkerConfig{Temporal: tc, MaxConcurrentEpisodes: 200, TenantsFile: c.TenantsFile,
		PublicURL: "http://localhost:" + strconv.Itoa(port)}
	sc := ServeConfig{Temporal: tc,
		// The tour links every job to the local UI, whoever asks: dev is one person's machine.
		UIBaseURL: ts.UIURL(), UIURLFor: jobcore.UIURLForAll, TenantsFile: c.TenantsFile,
		CodecCORSOrigins: devUIOrigins(ts.UIURL())}
	kindDir, err := m.kindDir(dataDir)
	if err != nil {
		return err
	}
	kinds := c.kinds
	if kinds == nil {
		kinds = serveKinds()
	}
	for _, k := range kinds {
		if k.dev != nil {
			if err := k.dev(c, kindDir, &wc, &sc); err != nil {
				return err
			}
		}
	}
	if err := m.openPayloadKeys(ctx, dataDir, kindDir, wc.ArtifactsURL, &tc, &wc.Temporal, &sc.Temporal); err != nil {
		return err
	}
	opts, err := tc.Options(m.Logger) // plaintext: the embedded server is loopback-only
	if err == nil {
		err = m.tracing.start(ctx, m.Logger, &opts)
	}
	if err != nil {
		return err
	}
	m.client, err = client.DialContext(ctx, opts)
	if err != nil {
		return fmt.Errorf("temporal client: %w", err)
	}
	m.worker = &WorkerMain{Config: wc, Logger: m.Logger.Named("worker"), Client: m.client, ResumeKeys: m.resumeKeys,
		SigningKeys: m.signingKeys, Tracing: m.tracing.worker}
	if err := m.worker.Run(ctx); err != nil {
		return err
	}
	m.resource = "http://localhost:" + strconv.Itoa(port) + "/mcp"
	idp, mounts, err := m.newDevIdP(port, dataDir)
	if err != nil {
		return err
	}
	m.idp = idp
	// The RFC 9728 metadata names the identity provider, so MCP clients find where to log in.
	sc.Listen, sc.ResourceURI, sc.Issuer = ln.Addr().String(), m.resource, idp.Issuer()
	// People sign in to jobgate's pages (/login, /me) at the same provider, as jobgate-pages.
	if sc.Pages, err = devPagesConfig(idp.Issuer(), idp.PagesClientSecret(), "http://localhost:"+strconv.Itoa(port), ln.Addr()); err != nil {
		return err
	}
	// Until the verifier is set below (the IdP's keys are only reachable once this listener
	// serves), every token is refused with 401, never accepted.
	late := &authz.LateVerifier{}
	m.serve = &ServeMain{Config: sc,
		Logger: m.Logger.Named("frontend"), Client: m.client, Verifier: late, Keys: m.keys, ResumeKeys: m.resumeKeys,
		SigningKeys: m.signingKeys, Listener: ln, Mounts: mounts, Tracing: m.tracing.frontend, CodecDevOperator: true,
		// Every route, the identity provider's included, answers only this machine's loopback
		// names as Host (DNS rebinding).
		Guard: func(h http.Handler) http.Handler { return devHostGuard(h) },
	}
	served = true // serve closes it from here on, on failure too
	if err := m.serve.Run(ctx); err != nil {
		return err
	}
	// The JWK Set refresh lives as long as the stack (Close), not as long as Run's ctx.
	idpCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	m.stopIdP = stop
	v, err := m.devVerifier(idpCtx, ln.Addr(), idp.Issuer())
	if err != nil {
		return fmt.Errorf("dev identity provider: %w", err)
	}
	late.Set(v)
	return m.banner(time.Since(started))
}

// devUIOrigins are the origins a browser may show the dev Web UI at (uiURL, and the same port
// on localhost), for the codec server's CORS; none without a UI.
func devUIOrigins(uiURL string) string {
	u, err := url.Parse(uiURL)
	if uiURL == "" || err != nil {
		return ""
	}
	return uiURL + ",http://localhost:" + u.Port()
}

// kindDir is the absolute directory the kinds keep their dev data in (serveKind.dev): the
// data dir, or a temp dir removed on Close when ephemeral (dataDir "").
func (m *DevMain) kindDir(dataDir string) (string, error) {
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "jobgate-dev-")
		if err != nil {
			return "", err
		}
		m.tmpDir, dataDir = tmp, tmp
	}
	return filepath.Abs(dataDir)
}

// loadSecrets keeps the token secret, handle keys, resume keys and signing keys in the data dir, so tokens
// and handles stay valid across restarts; an ephemeral stack makes fresh ones.
func (m *DevMain) loadSecrets(dir string) error {
	if dir == "" {
		m.secret = []byte(handle.GenerateKeyHex())
		k, err := handle.NewKeyring("dev1", map[string][]byte{"dev1": handle.GenerateKey()})
		if err != nil {
			return err
		}
		m.keys = k
		if m.resumeKeys, err = handle.NewKeyring("dev1", map[string][]byte{"dev1": handle.GenerateKey()}); err != nil {
			return err
		}
		m.signingKeys, err = handle.ParseSigningKeyring("dev1:" + handle.GenerateSigningSeedHex())
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	secret, err := readOrCreate(filepath.Join(dir, "dev-token-secret"), handle.GenerateKeyHex)
	if err != nil {
		return err
	}
	// The file's trimmed text is the secret, exactly as `serve --hs256-secret-file` reads it.
	m.secret = []byte(secret)
	spec, err := readOrCreate(filepath.Join(dir, "dev-handle-keys"), func() string { return "dev1:" + handle.GenerateKeyHex() })
	if err != nil {
		return err
	}
	if m.keys, err = handle.ParseKeyring(spec); err != nil {
		return err
	}
	spec, err = readOrCreate(filepath.Join(dir, "dev-resume-keys"), func() string { return "dev1:" + handle.GenerateKeyHex() })
	if err != nil {
		return err
	}
	if m.resumeKeys, err = handle.ParseKeyring(spec); err != nil {
		return err
	}
	// The same syntax as serve's --signing-keys-file: kept, so manifests stay verifiable against
	// the /.well-known set across restarts.
	spec, err = readOrCreate(filepath.Join(dir, "dev-signing-keys"), func() string { return "dev1:" + handle.GenerateSigningSeedHex() })
	if err != nil {
		return err
	}
	m.signingKeys, err = handle.ParseSigningKeyring(spec)
	return err
}

// openPayloadKeys gives the stack payload encryption with no setup: a local key-encryption key
// kept in the data dir (dev-payload-kek; a fresh one when ephemeral), the data keys in the
// artifact store (or, without one, <data dir>/artifacts), shared by worker and frontend.
func (m *DevMain) openPayloadKeys(ctx context.Context, dataDir, kindDir, artifacts string, tcs ...*TemporalConfig) error {
	kek := payloadcrypt.NewLocalKEK()
	if dataDir != "" {
		var err error
		if kek, err = readOrCreate(filepath.Join(dataDir, "dev-payload-kek"), payloadcrypt.NewLocalKEK); err != nil {
			return err
		}
	}
	if artifacts == "" {
		artifacts = (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(kindDir, "artifacts"))}).String()
	}
	keys, err := payloadcrypt.Open(ctx, kek, artifacts, payloadcrypt.Options{})
	if err != nil {
		return err
	}
	m.payloadKeys = keys
	for _, tc := range tcs {
		tc.UsePayloadKeys(keys.Store)
	}
	return nil
}

func readOrCreate(path string, gen func() string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	v := gen()
	return v, os.WriteFile(path, []byte(v+"\n"), 0o600)
}

// LoadTokenSecret reads an HS256 secret the way serve does (the file's trimmed text), from
// secretFile or else from the dev stack's data dir.
func LoadTokenSecret(secretFile, dataDir string) ([]byte, error) {
	if secretFile == "" {
		secretFile = filepath.Join(dataDir, "dev-token-secret")
	}
	return readSecretFile(secretFile, "token secret")
}

// MintDevToken mints a token this dev stack accepts.
func (m *DevMain) MintDevToken(tenant, sub string, scopes []authz.Scope, ttl time.Duration) (string, error) {
	return authz.MintHS256(m.secret, authz.MintOptions{Issuer: DevIssuer, Audience: m.resource, Tenant: tenant,
		Subject: sub, Scopes: scopes, TTL: ttl})
}

// IdPIssuer is the dev identity provider's issuer URL, e.g. http://localhost:8080/oidc.
func (m *DevMain) IdPIssuer() string {
	if m.idp == nil {
		return ""
	}
	return m.idp.Issuer()
}

// IdP is the dev identity provider (nil before Run): its PagesClientSecret is what jobgate's
// own pages sign in with as the confidential client devidp.PagesClientID.
func (m *DevMain) IdP() *devidp.IdP { return m.idp }

// DataConverter decodes what the stack wrote to Temporal (sealed with its payload keys) for
// tools and tests reading histories directly; nil before Run.
func (m *DevMain) DataConverter() converter.DataConverter {
	if m.payloadKeys == nil {
		return nil
	}
	return payloadcrypt.NewDataConverter(m.payloadKeys.Store)
}

// ResourceURI is the frontend's resource URI (and the dev tokens' audience).
func (m *DevMain) ResourceURI() string { return m.resource }

// Addr is the frontend's bound address.
func (m *DevMain) Addr() string { return m.serve.Addr() }

// TemporalHostPort is the embedded Temporal's gRPC address.
func (m *DevMain) TemporalHostPort() string { return m.temporal.FrontendHostPort() }

func (m *DevMain) banner(took time.Duration) error {
	ttl := m.Config.TokenTTL
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	w := m.Out
	fmt.Fprintf(w, "\njobgate dev stack ready in %s\n\n", took.Round(10*time.Millisecond))
	fmt.Fprintf(w, "  MCP endpoint      %s\n", m.resource)
	fmt.Fprintf(w, "  Identity provider %s (dev only)\n", m.IdPIssuer())
	if !loopbackListener(m.serve.ln.Addr()) {
		// devidp.Options.AllowRemote stays off: its picker hands out any dev user's token.
		fmt.Fprintf(w, "  %-17s the identity provider answers loopback clients only (--listen %s is not loopback): sign in on this machine; other hosts use the dev tokens below\n", "", m.Addr())
	}
	if u := m.temporal.UIURL(); u != "" {
		fmt.Fprintf(w, "  Temporal Web UI   %s\n", u)
	}
	fmt.Fprintf(w, "  Temporal gRPC     %s (namespace %s)\n", m.temporal.FrontendHostPort(), m.temporal.Namespace())
	if m.Config.Ephemeral {
		fmt.Fprintf(w, "  Storage           in memory (--ephemeral): nothing survives exit\n")
	} else {
		fmt.Fprintf(w, "  Storage           %s (restarts keep every job and sign-in)\n", m.Config.DataDir)
	}
	if m.Config.ConformanceFixtures {
		fmt.Fprintf(w, "  Conformance       the MCP conformance suite's Tasks fixtures are served as jobs (--conformance-fixtures; frontend/README.md)\n")
	}
	// Sign-in goes through the identity provider: its login page lists the dev users to pick.
	fmt.Fprintf(w, "\nSign in (the identity provider's page lets you pick any dev user; no password):\n")
	fmt.Fprintf(w, "  jobgate login --url %s\n", m.resource)
	fmt.Fprintf(w, "  claude mcp add --transport http jobgate %s\n", m.resource)
	fmt.Fprintf(w, "  browser: %s\n", strings.TrimSuffix(m.resource, "/mcp")+pages.PathMe)
	fmt.Fprintf(w, "\nDev tokens (valid %s):\n", ttl)
	var first string
	for _, p := range DevPrincipals() {
		tok, err := m.MintDevToken(p.Tenant, p.Subject, p.Scopes, ttl)
		if err != nil {
			return err
		}
		if first == "" {
			first = tok
		}
		fmt.Fprintf(w, "  %-7s %-8s %-28s %s\n", p.Tenant, p.Subject, strings.Join(authz.ScopeStrings(p.Scopes), " "), tok)
	}
	cfg := map[string]any{"mcpServers": map[string]any{"jobgate": map[string]any{
		"type": "http", "url": m.resource, "headers": map[string]string{"Authorization": "Bearer " + first}}}}
	b, _ := json.MarshalIndent(cfg, "  ", "  ")
	fmt.Fprintf(w, "\nMCP client config (as acme/ana):\n  %s\n\nCtrl-C stops.\n", b)
	return nil
}

// Close stops frontend, worker and Temporal, in that order.
func (m *DevMain) Close() error {
	var errs []error
	if m.serve != nil {
		errs = append(errs, m.serve.Close())
	}
	if m.stopIdP != nil {
		m.stopIdP()
	}
	if m.worker != nil {
		errs = append(errs, m.worker.Close())
	}
	if m.client != nil {
		m.client.Close()
	}
	errs = append(errs, m.tracing.shutdown())
	if m.temporal != nil {
		errs = append(errs, m.temporal.Stop())
	}
	if m.payloadKeys != nil {
		errs = append(errs, m.payloadKeys.Close())
	}
	if m.tmpDir != "" {
		errs = append(errs, os.RemoveAll(m.tmpDir))
	}
	return errors.Join(errs...)
}
