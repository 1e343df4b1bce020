package devtemporal

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"

	"go.temporal.io/server/common/config"
)

// validate checks every PEM up front, so a bad option fails Start with the field's name
// rather than as a handshake error from the server's internals. A nil *TLSOptions is valid.
func (t *TLSOptions) validate() error {
	if t == nil {
		return nil
	}
	if len(t.CertPEM) == 0 || len(t.KeyPEM) == 0 {
		return errors.New("devtemporal: Options.TLS needs CertPEM and KeyPEM")
	}
	if _, err := tls.X509KeyPair(t.CertPEM, t.KeyPEM); err != nil {
		return fmt.Errorf("devtemporal: Options.TLS.CertPEM/KeyPEM: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(t.RootCAPEM) {
		return errors.New("devtemporal: Options.TLS.RootCAPEM holds no PEM certificate")
	}
	if len(t.ClientCAPEM) == 0 {
		if len(t.ClientCertPEM) != 0 || len(t.ClientKeyPEM) != 0 {
			return errors.New("devtemporal: Options.TLS.ClientCertPEM/ClientKeyPEM are only used with ClientCAPEM (mutual TLS)")
		}
		return nil
	}
	if !x509.NewCertPool().AppendCertsFromPEM(t.ClientCAPEM) {
		return errors.New("devtemporal: Options.TLS.ClientCAPEM holds no PEM certificate")
	}
	if _, err := tls.X509KeyPair(t.ClientCertPEM, t.ClientKeyPEM); err != nil {
		return fmt.Errorf("devtemporal: Options.TLS.ClientCertPEM/ClientKeyPEM (required with ClientCAPEM): %w", err)
	}
	return nil
}

// serverTLS is the server's TLS configuration: the frontend listener, and the system
// worker's client to it. Internode traffic stays plaintext: history, matching and the worker
// service listen on 127.0.0.1 only. The server reads *Data fields as base64 PEM.
func (t *TLSOptions) serverTLS() config.RootTLS {
	if t == nil {
		return config.RootTLS{}
	}
	b64 := func(pem []byte) string { return base64.StdEncoding.EncodeToString(pem) }
	var root config.RootTLS
	root.Frontend.Server = config.ServerTLS{CertData: b64(t.CertPEM), KeyData: b64(t.KeyPEM)}
	if len(t.ClientCAPEM) > 0 {
		root.Frontend.Server.RequireClientAuth = true
		root.Frontend.Server.ClientCAData = []string{b64(t.ClientCAPEM)}
		root.SystemWorker.CertData = b64(t.ClientCertPEM)
		root.SystemWorker.KeyData = b64(t.ClientKeyPEM)
	}
	// RootCAData also marks the system worker config as explicit (see the server's
	// isSystemWorker), so it dials the frontend with TLS.
	root.SystemWorker.Client = config.ClientTLS{ServerName: t.ServerName, RootCAData: []string{b64(t.RootCAPEM)}}
	return root
}

// clientTLS is the TLS configuration of the server's own SDK clients (Start's registration);
// nil without TLS. validate has run, so the PEM parses.
func (t *TLSOptions) clientTLS() *tls.Config {
	if t == nil {
		return nil
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(t.RootCAPEM)
	c := &tls.Config{RootCAs: roots, ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if len(t.ClientCAPEM) > 0 {
		pair, _ := tls.X509KeyPair(t.ClientCertPEM, t.ClientKeyPEM)
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}
