package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jobgate/jobgate/cmd/devtemporal"
	"github.com/jobgate/jobgate/cmd/devtemporal/devpki"
)

type pkiFiles struct {
	dir, ca, cert, key, otherCert, otherKey string
	caPEM                                   []byte
	server                                  devpki.Pair
}

func writePKI(t *testing.T) pkiFiles {
	t.Helper()
	f := pkiFiles{dir: t.TempDir()}
	ca, err := devpki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	f.caPEM = ca.CertPEM
	if f.ca, err = ca.WriteFile(f.dir, "ca"); err != nil {
		t.Fatal(err)
	}
	if f.server, err = ca.Server("127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		cert, key *string
	}{{"client", &f.cert, &f.key}, {"other", &f.otherCert, &f.otherKey}} {
		pair, err := ca.Client(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if *c.cert, *c.key, err = pair.WriteFiles(f.dir, c.name); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTemporalTLSStartupErrors: every misconfiguration fails options() (so serve, worker and
// setup fail start-up) with an error naming the flag and its variable.
func TestTemporalTLSStartupErrors(t *testing.T) {
	f := writePKI(t)
	garbage := write(t, f.dir, "garbage.pem", "not a certificate\n")
	badBlock := write(t, f.dir, "bad-block.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	blank := write(t, f.dir, "blank", " \n")
	certPEM, _ := os.ReadFile(f.cert)
	keyPEM, _ := os.ReadFile(f.key)
	for _, tc := range []struct {
		name string
		tls  TemporalTLS
		want []string
	}{
		{"missing CA file", TemporalTLS{CAFile: filepath.Join(f.dir, "nope.pem")},
			[]string{"--temporal-tls-ca-file (JOBGATE_TEMPORAL_TLS_CA_FILE)", "no such file"}},
		{"CA file without PEM", TemporalTLS{CAFile: garbage}, []string{"--temporal-tls-ca-file", "holds no PEM certificate"}},
		{"CA file with a broken certificate", TemporalTLS{CAFile: badBlock}, []string{"--temporal-tls-ca-file", "certificate 1"}},
		{"cert without key", TemporalTLS{CertFile: f.cert},
			[]string{"--temporal-tls-cert-file (JOBGATE_TEMPORAL_TLS_CERT_FILE) is set without --temporal-tls-key-file"}},
		{"key without cert", TemporalTLS{KeyFile: f.key},
			[]string{"--temporal-tls-key-file (JOBGATE_TEMPORAL_TLS_KEY_FILE) is set without --temporal-tls-cert-file"}},
		{"missing cert file", TemporalTLS{CertFile: filepath.Join(f.dir, "nope.crt"), KeyFile: f.key},
			[]string{"--temporal-tls-cert-file", "no such file"}},
		{"cert file not PEM", TemporalTLS{CertFile: garbage, KeyFile: f.key}, []string{"--temporal-tls-cert-file", "failed to find any PEM data"}},
		{"key file not PEM", TemporalTLS{CertFile: f.cert, KeyFile: garbage}, []string{"--temporal-tls-key-file", "failed to find any PEM data"}},
		{"key of another cert", TemporalTLS{CertFile: f.cert, KeyFile: f.otherKey}, []string{"--temporal-tls-cert-file", "private key does not match"}},
		{"cert and key swapped", TemporalTLS{CertFile: write(t, f.dir, "k.pem", string(keyPEM)), KeyFile: write(t, f.dir, "c.pem", string(certPEM))},
			[]string{"--temporal-tls-cert-file"}},
		{"expired client cert", TemporalTLS{CertFile: expiredCert(t, f.dir), KeyFile: filepath.Join(f.dir, "expired.key")},
			[]string{"--temporal-tls-cert-file", "expired at"}},
		{"both API key flags", TemporalTLS{APIKey: "k", APIKeyFile: blank}, []string{"set one of --temporal-api-key (JOBGATE_TEMPORAL_API_KEY) and --temporal-api-key-file"}},
		{"blank API key file", TemporalTLS{APIKeyFile: blank}, []string{"--temporal-api-key-file (JOBGATE_TEMPORAL_API_KEY_FILE)", "blank"}},
		{"missing API key file", TemporalTLS{APIKeyFile: filepath.Join(f.dir, "nope")}, []string{"--temporal-api-key-file", "no such file"}},
		{"blank API key", TemporalTLS{APIKey: "  "}, []string{"--temporal-api-key", "blank"}},
	} {
		_, err := TemporalConfig{Address: "127.0.0.1:7233", TLS: tc.tls}.Options(zap.NewNop())
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, w)
			}
		}
	}
}

// expiredCert writes a client certificate that expired an hour ago (expired.crt, and its key
// expired.key) and returns its path.
func expiredCert(t *testing.T, dir string) string {
	t.Helper()
	ca, err := devpki.NewCA("expired")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.ClientValid("old", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := pair.WriteFiles(dir, "expired")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTemporalTLSDefaultsAndImplications: no flag keeps today's plaintext client; an API key
// alone means TLS with the system roots; the flags and their JOBGATE_* variables reach the
// options of serve, worker and setup.
func TestTemporalTLSDefaultsAndImplications(t *testing.T) {
	f := writePKI(t)
	opts, err := TemporalConfig{Address: "x:1"}.Options(zap.NewNop())
	if err != nil || opts.ConnectionOptions.TLS != nil || opts.Credentials != nil {
		t.Fatalf("default: TLS %v, credentials %v, err %v", opts.ConnectionOptions.TLS, opts.Credentials, err)
	}
	keyFile := write(t, f.dir, "apikey", "  secret-key\n")
	opts, err = TemporalConfig{Address: "x:1", TLS: TemporalTLS{APIKeyFile: keyFile}}.Options(zap.NewNop())
	if err != nil || opts.ConnectionOptions.TLS == nil || opts.ConnectionOptions.TLS.RootCAs != nil || opts.Credentials == nil {
		t.Fatalf("API key: TLS %+v, credentials %v, err %v", opts.ConnectionOptions.TLS, opts.Credentials, err)
	}
	opts, err = TemporalConfig{Address: "x:1", TLS: TemporalTLS{Enabled: true}}.Options(zap.NewNop())
	if err != nil || opts.ConnectionOptions.TLS == nil || opts.Credentials != nil {
		t.Fatalf("--temporal-tls: TLS %+v, credentials %v, err %v", opts.ConnectionOptions.TLS, opts.Credentials, err)
	}

	env := map[string]string{
		"JOBGATE_TEMPORAL_TLS_CA_FILE":     f.ca,
		"JOBGATE_TEMPORAL_TLS_CERT_FILE":   f.cert,
		"JOBGATE_TEMPORAL_TLS_KEY_FILE":    f.key,
		"JOBGATE_TEMPORAL_TLS_SERVER_NAME": "temporal.internal",
		"JOBGATE_TEMPORAL_API_KEY_FILE":    keyFile,
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var serve ServeConfig
	var worker WorkerConfig
	var setup SetupConfig
	for _, c := range []struct {
		name  string
		flags func(*flag.FlagSet)
		tls   *TemporalTLS
	}{{"serve", serve.Flags, &serve.Temporal.TLS}, {"worker", worker.Flags, &worker.Temporal.TLS}, {"setup", setup.Flags, &setup.TLS}} {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.flags(fs)
		if err := BindEnv(fs); err != nil {
			t.Fatal(err)
		}
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		want := TemporalTLS{CAFile: f.ca, CertFile: f.cert, KeyFile: f.key, ServerName: "temporal.internal", APIKeyFile: keyFile}
		if *c.tls != want {
			t.Fatalf("%s: %+v, want %+v", c.name, *c.tls, want)
		}
		opts, err := TemporalConfig{Address: "x:1", TLS: *c.tls}.Options(zap.NewNop())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		tc := opts.ConnectionOptions.TLS
		if tc.ServerName != "temporal.internal" || tc.RootCAs == nil || tc.GetClientCertificate == nil || opts.Credentials == nil {
			t.Fatalf("%s: TLS %+v", c.name, tc)
		}
	}
}

// TestTemporalTLSReload: a rotated client certificate and API key are used without a restart;
// a half-written rotation keeps the previous ones.
func TestTemporalTLSReload(t *testing.T) {
	f := writePKI(t)
	certFile, keyFile := filepath.Join(f.dir, "live.crt"), filepath.Join(f.dir, "live.key")
	cp := func(src, dst string, at time.Time) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		// An explicit mtime: two writes within the file system's time granularity still differ.
		if err := os.Chtimes(dst, at, at); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Hour)
	cp(f.cert, certFile, t0)
	cp(f.key, keyFile, t0)
	opts, err := TemporalConfig{Address: "x:1", TLS: TemporalTLS{CertFile: certFile, KeyFile: keyFile}}.Options(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	get := opts.ConnectionOptions.TLS.GetClientCertificate
	leafOf := func() []byte {
		t.Helper()
		c, err := get(&tls.CertificateRequestInfo{})
		if err != nil || c == nil {
			t.Fatalf("GetClientCertificate: %v, %v", c, err)
		}
		return c.Certificate[0]
	}
	der := func(path string) []byte {
		pair, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".crt")+".key")
		if err != nil {
			t.Fatal(err)
		}
		return pair.Certificate[0]
	}
	if !bytes.Equal(leafOf(), der(f.cert)) {
		t.Fatal("first certificate not served")
	}
	// Half a rotation: the new certificate, the old key. The old pair stays.
	cp(f.otherCert, certFile, t0.Add(time.Minute))
	if !bytes.Equal(leafOf(), der(f.cert)) {
		t.Fatal("a mismatched pair replaced the working one")
	}
	cp(f.otherKey, keyFile, t0.Add(time.Minute))
	if !bytes.Equal(leafOf(), der(f.otherCert)) {
		t.Fatal("rotated certificate not served")
	}

	kf := write(t, f.dir, "key", "one\n")
	clock := t0
	r := &reloadingKey{file: kf, log: zap.NewNop(), now: func() time.Time { return clock }}
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	// next rotates the file to content, then asks for the key after wait on r's clock.
	next := func(content string, at time.Time, wait time.Duration) string {
		t.Helper()
		write(t, f.dir, "key", content)
		if err := os.Chtimes(kf, at, at); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(wait)
		k, err := r.get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if k := next("", t0.Add(time.Minute), apiKeyRecheck); k != "one" {
		t.Fatalf("blank rotation: key %q", k)
	}
	// Asked for on every Temporal call, the file is looked at once per apiKeyRecheck only.
	if k := next("two\n", t0.Add(2*time.Minute), apiKeyRecheck/2); k != "one" {
		t.Fatalf("key file re-read within %s of the last look: key %q", apiKeyRecheck, k)
	}
	clock = clock.Add(apiKeyRecheck / 2)
	if k, _ := r.get(context.Background()); k != "two" {
		t.Fatalf("rotated key %q", k)
	}
}

// TestRereadKeepsPreviousOnFailure checks the shared reload step: a failed read keeps value and
// stamp and warns with failMsg (and the error); a good one replaces both and logs okMsg.
func TestRereadKeepsPreviousOnFailure(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	val, stamp := "old", 1
	file := zap.String("file", "/k")
	bad := func() (string, int, error) { return "", 2, errors.New("the file is blank") }
	if got := reread(log, bad, &val, &stamp, file, "fail", "ok"); got != "old" || val != "old" || stamp != 1 {
		t.Fatalf("failed read: got %q, val %q, stamp %d; want the previous value and stamp", got, val, stamp)
	}
	good := func() (string, int, error) { return "new", 3, nil }
	if got := reread(log, good, &val, &stamp, file, "fail", "ok"); got != "new" || val != "new" || stamp != 3 {
		t.Fatalf("good read: got %q, val %q, stamp %d; want new, new, 3", got, val, stamp)
	}
	var seen []string
	for _, e := range logs.All() {
		fields := e.ContextMap()
		seen = append(seen, e.Level.String()+" "+e.Message+" "+fmt.Sprint(fields["file"], " ", fields["error"]))
	}
	want := []string{"warn fail /k the file is blank", "info ok /k <nil>"}
	if !slices.Equal(seen, want) {
		t.Fatalf("logs %q, want %q", seen, want)
	}
}

func TestTLSFailureClassified(t *testing.T) {
	for msg, want := range map[string]string{
		`connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`: "--temporal-tls-ca-file",
		`transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate is valid for a.example, not b.example`:                  "--temporal-tls-server-name",
		`connection error: desc = "error reading server preface: remote error: tls: certificate required"`:                                                        "--temporal-tls-cert-file",
		`transport: authentication handshake failed: tls: first record does not look like a TLS handshake`:                                                        "does not speak TLS",
		`transport: authentication handshake failed: EOF`:                                                                                                         "",
		`connection error: desc = "transport: Error while dialing: connection refused"`:                                                                           "",
		`write tcp 127.0.0.1:41610->127.0.0.1:36009: write: broken pipe`:                                                                                          "",
		`context deadline exceeded`: "",
		`transport: authentication handshake failed: x509: certificate has expired or is`: "expired",
	} {
		got := tlsFailure(errors.New(msg))
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("tlsFailure(%q) = %q, want it to contain %q", msg, got, want)
		}
	}
}

// TestTemporalServerTLSOnly runs setup against a TLS-only (not mutual) embedded server: the CA
// and an API key (implying TLS; the dev server ignores the key) connect; a plaintext client
// fails with a hint to turn TLS on rather than a bare "EOF".
func TestTemporalServerTLSOnly(t *testing.T) {
	f := writePKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devtemporal.Start(ctx, devtemporal.Options{UIPort: devtemporal.UIDisabled, SearchAttributes: SearchAttributes(),
		TLS: &devtemporal.TLSOptions{CertPEM: f.server.CertPEM, KeyPEM: f.server.KeyPEM, RootCAPEM: f.caPEM}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	var out bytes.Buffer
	err = Setup(ctx, SetupConfig{Address: srv.FrontendHostPort(), Namespace: srv.Namespace(), Timeout: time.Minute,
		TLS: TemporalTLS{CAFile: f.ca, ServerName: "localhost", APIKeyFile: write(t, f.dir, "apikey", "k")}}, zap.NewNop(), &out)
	if err != nil || !strings.Contains(out.String(), "ready for jobgate") {
		t.Fatalf("setup over TLS: %v\n%s", err, out.String())
	}
	err = Setup(ctx, SetupConfig{Address: srv.FrontendHostPort(), Namespace: srv.Namespace(), Timeout: 2 * time.Second},
		zap.NewNop(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "if Temporal requires TLS, set --temporal-tls") {
		t.Fatalf("plaintext against TLS: %v", err)
	}
}

// FuzzParseCABundle: any bytes in --temporal-tls-ca-file give a pool with at least one
// certificate or an error naming the flag, never a panic.
func FuzzParseCABundle(f *testing.F) {
	ca, err := devpki.NewCA("fuzz seed")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ca.CertPEM)
	f.Add(append(append([]byte("# bundle\n"), ca.CertPEM...), ca.CertPEM...))
	f.Fuzz(func(t *testing.T, b []byte) {
		pool, err := parseCABundle(b, "ca.pem")
		if err != nil {
			if !strings.Contains(err.Error(), "--temporal-tls-ca-file") {
				t.Fatalf("error does not name the flag: %v", err)
			}
			return
		}
		if pool == nil || pool.Equal(x509.NewCertPool()) {
			t.Fatal("accepted a bundle without certificates")
		}
	})
}
