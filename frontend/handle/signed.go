package handle

// Ed25519 signatures anyone holding the published public keys can check (signing.go):
//
//   - a decision signature ("jgds1.<kid>.<payload>.<sig>") is made by the frontend over the
//     same fields as its resume seal (Resume: job, run, input request, principal, decision,
//     comment and meaning digests, surface, sign-in, approver, expiry); it rides on the answer
//     into history and the decision record, so an auditor checks the record without the
//     resume keys;
//   - a manifest signature ("jgms1.<kid>.<sig>", the manifest's manifest_signature) is made by
//     the worker over the canonical form of the whole manifest without that field: the
//     artifact's and each part's SHA-256, the decision record with its signature, the approved
//     scope, approval_required and the manifest's version.
//
// Each signature covers its own label first, so one kind can never be taken for the other.

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
)

const (
	// DecisionRecordPrefix starts every decision signature; the digit is the format version.
	// (No "sig" in these names: timing_test.go reserves comparisons of such names for MACs.)
	DecisionRecordPrefix = "jgds1"
	// ManifestPrefix starts every manifest signature.
	ManifestPrefix = "jgms1"
	// ManifestSignatureField is the manifest's JSON field holding its signature; it is left
	// out of what is signed.
	ManifestSignatureField = "manifest_signature"
	// MaxDecisionSigLen caps a decision signature: a resume seal's payload and a longer signature.
	MaxDecisionSigLen = MaxResumeLen + 64

	decisionSigLabel = "jobgate decision record signature v1"
	manifestSigLabel = "jobgate manifest signature v1"
	edSigB64Len      = 86 // base64url, no padding, of 64 bytes
)

var (
	// ErrSignature: the string is not a signature of this kind, or does not verify.
	ErrSignature = errors.New("signature does not verify with these public keys")
	// ErrUnknownSigningKey: well-formed, but made with a key ID the public keys lack
	// (another deployment's keys, or a key dropped from the set).
	ErrUnknownSigningKey = errors.New("signed with a key ID the public keys do not hold")
)

// SignDecision signs r (its expiry is the resume seal's) with the current key; "" when r's
// fields are invalid or too long, as SealResume.
func (k *SigningKeyring) SignDecision(r Resume) string {
	if k == nil || r.validateFields() != nil {
		return ""
	}
	js, err := json.Marshal(r.wire())
	if err != nil {
		return ""
	}
	signed := DecisionRecordPrefix + "." + k.current + "." + b64.EncodeToString(js)
	if len(signed)+1+edSigB64Len > MaxDecisionSigLen {
		return ""
	}
	_, sig := k.sign(decisionSigLabel, []byte(signed))
	return signed + "." + b64.EncodeToString(sig)
}

// OpenDecision checks a decision signature and returns what it binds and the key ID. Expiry is
// not checked: the record is read long after the decision (jobgate verify compares the
// record's time with it). Errors match ErrSignature or ErrUnknownSigningKey.
func (p *PublicKeys) OpenDecision(s string) (Resume, string, error) {
	var zero Resume
	if len(s) > MaxDecisionSigLen || strings.Count(s, ".") != 3 {
		return zero, "", ErrSignature
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '.' && !isKIDByte(c) {
			return zero, "", ErrSignature
		}
	}
	parts := strings.Split(s, ".")
	if parts[0] != DecisionRecordPrefix || !validKID(parts[1]) || len(parts[3]) != edSigB64Len {
		return zero, "", ErrSignature
	}
	key := p.key(parts[1])
	if key == nil {
		return zero, parts[1], ErrUnknownSigningKey
	}
	sig, err := b64.DecodeString(parts[3])
	if err != nil || !ed25519.Verify(key, labelled(decisionSigLabel, []byte(s[:len(s)-len(parts[3])-1])), sig) {
		return zero, parts[1], ErrSignature
	}
	// Signed from here on; still refuse anything SignDecision would not have made.
	js, err := b64.DecodeString(parts[2])
	if err != nil {
		return zero, parts[1], ErrSignature
	}
	var w resumeWire
	if err := decodeCanonical(js, &w); err != nil {
		return zero, parts[1], ErrSignature
	}
	if v, e := w.header(); v != payloadVersion || e < 1 || e > maxUnixSeconds {
		return zero, parts[1], ErrSignature
	}
	r, ok := w.token()
	if !ok || r.validateFields() != nil {
		return zero, parts[1], ErrSignature
	}
	return r, parts[1], nil
}

// SignManifest returns "jgms1.<kid>.<sig>" over the canonical form of the manifest JSON (its
// manifest_signature field, if any, left out), with the current key.
func (k *SigningKeyring) SignManifest(manifestJSON []byte) (string, error) {
	if k == nil {
		return "", errors.New("handle: no signing keys")
	}
	c, err := canonicalWithout(manifestJSON, ManifestSignatureField)
	if err != nil {
		return "", err
	}
	kid, sig := k.sign(manifestSigLabel, c)
	return ManifestPrefix + "." + kid + "." + b64.EncodeToString(sig), nil
}

// PublicJWKS is the ring's public keys as a JWK set (activities write it beside each manifest).
func (k *SigningKeyring) PublicJWKS() []byte { return k.Public().JWKS() }

// VerifyManifest checks the manifest's own manifest_signature and returns the key ID that made
// it. A manifest without the field is not an error of the signature: found is false. Errors
// match ErrSignature or ErrUnknownSigningKey, or say the JSON is not a manifest object.
func (p *PublicKeys) VerifyManifest(manifestJSON []byte) (kid string, found bool, err error) {
	parts, found, err := manifestStamp(manifestJSON, ManifestSignatureField, ManifestPrefix)
	if err != nil || !found {
		return "", found, err
	}
	if parts == nil || !validKID(parts[1]) || len(parts[2]) != edSigB64Len {
		return "", true, ErrSignature
	}
	key := p.key(parts[1])
	if key == nil {
		return parts[1], true, ErrUnknownSigningKey
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return parts[1], true, ErrSignature
	}
	c, err := canonicalWithout(manifestJSON, ManifestSignatureField)
	if err != nil {
		return parts[1], true, err
	}
	if !ed25519.Verify(key, labelled(manifestSigLabel, c), sig) {
		return parts[1], true, ErrSignature
	}
	return parts[1], true, nil
}
