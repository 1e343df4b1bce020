package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
)

// TemporalTLS says how jobgate verifies Temporal's frontend and authenticates to it: TLS with
// a CA, a client certificate for mutual TLS, and an API key (Temporal Cloud). The zero value
// is plaintext without credentials, as the dev stack uses.
//
// Any of the fields turns TLS on: there is no way to send a client certificate or an API key
// over plaintext. An API key is a bearer secret and Temporal Cloud only accepts it over TLS, so
// a key alone means TLS verified by the system's root CAs (what the SDK does too).
//
// The client certificate and the API key are re-read when their files change, so a rotated
// certificate or key is used from the next connection (certificate) or call (API key) on,
// without a restart. The CA file is read once at start-up: trust both CAs in it while rotating.
type TemporalTLS struct {
	// Enabled turns TLS on with the system's root CAs even without the fields below (e.g. a
	// server with a publicly trusted certificate). Defaults to false: plaintext, unless another
	// field is set.
	Enabled bool
	// CAFile is a PEM bundle of CAs that verify the frontend's certificate. Defaults to empty:
	// the system's root CAs.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate (chain) and private key presented to
	// a frontend that requires mutual TLS. Both or neither. Defaults to none.
	CertFile, KeyFile string
	// ServerName is the name verified in the frontend's certificate (and sent as SNI).
	// Defaults to empty: the host of the Temporal address.
	ServerName string
	// APIKeyFile holds the Temporal Cloud API key (surrounding white space is ignored). Defaults
	// to none. Prefer it to APIKey, which sits in the environment or the process listing.
	APIKeyFile string
	// APIKey is the API key itself. Defaults to none. At most one of APIKey and APIKeyFile.
	APIKey string
}

// Flags registers the TLS and credential flags (serve, worker and setup share them).
func (t *TemporalTLS) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&t.Enabled, "temporal-tls", false, "connect to Temporal with TLS even without the other --temporal-tls-* flags (system root CAs); any of them, or an API key, implies TLS")
	fs.StringVar(&t.CAFile, "temporal-tls-ca-file", "", "PEM file of the CAs that verify Temporal's certificate (default: the system's root CAs)")
	fs.StringVar(&t.CertFile, "temporal-tls-cert-file", "", "PEM client certificate for mutual TLS to Temporal (with --temporal-tls-key-file); re-read when it changes")
	fs.StringVar(&t.KeyFile, "temporal-tls-key-file", "", "PEM private key of --temporal-tls-cert-file; re-read when it changes")
	fs.StringVar(&t.ServerName, "temporal-tls-server-name", "", "name to verify in Temporal's certificate (default: the host of --temporal-address)")
	fs.StringVar(&t.APIKeyFile, "temporal-api-key-file", "", "file holding the Temporal Cloud API key (implies TLS); re-read when it changes")
	fs.StringVar(&t.APIKey, "temporal-api-key", "", "Temporal Cloud API key (implies TLS); prefer --temporal-api-key-file, which keeps it out of process listings")
}

// on reports whether any setting asks for TLS.
func (t TemporalTLS) on() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" ||
		t.APIKeyFile != "" || t.APIKey != ""
}

// flagRef names a flag and its variable in errors, so the operator finds it whichever way it was set.
func flagRef(name string) string { return "--" + name + " (" + envName(name) + ")" }

// apply sets opts' TLS configuration and credentials. Every file is read now, so a missing or
// unreadable file, a PEM that does not parse, a certificate without its key (or a key without
// its certificate) or an expired client certificate fails start-up with the flag's name.
func (t TemporalTLS) apply(opts *client.Options, log *zap.Logger) error {
	if !t.on() {
		return nil
	}
	tc := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pool, err := loadCAFile(t.CAFile)
		if err != nil {
			return err
		}
		tc.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return fmt.Errorf("%s is set without %s: a client certificate needs its private key", flagRef("temporal-tls-cert-file"), flagRef("temporal-tls-key-file"))
	case t.KeyFile != "" && t.CertFile == "":
		return fmt.Errorf("%s is set without %s: a private key needs its client certificate", flagRef("temporal-tls-key-file"), flagRef("temporal-tls-cert-file"))
	case t.CertFile != "":
		r := &reloadingPair{certFile: t.CertFile, keyFile: t.KeyFile, log: log}
		if err := r.load(); err != nil {
			return err
		}
		tc.GetClientCertificate = r.get
	}
	opts.ConnectionOptions.TLS = tc
	switch {
	case t.APIKey != "" && t.APIKeyFile != "":
		return fmt.Errorf("set one of %s and %s", flagRef("temporal-api-key"), flagRef("temporal-api-key-file"))
	case t.APIKey != "":
		key := strings.TrimSpace(t.APIKey)
		if key == "" {
			return fmt.Errorf("%s is blank", flagRef("temporal-api-key"))
		}
		opts.Credentials = client.NewAPIKeyStaticCredentials(key)
	case t.APIKeyFile != "":
		r := &reloadingKey{file: t.APIKeyFile, log: log}
		if err := r.load(); err != nil {
			return err
		}
		opts.Credentials = client.NewAPIKeyDynamicCredentials(r.get)
	}
	return nil
}

// loadCAFile reads a PEM bundle; every CERTIFICATE block must parse and there must be one.
func loadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagRef("temporal-tls-ca-file"), err)
	}
	return parseCABundle(b, path)
}

// parseCABundle parses the CA file's bytes (path only names it in errors). Blocks other than
// CERTIFICATE (comments, a stray key) are skipped, as crypto/x509's AppendCertsFromPEM does.
func parseCABundle(b []byte, path string) (*x509.CertPool, error) {
	what := flagRef("temporal-tls-ca-file")
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s %q: certificate %d: %w", what, path, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s %q holds no PEM certificate (want -----BEGIN CERTIFICATE-----)", what, path)
	}
	return pool, nil
}

// fileStamp tells a changed file from an unchanged one without reading it.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// reloadingPair serves the client certificate, re-reading its files on a handshake after they
// changed. A pair that fails to load then (e.g. the certificate written but not yet its key)
// keeps the previous one and is tried again on the next handshake.
type reloadingPair struct {
	certFile, keyFile string
	log               *zap.Logger

	mu    sync.Mutex
	stamp [2]fileStamp
	pair  *tls.Certificate
}

func (r *reloadingPair) read() (*tls.Certificate, [2]fileStamp, error) {
	var st [2]fileStamp
	var err error
	for i, f := range []string{r.certFile, r.keyFile} {
		if st[i], err = stampOf(f); err != nil {
			return nil, st, err
		}
	}
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, st, err
	}
	return &pair, st, nil
}

// load is the start-up read: any error is fatal and names the flags.
func (r *reloadingPair) load() error {
	what := flagRef("temporal-tls-cert-file") + " and " + flagRef("temporal-tls-key-file")
	pair, st, err := r.read()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if leaf := pair.Leaf; leaf != nil && time.Now().After(leaf.NotAfter) {
		return fmt.Errorf("%s: client certificate %q expired at %s", what, leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	r.pair, r.stamp = pair, st
	return nil
}

func (r *reloadingPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st0, err0 := stampOf(r.certFile)
	st1, err1 := stampOf(r.keyFile)
	if err0 != nil || err1 != nil || [2]fileStamp{st0, st1} == r.stamp {
		return r.pair, nil // unchanged, or mid-rotation: keep what we have
	}
	return reread(r.log, r.read, &r.pair, &r.stamp, zap.String("cert_file", r.certFile),
		"temporal client certificate changed but does not load; keeping the previous one",
		"temporal client certificate reloaded"), nil
}

// reread re-reads a credential whose file changed. A good read replaces *val and *stamp and is
// logged as okMsg; a failed one is logged as failMsg and keeps the previous value, so a
// half-written or broken rotation never takes working credentials away. It returns the value
// in use afterwards. Shared by the certificate pair and the API key so both reload alike.
func reread[T, S any](log *zap.Logger, read func() (T, S, error), val *T, stamp *S, file zap.Field, failMsg, okMsg string) T {
	v, st, err := read()
	if err != nil {
		log.Warn(failMsg, file, zap.Error(err))
		return *val
	}
	*val, *stamp = v, st
	log.Info(okMsg, file)
	return v
}

// apiKeyRecheck is how often the API key file is looked at for a change. The key is asked for
// on every Temporal call, so it is not stat'ed per call; a rotated key is in use within this.
const apiKeyRecheck = time.Second

// reloadingKey serves the API key from its file, re-read when the file changes (looked at no
// more than once per apiKeyRecheck); a changed file that is blank or unreadable keeps the
// previous key.
type reloadingKey struct {
	file string
	log  *zap.Logger
	now  func() time.Time // nil: time.Now

	mu      sync.Mutex
	stamp   fileStamp
	key     string
	checked time.Time // when the file was last looked at
}

func (r *reloadingKey) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

func (r *reloadingKey) read() (string, fileStamp, error) {
	st, err := stampOf(r.file)
	if err != nil {
		return "", st, err
	}
	b, err := os.ReadFile(r.file)
	if err != nil {
		return "", st, err
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", st, errors.New("the file is blank")
	}
	return key, st, nil
}

func (r *reloadingKey) load() error {
	key, st, err := r.read()
	if err != nil {
		return fmt.Errorf("%s: %w", flagRef("temporal-api-key-file"), err)
	}
	r.key, r.stamp, r.checked = key, st, r.clock()
	return nil
}

func (r *reloadingKey) get(context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	if now.Sub(r.checked) < apiKeyRecheck {
		return r.key, nil
	}
	r.checked = now
	if st, err := stampOf(r.file); err != nil || st == r.stamp {
		return r.key, nil
	}
	return reread(r.log, r.read, &r.key, &r.stamp, zap.String("file", r.file),
		"temporal API key file changed but does not load; keeping the previous key",
		"temporal API key reloaded"), nil
}

// tlsFailure explains a dial error that is a TLS failure (crypto/tls and crypto/x509 errors
// reach us as text inside a gRPC status), or returns "" for anything else. Such errors are
// configuration errors and do not heal by retrying, so start-up fails with them at once.
// "authentication handshake failed: EOF" and the like (a connection cut mid-handshake) are
// not: they may be a server restarting.
func tlsFailure(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "x509: certificate signed by unknown authority"):
		return "TLS: Temporal's certificate is not signed by a CA in " + flagRef("temporal-tls-ca-file") + " (or by a system root CA when it is not set)"
	case strings.Contains(msg, "x509: certificate is valid for"), strings.Contains(msg, "x509: cannot validate certificate"):
		return "TLS: Temporal's certificate does not name the host dialed; set " + flagRef("temporal-tls-server-name") + " to a name it holds"
	case strings.Contains(msg, "x509: certificate has expired"):
		return "TLS: Temporal's certificate has expired or is not yet valid"
	case strings.Contains(msg, "tls: certificate required"), strings.Contains(msg, "tls: bad certificate"),
		strings.Contains(msg, "tls: unknown certificate authority"), strings.Contains(msg, "tls: expired certificate"):
		return "TLS: Temporal refused the client certificate: it requires mutual TLS with a certificate (" +
			flagRef("temporal-tls-cert-file") + ", " + flagRef("temporal-tls-key-file") + ") signed by a CA it trusts"
	case strings.Contains(msg, "tls: handshake failure"):
		return "TLS: Temporal refused the handshake (under mutual TLS: a missing or untrusted client certificate, " +
			flagRef("temporal-tls-cert-file") + ")"
	case strings.Contains(msg, "tls: first record does not look like a TLS handshake"):
		return "TLS: Temporal at this address does not speak TLS; drop the --temporal-tls* and API key flags, or fix --temporal-address"
	case strings.Contains(msg, "x509: "), strings.Contains(msg, "tls: "):
		return "TLS handshake with Temporal failed"
	}
	return ""
}

// retryHint is added to retry warnings (and the final error) for failures that are likely
// TLS configuration but do not say so: a plaintext client gets no HTTP/2 preface from a
// TLS-only server, and under TLS 1.3 a server refusing a client without a certificate may just
// close the connection before its alert is read.
func retryHint(opts client.Options, err error) string {
	msg := err.Error()
	tc := opts.ConnectionOptions.TLS
	switch {
	case tc == nil && (strings.Contains(msg, "server preface") || cutMidHandshake(msg)):
		return "the server closed the connection: if Temporal requires TLS, set " + flagRef("temporal-tls") + " or " + flagRef("temporal-tls-ca-file")
	case tc != nil && tc.GetClientCertificate == nil && len(tc.Certificates) == 0 && cutMidHandshake(msg):
		return "the server closed the connection: if Temporal requires mutual TLS, set " + flagRef("temporal-tls-cert-file") +
			" and " + flagRef("temporal-tls-key-file")
	}
	return ""
}

// cutMidHandshake reports a connection closed under us, which is how a refused client
// certificate can look under TLS 1.3 (the alert lost behind our first write).
func cutMidHandshake(msg string) bool {
	return strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "server preface: EOF")
}

// probeTLS dials Temporal once more or less (serve's own client is lazy), so serve fails
// start-up on a TLS misconfiguration instead of answering /readyz 503 for ever. Any other
// error (Temporal down) is left to /readyz, as before, except a connection cut mid-handshake,
// which is redialled for a few seconds: under TLS 1.3 that is often a refused client
// certificate whose alert the next connection reads. Each try is a fresh connection, not the
// lazy client's, which would wait out gRPC's reconnect backoff.
func probeTLS(ctx context.Context, opts client.Options) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			c.Close()
			return nil
		}
		if why := tlsFailure(err); why != "" {
			return fmt.Errorf("temporal at %s: %s: %w", opts.HostPort, why, err)
		}
		if !cutMidHandshake(err.Error()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}
