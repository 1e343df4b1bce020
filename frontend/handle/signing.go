package handle

// Signing keys: Ed25519 keys by key ID that sign what an auditor must be able to check without
// any secret (decision records and export manifests, signed.go). The resume keys are HMAC keys:
// whoever can check an HMAC can also make one, so the people who must trust an approval would
// have to hold the keys that forge one. A signature made with these keys is checked with the
// public half alone, published as a JWK set (RFC 7517, OKP keys of RFC 8037).
//
// Rotation is by key ID, like a Keyring: the first key of the spec signs, every key's public
// half stays published, so what an older key signed keeps verifying until the operator drops it.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
)

// MaxJWKSBytes bounds a JWK set read from a file or URL: a few keys are a few hundred bytes.
const MaxJWKSBytes = 1 << 20

// SigningKeyring holds Ed25519 private keys by key ID; the current one signs. It is immutable
// and safe for concurrent use; String, Format and LogValue never show key material.
type SigningKeyring struct {
	current string
	keys    map[string]ed25519.PrivateKey
	public  *PublicKeys
}

// ParseSigningKeyring parses "kid1:SEED1,kid0:SEED0": each SEED is the 32-byte Ed25519 seed
// (RFC 8032's private key) in hex or base64, as ParseKeyring reads keys; the first entry signs,
// all are published. Errors never contain key material.
func ParseSigningKeyring(spec string) (*SigningKeyring, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("handle: signing keyring spec is empty")
	}
	r := &SigningKeyring{keys: map[string]ed25519.PrivateKey{}}
	for i, entry := range strings.Split(spec, ",") {
		n := i + 1
		kid, enc, ok := strings.Cut(strings.TrimSpace(entry), ":")
		kid = strings.TrimSpace(kid)
		switch {
		case !ok:
			return nil, fmt.Errorf("handle: signing keyring entry %d: want <kid>:<seed>", n)
		case !validKID(kid):
			return nil, fmt.Errorf("handle: signing keyring entry %d: invalid key ID (want 1-%d characters of [A-Za-z0-9_-])", n, MaxKIDLen)
		case r.keys[kid] != nil:
			return nil, fmt.Errorf("handle: signing keyring entry %d: duplicate key ID %q", n, kid)
		}
		seed, err := decodeKey(strings.TrimSpace(enc))
		if err != nil {
			return nil, fmt.Errorf("handle: signing keyring entry %d (key ID %q): %v", n, kid, err)
		}
		if len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("handle: signing keyring entry %d (key ID %q): seed is %d bytes, want %d (an Ed25519 seed)", n, kid, len(seed), ed25519.SeedSize)
		}
		r.keys[kid] = ed25519.NewKeyFromSeed(seed)
		if i == 0 {
			r.current = kid
		}
	}
	pub := map[string]ed25519.PublicKey{}
	for kid, k := range r.keys {
		pub[kid] = k.Public().(ed25519.PublicKey)
	}
	r.public = &PublicKeys{keys: pub}
	return r, nil
}

// GenerateSigningSeedHex returns a fresh Ed25519 seed, hex, for a spec such as
// "s1:"+GenerateSigningSeedHex() (dev, and operators making keys).
func GenerateSigningSeedHex() string {
	b := make([]byte, ed25519.SeedSize)
	_, _ = rand.Read(b) // never fails (it aborts the program instead)
	return hex.EncodeToString(b)
}

// CurrentKID is the ID of the signing key.
func (r *SigningKeyring) CurrentKID() string {
	if r == nil {
		return ""
	}
	return r.current
}

// Public is the ring's public keys: what verifies its signatures.
func (r *SigningKeyring) Public() *PublicKeys {
	if r == nil {
		return nil
	}
	return r.public
}

// sign is the current key's signature over label || 0x00 || msg, as "kid", "sig".
func (r *SigningKeyring) sign(label string, msg []byte) (string, []byte) {
	return r.current, ed25519.Sign(r.keys[r.current], labelled(label, msg))
}

// labelled is what a signature covers: a label per kind of signed thing first, so a manifest
// signature can never be taken for a decision record's, nor the other way round.
func labelled(label string, msg []byte) []byte {
	b := make([]byte, 0, len(label)+1+len(msg))
	return append(append(append(b, label...), 0), msg...)
}

// String describes the ring without key material.
func (r SigningKeyring) String() string {
	return fmt.Sprintf("handle.SigningKeyring{current: %s, kids: %v}", r.current, slices.Sorted(maps.Keys(r.keys)))
}

// Format makes every fmt verb print String, never key material.
func (r SigningKeyring) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, r.String()) }

// LogValue implements slog.LogValuer without key material.
func (r *SigningKeyring) LogValue() slog.Value {
	if r == nil {
		return slog.StringValue("nil")
	}
	return slog.StringValue(r.String())
}

// PublicKeys are Ed25519 public keys by key ID: all an auditor needs.
type PublicKeys struct {
	keys map[string]ed25519.PublicKey
}

// KIDs are the key IDs, sorted.
func (p *PublicKeys) KIDs() []string {
	if p == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(p.keys))
}

// Thumbprint is the RFC 7638 JWK thumbprint (base64url SHA-256) of key kid, "" if none: what
// an auditor compares with the operator's published value when the keys came with the artifact.
func (p *PublicKeys) Thumbprint(kid string) string {
	k := p.key(kid)
	if k == nil {
		return ""
	}
	// RFC 8037 §2: the required members, lexicographic, no whitespace.
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(k) + `"}`))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func (p *PublicKeys) key(kid string) ed25519.PublicKey {
	if p == nil {
		return nil
	}
	return p.keys[kid]
}

// jwk is one OKP key of a JWK set (RFC 8037 §2); D is read only to refuse it.
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	D   string `json:"d,omitempty"`
	Kid string `json:"kid,omitempty"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
}

// JWKS is the public keys as a JWK set, sorted by key ID: served at
// /.well-known/jobgate-signing-keys and written beside every export's manifest.
func (p *PublicKeys) JWKS() []byte {
	set := struct {
		Keys []jwk `json:"keys"`
	}{Keys: []jwk{}}
	for _, kid := range p.KIDs() {
		set.Keys = append(set.Keys, jwk{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(p.keys[kid]),
			Kid: kid, Use: "sig", Alg: "EdDSA"})
	}
	b, _ := json.MarshalIndent(set, "", "  ")
	return append(b, '\n')
}

// ParseJWKS reads the Ed25519 keys of a JWK set. Keys of other types are skipped (RFC 7517 §5:
// a set may hold keys its reader does not use); an Ed25519 key without a valid kid, with a bad
// x, with private material (d) or a key ID given twice is an error, as is a set with none.
func ParseJWKS(b []byte) (*PublicKeys, error) {
	if len(b) > MaxJWKSBytes {
		return nil, fmt.Errorf("handle: JWK set larger than %d bytes", MaxJWKSBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := dec.Decode(&set); err != nil {
		return nil, fmt.Errorf("handle: JWK set: %w", err)
	}
	if dec.More() {
		return nil, errors.New("handle: JWK set: trailing data after the JSON object")
	}
	p := &PublicKeys{keys: map[string]ed25519.PublicKey{}}
	for i, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" {
			continue
		}
		switch {
		case k.D != "":
			return nil, fmt.Errorf("handle: JWK set key %d holds a private key (d): publish only the public half", i+1)
		case !validKID(k.Kid):
			return nil, fmt.Errorf("handle: JWK set key %d: invalid kid", i+1)
		case p.keys[k.Kid] != nil:
			return nil, fmt.Errorf("handle: JWK set: kid %q given twice", k.Kid)
		case k.Alg != "" && k.Alg != "EdDSA" && k.Alg != "Ed25519":
			return nil, fmt.Errorf("handle: JWK set key %q: alg %q is not EdDSA", k.Kid, k.Alg)
		case k.Use != "" && k.Use != "sig":
			return nil, fmt.Errorf("handle: JWK set key %q: use %q is not sig", k.Kid, k.Use)
		}
		x, err := base64.RawURLEncoding.Strict().DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("handle: JWK set key %q: x is not a base64url Ed25519 public key", k.Kid)
		}
		p.keys[k.Kid] = ed25519.PublicKey(x)
	}
	if len(p.keys) == 0 {
		return nil, errors.New("handle: JWK set holds no Ed25519 key")
	}
	return p, nil
}
