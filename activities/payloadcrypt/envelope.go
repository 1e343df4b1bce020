package payloadcrypt

import (
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/jobgate/jobgate/authz"
)

// The envelope's metadata. The encoding tells every converter that this is not JSON (a
// process without the codec fails to decode rather than misreading ciphertext); the key ID
// and tenant say which key opens it, so decoding needs no context.
const (
	// EncodingEncrypted is the metadata "encoding" of an encrypted payload; its version is
	// in the name, so a later format gets a name of its own.
	EncodingEncrypted = "binary/jobgate-aes256gcm-v1"
	// MetadataKeyID names the data key that sealed the payload.
	MetadataKeyID = "jobgate-key-id"
	// MetadataTenant names the tenant whose key it is (a routing key, like JobTenant).
	MetadataTenant = "jobgate-tenant"
)

const (
	nonceSize = 12 // GCM's standard nonce
	tagSize   = 16
)

var (
	// ErrMalformed is an envelope whose metadata or data cannot be an encrypted payload.
	ErrMalformed = errors.New("payloadcrypt: malformed encrypted payload")
	// ErrOpen is a payload that does not authenticate under its key: tampered, relabelled
	// (tenant or key ID changed), or sealed by another key of the same ID.
	ErrOpen = errors.New("payloadcrypt: encrypted payload does not authenticate")
)

// envelope is a parsed encrypted payload.
type envelope struct {
	tenant, keyID string
	nonce, sealed []byte
}

// parseEnvelope reads p's envelope. ok is false for a payload that is not encrypted (no
// EncodingEncrypted): it is passed through as it is. An encrypted payload whose tenant, key ID
// or data cannot be ours is ErrMalformed; nothing is decrypted before that check.
func parseEnvelope(p *commonpb.Payload) (env envelope, ok bool, err error) {
	md := p.GetMetadata()
	if string(md[converter.MetadataEncoding]) != EncodingEncrypted {
		return envelope{}, false, nil
	}
	env.tenant, env.keyID = string(md[MetadataTenant]), string(md[MetadataKeyID])
	if authz.ValidTenant(env.tenant) != nil {
		return envelope{}, true, fmt.Errorf("%w: tenant %q", ErrMalformed, env.tenant)
	}
	if !ValidKeyID(env.keyID) {
		return envelope{}, true, fmt.Errorf("%w: key ID %q", ErrMalformed, env.keyID)
	}
	d := p.GetData()
	if len(d) < nonceSize+tagSize {
		return envelope{}, true, fmt.Errorf("%w: %d bytes of data", ErrMalformed, len(d))
	}
	env.nonce, env.sealed = d[:nonceSize], d[nonceSize:]
	return env, true, nil
}

// additionalData binds a ciphertext to its tenant and key ID: relabelling either in the
// metadata makes it fail to open, so nobody can pass one tenant's payload off as another's.
func additionalData(tenant, keyID string) []byte {
	return []byte("jobgate-payload-v1\x00" + tenant + "\x00" + keyID)
}

// seal encrypts the whole payload (its metadata too: the inner encoding says what it was).
func seal(aead cipher.AEAD, tenant, keyID string, p *commonpb.Payload) (*commonpb.Payload, error) {
	plain, err := proto.Marshal(p)
	if err != nil {
		return nil, err
	}
	out := make([]byte, nonceSize, nonceSize+len(plain)+tagSize)
	if _, err := rand.Read(out); err != nil {
		return nil, err
	}
	out = aead.Seal(out, out[:nonceSize], plain, additionalData(tenant, keyID))
	return &commonpb.Payload{Metadata: map[string][]byte{
		converter.MetadataEncoding: []byte(EncodingEncrypted),
		MetadataKeyID:              []byte(keyID),
		MetadataTenant:             []byte(tenant),
	}, Data: out}, nil
}

// open decrypts env with aead, the data key its key ID names.
func open(aead cipher.AEAD, env envelope) (*commonpb.Payload, error) {
	plain, err := aead.Open(nil, env.nonce, env.sealed, additionalData(env.tenant, env.keyID))
	if err != nil {
		return nil, fmt.Errorf("%w (tenant %s, key %s)", ErrOpen, env.tenant, env.keyID)
	}
	var p commonpb.Payload
	if err := proto.Unmarshal(plain, &p); err != nil {
		return nil, fmt.Errorf("%w: inner payload: %v", ErrMalformed, err)
	}
	return &p, nil
}

// keyIDLayout is a key ID's timestamp: UTC to the nanosecond, so IDs sort by age (two
// rotations in one second still order) and the newest is the greatest.
const keyIDLayout = "20060102T150405.000000000Z"

// keyIDLen is the length of a key ID: the timestamp, "-" and 8 hex digits.
const keyIDLen = len(keyIDLayout) + 1 + 8

// ValidKeyID reports whether s is a key ID as newKeyID makes them: a UTC timestamp and 8
// random hex digits (so two processes making a tenant's first key at once make two keys,
// both kept).
func ValidKeyID(s string) bool {
	if len(s) != keyIDLen || s[8] != 'T' || s[15] != '.' || s[25] != 'Z' || s[26] != '-' {
		return false
	}
	for i, c := range s {
		switch {
		case i == 8 || i == 15 || i == 25 || i == 26:
		case i < 25 && c >= '0' && c <= '9':
		case i > 26 && strings.ContainsRune("0123456789abcdef", c):
		default:
			return false
		}
	}
	return true
}

// SealedTenant is the tenant whose key sealed p, as its envelope says; sealed is false for a
// clear payload and for one whose envelope cannot be ours (a codec server passes both on
// untouched). It decrypts nothing, so it tells a caller whose payload it is before anyone
// decides whether they may read it.
func SealedTenant(p *commonpb.Payload) (tenant string, sealed bool) {
	env, ok, err := parseEnvelope(p)
	if !ok || err != nil {
		return "", false
	}
	return env.tenant, true
}
