package app

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

// TemporalConfig says where Temporal is.
type TemporalConfig struct {
	// Address of the Temporal frontend. Defaults to 127.0.0.1:7233.
	Address string
	// Namespace of the jobs. Defaults to "default".
	Namespace string
	// TaskQueue workers poll. Defaults to "jobgate".
	TaskQueue string
	// TLS and credentials for the connection. Defaults to plaintext without credentials.
	TLS TemporalTLS

	// Payloads says where the tenants' payload keys are (--payload-kek…). Required: serve and
	// worker refuse to start without a key-encryption key (contract invariant 9).
	Payloads payloadcrypt.Config
	// InsecureClearPayloads lets a process built in code start without payload keys, its
	// payloads in clear (an error is logged once it runs). No flag or variable sets it: it is
	// for tests that need what a pre-encryption deployment wrote (a benchmark's baseline, a
	// mixed history). Defaults to false: no key-encryption key, no start.
	InsecureClearPayloads bool

	// Compression is the gRPC compression of requests to Temporal: "gzip", "none", or "" (the
	// default), which is none when payloads are sealed and the SDK's gzip when they are clear.
	// Ciphertext does not shrink, so gzip over it is CPU spent for nothing.
	Compression string

	// metrics, set by serve and worker when --metrics-listen is on, receives the SDK's metrics.
	metrics client.MetricsHandler
	// payload is the opened payload encryption (OpenPayloadKeys, or UsePayloadKeys); nil: clear.
	payload *payloadState
}

// payloadState is the converters over one key store, made once: every copy of a
// TemporalConfig (serve's, its frontend's, the worker's snapshot reader) shares them.
type payloadState struct {
	keys *payloadcrypt.Store
	dc   converter.DataConverter
	fc   converter.FailureConverter
}

// Flags registers the Temporal flags with env-var equivalents.
func (c *TemporalConfig) Flags(fs *flag.FlagSet) {
	ConnectionFlags(fs, &c.Address, &c.Namespace, &c.TLS)
	fs.StringVar(&c.TaskQueue, "task-queue", workflows.TaskQueueDefault, "task queue the workers poll")
	fs.StringVar(&c.Compression, "temporal-compression", "", "gRPC compression of requests to Temporal: gzip, none, or empty for none when payloads are encrypted (ciphertext does not shrink) and gzip when they are clear")
	c.Payloads.Flags(fs)
}

// ErrNoPayloadKEK is OpenPayloadKeys' refusal to run without a key-encryption key: the one
// line serve and worker exit with, naming the flags and how to make a key.
var ErrNoPayloadKEK = errors.New("--payload-kek or --payload-kek-file is required (every payload jobgate sends to Temporal is encrypted under its tenant's key): " +
	"a KMS key URL in production (awskms://…, gcpkms://…, azurekeyvault://…), or for dev and tests `jobgate keygen payload-kek`; give every serve and worker the same")

// OpenPayloadKeys opens the payload key store c.Payloads names (by default the artifact store
// artifactsURL) and makes every client Options builds encrypt with it; close releases it.
// Without a key-encryption key it fails (ErrNoPayloadKEK) unless InsecureClearPayloads
// (warnClearPayloads says so once the process runs). A key marked DEV-ONLY
// (cmd/deploy/secrets) is refused unless devDeployment. Already set (UsePayloadKeys):
// nothing to open.
func (c *TemporalConfig) OpenPayloadKeys(ctx context.Context, artifactsURL string, devDeployment bool) (close func() error, err error) {
	close = func() error { return nil }
	if c.payload != nil {
		return close, nil
	}
	if !c.Payloads.Enabled() {
		if c.InsecureClearPayloads {
			return close, nil
		}
		return close, ErrNoPayloadKEK
	}
	kek, _, err := c.Payloads.Resolve(artifactsURL)
	if err != nil {
		return close, err
	}
	if err := refuseDevOnly(devDeployment, "--payload-kek", c.Payloads.KEKFile, []byte(kek)); err != nil {
		return close, err
	}
	keys, err := c.Payloads.Open(ctx, artifactsURL, payloadcrypt.Options{})
	if err != nil {
		return close, err
	}
	c.UsePayloadKeys(keys.Store)
	return keys.Close, nil
}

// warnClearPayloads logs, once the process runs (a start that fails says only why), that its
// payloads go to Temporal in clear (InsecureClearPayloads, set in code only).
func (c TemporalConfig) warnClearPayloads(log *zap.Logger) {
	if c.payload == nil {
		log.Error("INSECURE: InsecureClearPayloads and no payload keys: job inputs, results, memos and failures go to Temporal in clear")
	}
}

// UsePayloadKeys makes every client Options builds encrypt payloads with keys (dev opens its
// own store; tests share one).
func (c *TemporalConfig) UsePayloadKeys(keys *payloadcrypt.Store) {
	dc := payloadcrypt.NewDataConverter(keys)
	c.payload = &payloadState{keys: keys, dc: dc, fc: payloadcrypt.NewFailureConverter(dc)}
}

// PayloadKeys is the key store UsePayloadKeys (or OpenPayloadKeys) set; nil: payloads clear.
func (c TemporalConfig) PayloadKeys() *payloadcrypt.Store {
	if c.payload == nil {
		return nil
	}
	return c.payload.keys
}

// ConnectionFlags registers the flags that say how to reach Temporal (--temporal-address,
// --namespace and the TLS flags), so serve, worker, setup, deploy and replay share their names,
// defaults and variables.
func ConnectionFlags(fs *flag.FlagSet, address, namespace *string, tls *TemporalTLS) {
	fs.StringVar(address, "temporal-address", "127.0.0.1:7233", "Temporal frontend host:port")
	fs.StringVar(namespace, "namespace", "default", "Temporal namespace holding the jobs")
	tls.Flags(fs)
}

// DialTemporal is how the one-shot commands (setup, deploy, replay) reach Temporal: the
// options for address, namespace and tls, then WaitTemporal until it answers or ctx ends.
func DialTemporal(ctx context.Context, address, namespace string, tls TemporalTLS, log *zap.Logger) (client.Client, client.Options, error) {
	opts, err := TemporalConfig{Address: address, Namespace: namespace, TLS: tls}.Options(log)
	if err != nil {
		return nil, client.Options{}, err
	}
	tc, err := WaitTemporal(ctx, opts)
	if err != nil {
		return nil, client.Options{}, err
	}
	return tc, opts, nil
}

// CommandFlags is a one-shot command's flag set (setup, deploy, replay): parse errors are
// returned, not exits, and -h prints usage (which ends in a newline), then the flags, on stderr.
func CommandFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// DataConverter is the converter every jobgate client uses; the frontend decodes memos and
// results with the same one (a codec configured here applies to both). With payload keys it
// seals every payload for its tenant and opens sealed and clear ones alike.
func (c TemporalConfig) DataConverter() converter.DataConverter {
	if c.payload != nil {
		return c.payload.dc
	}
	return converter.GetDefaultDataConverter()
}

// FailureConverter goes with DataConverter: with payload keys, failure messages and stack
// traces are sealed too; nil is the SDK's default.
func (c TemporalConfig) FailureConverter() converter.FailureConverter {
	if c.payload != nil {
		return c.payload.fc
	}
	return nil
}

// options are the SDK client options; an error names the TLS or credential flag that is wrong.
func (c TemporalConfig) Options(log *zap.Logger) (client.Options, error) {
	opts := client.Options{HostPort: c.Address, Namespace: c.Namespace, Logger: sdkLogger{log.Sugar()},
		DataConverter: c.DataConverter(), FailureConverter: c.FailureConverter(), MetricsHandler: c.metrics}
	switch c.Compression {
	case "gzip":
	case "none":
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	case "":
		if c.payload != nil {
			// Sealed payloads are random bytes to gzip: the SDK's default compression would
			// spend CPU deflating what cannot shrink (profiled: gzip over a start's
			// ciphertext was most of what encryption cost a start, issue 31). Without it the
			// rest of a request (IDs, search attributes) goes uncompressed: a few hundred bytes.
			opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
		}
	default:
		return client.Options{}, fmt.Errorf("--temporal-compression %q: want gzip, none or empty", c.Compression)
	}
	if err := c.TLS.apply(&opts, log); err != nil {
		return client.Options{}, err
	}
	return opts, nil
}

// envName maps a flag to its environment variable: temporal-address → JOBGATE_TEMPORAL_ADDRESS.
func envName(flagName string) string {
	return "JOBGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// BindEnv makes every flag of fs settable from its environment variable (JOBGATE_<FLAG>) and
// names the variable in the flag's usage. Call it after registering flags and before Parse, so a
// command-line flag still wins. A value that does not parse is an error naming the variable,
// never a silent fall-back to the default.
func BindEnv(fs *flag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		f.Usage += " (env " + name + ")"
		if v, ok := os.LookupEnv(name); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// NewLogger builds the process logger: JSON for serve/worker, console for dev.
func NewLogger(format string, level zapcore.Level) (*zap.Logger, error) {
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("log format %q: want json or console", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(level)
	cfg.DisableCaller = format == "console"
	return cfg.Build()
}

// sdkLogger adapts zap to the Temporal SDK's key-value logger.
type sdkLogger struct{ s *zap.SugaredLogger }

func (l sdkLogger) Debug(msg string, kv ...any) { l.s.Debugw(msg, kv...) }
func (l sdkLogger) Info(msg string, kv ...any)  { l.s.Debugw(msg, kv...) } // SDK info is chatty
func (l sdkLogger) Warn(msg string, kv ...any)  { l.s.Warnw(msg, kv...) }
func (l sdkLogger) Error(msg string, kv ...any) { l.s.Errorw(msg, kv...) }

var _ sdklog.Logger = sdkLogger{}

// waitTemporalWarnEvery spaces the warnings WaitTemporal logs while it retries.
const waitTemporalWarnEvery = 10 * time.Second

// WaitTemporal dials until Temporal answers or ctx ends, so a worker started alongside a
// booting server does not die on the first refusal. A TLS failure (unknown CA, wrong name,
// refused client certificate) ends it at once with an error saying which flag to look at:
// retrying cannot fix configuration. Other failures are retried, with a warning at the first
// and then every waitTemporalWarnEvery, so a wrong address is not silent either.
func WaitTemporal(ctx context.Context, opts client.Options) (client.Client, error) {
	var last error
	var hint string
	var warned time.Time
	for {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			return c, nil
		}
		if why := tlsFailure(err); why != "" {
			return nil, fmt.Errorf("temporal at %s: %s: %w", opts.HostPort, why, err)
		}
		if last == nil || ctx.Err() == nil {
			last = err // not the attempt the context's end cut short, when there was another
		}
		if h := retryHint(opts, err); h != "" {
			hint = h
		}
		if opts.Logger != nil && time.Since(warned) >= waitTemporalWarnEvery {
			warned = time.Now()
			kv := []any{"address", opts.HostPort, "error", err.Error()}
			if hint != "" {
				kv = append(kv, "hint", hint)
			}
			opts.Logger.Warn("temporal not answering yet; retrying", kv...)
		}
		select {
		case <-ctx.Done():
			if hint != "" {
				return nil, fmt.Errorf("temporal at %s (%s): %w", opts.HostPort, hint, last)
			}
			return nil, fmt.Errorf("temporal at %s: %w", opts.HostPort, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ---------------------------------------------------------------- secrets and keys
// serve, worker and dev read the same secret files and keyrings, and refuse the same
// public placeholders.

func resumeKeysFlags(fs *flag.FlagSet, spec, file *string) {
	fs.StringVar(spec, "resume-keys", "", "resume-seal HMAC keys \"kid:hex,...\" shared by frontends and workers only; the first signs, all verify (prefer --resume-keys-file)")
	fs.StringVar(file, "resume-keys-file", "", "file holding --resume-keys")
}

func signingKeysFlags(fs *flag.FlagSet, spec, file *string) {
	fs.StringVar(spec, "signing-keys", "", "Ed25519 signing keys \"kid:hexseed,...\" (32-byte seeds) shared by frontends and workers: the first signs decision records and export manifests, the public half of all is published (/.well-known/jobgate-signing-keys) and checks them (prefer --signing-keys-file)")
	fs.StringVar(file, "signing-keys-file", "", "file holding --signing-keys")
}

// loadSigningKeys reads the Ed25519 signing keyring as loadKeyring reads the HMAC rings,
// DEV-ONLY placeholders refused alike: a public seed would let anyone sign records and manifests
// that verify. nil, nil when neither spec nor file is given.
func loadSigningKeys(spec, file string, devDeployment bool) (*handle.SigningKeyring, error) {
	return loadRing(spec, file, "signing-keys", devDeployment, handle.ParseSigningKeyring,
		func(k *handle.SigningKeyring) []string { return k.Public().KIDs() })
}

// requireSigningKeys is loadSigningKeys into *dst, unless *dst is set (in code) already, and
// refuses a configuration that names no keys, as requireKeyring does; why says what for.
func requireSigningKeys(dst **handle.SigningKeyring, spec, file string, devDeployment bool, why string) error {
	if *dst != nil {
		return nil
	}
	k, err := loadSigningKeys(spec, file, devDeployment)
	if err != nil {
		return err
	}
	if k == nil {
		return fmt.Errorf("--signing-keys or --signing-keys-file is required (%s; make one with `jobgate keygen signing-keys`)", why)
	}
	*dst = k
	return nil
}

// loadKeyring reads an HMAC keyring (resume or handle keys) with loadRing.
func loadKeyring(spec, file, flagName string, devDeployment bool) (*handle.Keyring, error) {
	return loadRing(spec, file, flagName, devDeployment, handle.ParseKeyring, (*handle.Keyring).KIDs)
}

// loadRing reads a keyring from spec or file (the file wins), parsed by parse and named by the
// flag it came from for errors; one reader for every ring, so the HMAC and the signing keys are
// read, and their placeholders refused, the same way. It returns the zero ring (nil), nil when
// neither is given. A ring with a key marked DEV-ONLY (a public placeholder: the marker is in the
// key ID, which kids lists and which survives a mounted file's lost name, or in the file's name)
// is refused unless devDeployment: whoever has the repository has those keys, and every key of a
// ring verifies.
func loadRing[K any](spec, file, flagName string, devDeployment bool, parse func(string) (K, error), kids func(K) []string) (K, error) {
	var none K
	what := "--" + flagName
	if file != "" {
		what += "-file"
		b, err := readSecretFile(file, what)
		if err != nil {
			return none, err
		}
		spec = string(b)
	}
	if spec == "" {
		return none, nil
	}
	k, err := parse(spec)
	if err != nil {
		return none, fmt.Errorf("%s: %w", what, err)
	}
	if err := refuseDevOnly(devDeployment, what, file, []byte(strings.Join(kids(k), ","))); err != nil {
		return none, err
	}
	return k, nil
}

// DevOnlyMarker marks a public placeholder secret (cmd/deploy/secrets/DEV-ONLY-*): in the file's
// name, and in its content, since a mounted secret file loses its name (/run/secrets/...).
const DevOnlyMarker = "DEV-ONLY"

// refuseDevOnly refuses a secret marked DEV-ONLY (by the name of its file or its content)
// unless this is a dev deployment: the placeholders are public, so anyone could mint tokens or
// forge handles for a deployment that kept them.
func refuseDevOnly(devDeployment bool, what, path string, secret []byte) error {
	if devDeployment {
		return nil
	}
	if (path != "" && strings.Contains(filepath.Base(path), DevOnlyMarker)) || bytes.Contains(secret, []byte(DevOnlyMarker)) {
		return fmt.Errorf("%s: the secret is a public %s placeholder; give it one of your own (cmd/deploy/secrets/README.md says how), "+
			"or pass --dev-deployment (JOBGATE_DEV_DEPLOYMENT=true) if this is a dev deployment", what, DevOnlyMarker)
	}
	return nil
}

func readSecretFile(path, what string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("%s: no file given", what)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return []byte(strings.TrimSpace(string(b))), nil
}

// requireKeyring is loadKeyring into *dst, unless *dst is set (in code) already, and refuses a
// configuration that names no keys; why says what the keys are needed for.
func requireKeyring(dst **handle.Keyring, spec, file, flagName string, devDeployment bool, why string) error {
	if *dst != nil {
		return nil
	}
	k, err := loadKeyring(spec, file, flagName, devDeployment)
	if err != nil {
		return err
	}
	if k == nil {
		return fmt.Errorf("--%s or --%s-file is required (%s; make one with `jobgate keygen %s`)", flagName, flagName, why, flagName)
	}
	*dst = k
	return nil
}
