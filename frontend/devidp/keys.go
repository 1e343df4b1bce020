package devidp

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	jose "github.com/go-jose/go-jose/v4"
)

// signingKey is the provider's one RS256 key; it implements both op.SigningKey
// and op.Key. kid is the RFC 7638 thumbprint, so the same key file always gives
// the same kid (a restart does not invalidate tokens already handed out).
type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *signingKey) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (k *signingKey) Use() string                                 { return "sig" }
func (k *signingKey) ID() string                                  { return k.id }

// Key is the private key for signing; publicKey wraps it for the key set.
func (k *signingKey) Key() any { return k.key }

type publicKey struct{ *signingKey }

func (k publicKey) Key() any { return &k.key.PublicKey }

func newSigningKey(key *rsa.PrivateKey) (*signingKey, error) {
	jwk := jose.JSONWebKey{Key: &key.PublicKey}
	tp, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("devidp: key thumbprint: %w", err)
	}
	return &signingKey{id: base64.RawURLEncoding.EncodeToString(tp), key: key}, nil
}

// loadOrCreateKey reads <dir>/signing-key.pem, creating it (0600) on first
// use. An empty dir means ephemeral: a fresh key that lives in memory only.
func loadOrCreateKey(dir string) (*signingKey, error) {
	if dir == "" {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		return newSigningKey(k)
	}
	path := filepath.Join(dir, "signing-key.pem")
	b, err := os.ReadFile(path)
	if err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("devidp: %s: no PEM block", path)
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("devidp: %s: %w", path, err)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("devidp: %s: not an RSA key", path)
		}
		return newSigningKey(rk)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("devidp: %w", err)
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return nil, err
	}
	return newSigningKey(k)
}

// loadOrCreateSecret reads (or creates) a 32-byte random secret file.
func loadOrCreateSecret(dir, name string) ([32]byte, error) {
	var out [32]byte
	if dir == "" {
		_, err := rand.Read(out[:])
		return out, err
	}
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != len(out) {
			return out, fmt.Errorf("devidp: %s: want %d bytes, have %d", path, len(out), len(b))
		}
		copy(out[:], b)
		return out, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return out, fmt.Errorf("devidp: %w", err)
	}
	if _, err := rand.Read(out[:]); err != nil {
		return out, err
	}
	return out, writeFileAtomic(path, out[:])
}

// writeFileAtomic writes via a temp file and rename, mode 0600, so a crash
// never leaves a half-written key or state file behind.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("devidp: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("devidp: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("devidp: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("devidp: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("devidp: %w", err)
	}
	return nil
}
