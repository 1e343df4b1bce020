package devtemporal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/cmd/devtemporal/devpki"
)

// testPKI is a CA with a frontend certificate for 127.0.0.1 and a client certificate.
type testPKI struct {
	ca             *devpki.CA
	server, client devpki.Pair
}

func newTestPKI(t *testing.T, name string) testPKI {
	t.Helper()
	ca, err := devpki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := ca.Client("jobgate-test-client")
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{ca: ca, server: srv, client: cl}
}

func (p testPKI) mTLSOptions() *TLSOptions {
	return &TLSOptions{CertPEM: p.server.CertPEM, KeyPEM: p.server.KeyPEM, RootCAPEM: p.ca.CertPEM,
		ClientCAPEM: p.ca.CertPEM, ClientCertPEM: p.client.CertPEM, ClientKeyPEM: p.client.KeyPEM}
}

// dialTLS dials once with tc (nil: plaintext) and a short deadline, so a refused handshake
// returns its error instead of retrying.
func dialTLS(s *Server, tc *tls.Config) (client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.DialContext(ctx, client.Options{
		HostPort: s.FrontendHostPort(), Namespace: s.Namespace(),
		Logger:            sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		ConnectionOptions: client.ConnectionOptions{TLS: tc},
	})
}

func pool(pem []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}

// TestMutualTLSFrontend: with Options.TLS the frontend speaks only mutual TLS. The server's
// own clients (registration, system worker, Web UI) get through; a client with the right CA and
// certificate runs a workflow; plaintext, a wrong CA and a missing client certificate fail.
func TestMutualTLSFrontend(t *testing.T) {
	p := newTestPKI(t, "devtemporal test CA")
	s := startServer(t, Options{SearchAttributes: jobAttrs, TLS: p.mTLSOptions()})

	pair, err := tls.X509KeyPair(p.client.CertPEM, p.client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dialTLS(s, &tls.Config{RootCAs: pool(p.ca.CertPEM), Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatalf("mTLS dial: %v", err)
	}
	t.Cleanup(c.Close)
	runEcho(t, c, "wf-tls", temporal.NewSearchAttributes(jobTenant.ValueSet("acme")))
	waitListed(t, c, s.Namespace(), "JobTenant = 'acme'", "wf-tls")

	// The Web UI proxies to the TLS frontend with the server's own client certificate.
	body, _ := httpGet(t, s.UIURL()+"/api/v1/namespaces/default/workflows")
	if !strings.Contains(body, "wf-tls") {
		t.Fatalf("UI workflow list over mTLS: %.300s", body)
	}

	other := newTestPKI(t, "some other CA")
	for _, tc := range []struct {
		name string
		tls  *tls.Config
		want []string // any of
	}{
		{"plaintext", nil, []string{"server preface"}},
		{"wrong CA", &tls.Config{RootCAs: pool(other.ca.CertPEM), Certificates: []tls.Certificate{pair}},
			[]string{"x509: certificate signed by unknown authority"}},
		// Under TLS 1.3 the server's alert can be lost behind the client's first write.
		{"no client cert", &tls.Config{RootCAs: pool(p.ca.CertPEM)},
			[]string{"tls: certificate required", "broken pipe", "connection reset"}},
	} {
		c, err := dialTLS(s, tc.tls)
		if err == nil {
			c.Close()
			t.Errorf("%s: dial succeeded against a mutual-TLS frontend", tc.name)
			continue
		}
		found := false
		for _, w := range tc.want {
			found = found || strings.Contains(err.Error(), w)
		}
		if !found {
			t.Errorf("%s: err = %v, want it to contain one of %q", tc.name, err, tc.want)
		}
	}
}

func TestTLSOptionsValidated(t *testing.T) {
	p := newTestPKI(t, "ca")
	for _, tc := range []struct {
		name string
		opts TLSOptions
		want string
	}{
		{"no cert", TLSOptions{RootCAPEM: p.ca.CertPEM}, "needs CertPEM and KeyPEM"},
		{"key mismatch", TLSOptions{CertPEM: p.server.CertPEM, KeyPEM: p.client.KeyPEM, RootCAPEM: p.ca.CertPEM}, "Options.TLS.CertPEM/KeyPEM"},
		{"no root", TLSOptions{CertPEM: p.server.CertPEM, KeyPEM: p.server.KeyPEM}, "RootCAPEM holds no PEM"},
		{"client cert without CA", TLSOptions{CertPEM: p.server.CertPEM, KeyPEM: p.server.KeyPEM, RootCAPEM: p.ca.CertPEM,
			ClientCertPEM: p.client.CertPEM}, "only used with ClientCAPEM"},
		{"mTLS without client cert", TLSOptions{CertPEM: p.server.CertPEM, KeyPEM: p.server.KeyPEM, RootCAPEM: p.ca.CertPEM,
			ClientCAPEM: p.ca.CertPEM}, "required with ClientCAPEM"},
	} {
		o := Options{TLS: &tc.opts}
		if err := o.normalize(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
