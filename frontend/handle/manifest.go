package handle

// Manifest seals: the worker's HMAC over an export's manifest.json (contract.Manifest), so
// the artifact's digests, the decision record and approval_required cannot be rewritten or
// removed by whoever can write the artifact store alone. The key is derived from the resume
// key with HKDF under its own info string, so a manifest seal can never be taken for a resume
// seal or any other token, nor the other way round. It is an HMAC: any holder of the resume
// keys (frontends, workers, operators) could forge one, so workers with signing keys sign
// manifests with Ed25519 instead (signed.go); this seal is kept for verifying older manifests
// ("legacy HMAC seal").

import (
	"bytes"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

const (
	manifestSealPrefix = "jgm1"
	// ManifestSealField is the manifest's JSON field holding the seal; it is left out of what
	// is sealed.
	ManifestSealField = "manifest_seal"
	manifestHKDFInfo  = "jobgate manifest seal v1"
)

// ErrManifestSeal is returned by OpenManifest for a seal that does not verify.
var ErrManifestSeal = errors.New("the manifest seal does not verify with these resume keys (manifest altered, or other keys)")

// manifestKey is the per-kid key for manifest seals, derived from the resume key.
func (k *Keyring) manifestKey(kid string) ([]byte, error) {
	return hkdf.Key(sha256.New, k.keys[kid], nil, manifestHKDFInfo, 32)
}

// canonicalManifest is the manifest's JSON without its seal field (canonicalWithout).
func canonicalManifest(manifestJSON []byte) ([]byte, error) {
	return canonicalWithout(manifestJSON, ManifestSealField)
}

// canonicalWithout is the JSON object without its field, with object keys sorted and numbers
// kept as written: the worker and verify compute it the same way from the bytes, whatever
// struct either decodes them into.
func canonicalWithout(manifestJSON []byte, field string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(manifestJSON))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if dec.More() {
		return nil, errors.New("manifest: trailing data after the JSON object")
	}
	delete(v, field)
	return json.Marshal(v) // maps marshal with sorted keys
}

// manifestStamp reads the manifest's own seal or signature field: both are
// "<prefix>.<kid>.<base64url MAC or signature>", and OpenManifest and VerifyManifest read them
// the same way before checking each its own. found is false when the field is absent; parts is
// nil when it is there but not a string of that form (the check's own error then).
func manifestStamp(manifestJSON []byte, field, prefix string) (parts []string, found bool, err error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(manifestJSON, &f); err != nil {
		return nil, false, fmt.Errorf("manifest: %w", err)
	}
	raw, ok := f[field]
	if !ok {
		return nil, false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, true, nil
	}
	if parts = strings.Split(s, "."); len(parts) != 3 || parts[0] != prefix {
		return nil, true, nil
	}
	return parts, true, nil
}

// SealManifest returns "jgm1.<kid>.<base64url HMAC>" over the canonical form of the manifest
// JSON (its manifest_seal field, if any, left out), with the current key.
func (k *Keyring) SealManifest(manifestJSON []byte) (string, error) {
	c, err := canonicalManifest(manifestJSON)
	if err != nil {
		return "", err
	}
	key, err := k.manifestKey(k.current)
	if err != nil {
		return "", err
	}
	h := hmac.New(sha256.New, key)
	_, _ = h.Write(c)
	return manifestSealPrefix + "." + k.current + "." + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}

// OpenManifest checks the manifest's seal (the manifestJSON's own manifest_seal field) and
// returns the key ID that made it. A manifest without the field is not an error of the seal:
// found is false.
func (k *Keyring) OpenManifest(manifestJSON []byte) (kid string, found bool, err error) {
	parts, found, err := manifestStamp(manifestJSON, ManifestSealField, manifestSealPrefix)
	if err != nil || !found {
		return "", found, err
	}
	if parts == nil || k.keys[parts[1]] == nil {
		return "", true, ErrManifestSeal
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "", true, ErrManifestSeal
	}
	c, err := canonicalManifest(manifestJSON)
	if err != nil {
		return "", true, err
	}
	key, err := k.manifestKey(parts[1])
	if err != nil {
		return "", true, err
	}
	h := hmac.New(sha256.New, key)
	_, _ = h.Write(c)
	if !hmac.Equal(sig, h.Sum(nil)) {
		return parts[1], true, ErrManifestSeal
	}
	return parts[1], true, nil
}
