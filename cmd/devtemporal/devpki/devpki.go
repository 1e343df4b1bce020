package devpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validity of every certificate made here: long enough for any test, short enough that a
// leaked one is soon worthless. Backdated a minute for clock skew between processes.
const validity = 24 * time.Hour

// CA is a self-signed certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// Pair is a PEM certificate and its PEM (PKCS #8) private key.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// NewCA makes a CA whose subject common name is name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := template(name)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA %q: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}, nil
}

// Server signs a server certificate for hosts: IP addresses become IP SANs, anything else a
// DNS SAN. The first host is also the common name.
func (ca *CA) Server(hosts ...string) (Pair, error) {
	if len(hosts) == 0 {
		return Pair{}, fmt.Errorf("devpki: a server certificate needs at least one host")
	}
	tmpl := template(hosts[0])
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	return ca.sign(tmpl)
}

// Client signs a client certificate (for mutual TLS) with the given common name.
func (ca *CA) Client(commonName string) (Pair, error) {
	return ca.ClientValid(commonName, time.Time{}, time.Time{})
}

// ClientValid is Client with the validity period given (zero times keep the defaults), e.g.
// an already expired certificate for a test of what refuses it.
func (ca *CA) ClientValid(commonName string, notBefore, notAfter time.Time) (Pair, error) {
	tmpl := template(commonName)
	if !notBefore.IsZero() {
		tmpl.NotBefore = notBefore
	}
	if !notAfter.IsZero() {
		tmpl.NotAfter = notAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.sign(tmpl)
}

func (ca *CA) sign(tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("devpki: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
	}, nil
}

// WriteFiles writes the pair to dir as <name>.crt and <name>.key (the key readable by the
// owner only) and returns their paths.
func (p Pair) WriteFiles(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, p.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// WriteFile writes the CA certificate to dir/<name>.crt and returns its path.
func (ca *CA) WriteFile(dir, name string) (string, error) {
	path := filepath.Join(dir, name+".crt")
	return path, os.WriteFile(path, ca.CertPEM, 0o644)
}

func template(commonName string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"jobgate devpki"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
	}
}
