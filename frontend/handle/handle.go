package handle

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	// MaxHandleLen is the longest string OpenHandle looks at; longer input
	// is rejected before any other work, and SealHandle never produces one.
	MaxHandleLen = 1024
	// MaxCursorLen is the same cap for cursors.
	MaxCursorLen = 4096

	// HandlePrefix starts every sealed handle; the trailing digit is the
	// format version. (CursorPrefix: cursor.go.)
	HandlePrefix = "jgh1"

	// Domain-separation label: part of the MAC input, never of the string.
	handleLabel = "jobgate-handle-v1"

	payloadVersion = 1
	sigB64Len      = 43           // base64url, no padding, of 32 bytes
	maxUnixSeconds = 253402300799 // 9999-12-31T23:59:59Z
)

// maxKindLen is the longest job kind a handle may carry.
const maxKindLen = 32

var (
	// ErrMalformed: the string is not a well-formed handle/cursor/download
	// token signed by a key of the ring (→ invalid_handle / cursor_invalid /
	// 404).
	ErrMalformed = errors.New("malformed or badly signed")
	// ErrExpired: well-formed and correctly signed, but past its expiry
	// (→ handle_expired / cursor_expired / 404, after checking the binding).
	ErrExpired = errors.New("expired")
)

// Details for operator logs; all match ErrMalformed and none carry input.
var (
	errNoKeyring  = fmt.Errorf("%w: no keyring", ErrMalformed)
	errTooLong    = fmt.Errorf("%w: too long", ErrMalformed)
	errCharset    = fmt.Errorf("%w: character outside [A-Za-z0-9._-]", ErrMalformed)
	errShape      = fmt.Errorf("%w: want prefix.kid.payload.sig", ErrMalformed)
	errPrefix     = fmt.Errorf("%w: wrong prefix or version", ErrMalformed)
	errUnknownKID = fmt.Errorf("%w: unknown key id", ErrMalformed)
	errSignature  = fmt.Errorf("%w: signature mismatch", ErrMalformed)
	errPayload    = fmt.Errorf("%w: payload is not base64url", ErrMalformed)
	errJSON       = fmt.Errorf("%w: payload is not the expected JSON object", ErrMalformed)
	errVersion    = fmt.Errorf("%w: unsupported payload version", ErrMalformed)
	errFields     = fmt.Errorf("%w: invalid field value", ErrMalformed)
)

var b64 = base64.RawURLEncoding.Strict()

type format struct {
	prefix, label string
	max           int
}

var (
	handleFormat = format{HandlePrefix, handleLabel, MaxHandleLen}
)

// sealedLen is the length of a sealed string with the given payload and kid.
func (f format) sealedLen(jsonLen, kidLen int) int {
	return len(f.prefix) + 1 + kidLen + 1 + b64.EncodedLen(jsonLen) + 1 + sigB64Len
}

// seal returns prefix.kid.payload.sig, or "" if that would exceed f.max.
func (k *Keyring) seal(f format, js []byte) string {
	kid := k.current
	n := f.sealedLen(len(js), len(kid))
	if n > f.max {
		return ""
	}
	var stack [MaxHandleLen]byte // handles fit: one allocation, the string
	buf := stack[:0]
	if n > len(stack) {
		buf = make([]byte, 0, n)
	}
	buf = append(buf, f.prefix...)
	buf = append(buf, '.')
	buf = append(buf, kid...)
	buf = append(buf, '.')
	buf = b64.AppendEncode(buf, js)
	var sig [sha256.Size]byte
	macInto(k, kid, f.label, buf, &sig)
	buf = append(buf, '.')
	buf = b64.AppendEncode(buf, sig[:])
	return string(buf)
}

// checkShape runs the checks every sealed string gets before anything of it is decoded, in
// this order: a ring with keys, the length cap, the alphabet, the number of dots, the prefix and
// a key ID of the ring. It returns the key ID and what follows it.
func (k *Keyring) checkShape(s string, limit, dots int, prefix string) (kid, rest string, err error) {
	if k == nil || len(k.keys) == 0 {
		return "", "", errNoKeyring
	}
	if len(s) > limit {
		return "", "", errTooLong
	}
	n := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			n++
		case !isKIDByte(c): // same alphabet as base64url
			return "", "", errCharset
		}
	}
	if n != dots {
		return "", "", errShape
	}
	p, rest, _ := strings.Cut(s, ".")
	kid, rest, _ = strings.Cut(rest, ".")
	if p != prefix {
		return "", "", errPrefix
	}
	if _, ok := k.keys[kid]; !ok {
		return "", "", errUnknownKID
	}
	return kid, rest, nil
}

// open checks size, shape, prefix, kid and signature — in that order, and
// before decoding anything but the signature — and returns the payload JSON.
func (k *Keyring) open(f format, s string) ([]byte, error) {
	kid, rest, err := k.checkShape(s, f.max, 3, f.prefix)
	if err != nil {
		return nil, err
	}
	payload, sig, _ := strings.Cut(rest, ".")
	if len(sig) != sigB64Len {
		return nil, errSignature
	}
	var sigBuf [sha256.Size]byte
	if n, err := b64.Decode(sigBuf[:], []byte(sig)); err != nil || n != sha256.Size {
		return nil, errSignature
	}
	if !verifyMAC(k, kid, f.label, s[:len(s)-len(sig)-1], sigBuf[:]) {
		return nil, errSignature
	}
	// Authenticated from here on.
	if payload == "" {
		return nil, errPayload
	}
	js, err := b64.DecodeString(payload)
	if err != nil {
		return nil, errPayload
	}
	return js, nil
}

// decodeCanonical decodes js into v (a pointer to a wire struct) and accepts
// it only if re-encoding v gives back exactly js. That rejects unknown,
// missing, null, duplicate or differently-cased fields, wrong types,
// whitespace, alternative escapes and trailing data in one rule.
//
// (Unknown fields and trailing space need no check of their own: the re-encoding lacks them.)
func decodeCanonical(js []byte, v any) error {
	if err := json.Unmarshal(js, v); err != nil {
		return errJSON
	}
	re, err := json.Marshal(v)
	if err != nil || string(re) != string(js) {
		return errJSON
	}
	return nil
}

func validString(s string) bool { return s != "" && utf8.ValidString(s) }

// validKind reports whether k matches ^[a-z][a-z0-9_]{0,31}$. Which kinds
// exist is up to the callers; this is only a syntactic check.
func validKind(k string) bool {
	if len(k) == 0 || len(k) > maxKindLen || k[0] < 'a' || k[0] > 'z' {
		return false
	}
	for i := 1; i < len(k); i++ {
		if c := k[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func validExpiry(t time.Time) bool {
	u := t.Unix()
	return u >= 1 && u <= maxUnixSeconds
}

func expiryFromUnix(u int64) time.Time { return time.Unix(u, 0).UTC() }

// ---------------------------------------------------------------- handles

// Handle names one job (Temporal workflow) of one tenant.
type Handle struct {
	Tenant     string
	WorkflowID string
	Kind       string    // job kind, ^[a-z][a-z0-9_]{0,31}$ (which kinds exist is not this package's business)
	Expiry     time.Time // second precision: sealing truncates to the second
}

type handleWire struct {
	V int    `json:"v"`
	T string `json:"t"` // tenant
	W string `json:"w"` // workflow ID
	K string `json:"k"` // kind
	E int64  `json:"e"` // expiry, Unix seconds
}

func (h Handle) wire() handleWire {
	return handleWire{V: payloadVersion, T: h.Tenant, W: h.WorkflowID, K: h.Kind, E: h.Expiry.Unix()}
}

func (w handleWire) header() (int, int64) { return w.V, w.E }

func (w handleWire) token() (Handle, bool) {
	return Handle{Tenant: w.T, WorkflowID: w.W, Kind: w.K, Expiry: expiryFromUnix(w.E)}, true
}

func (h Handle) validateFields() error {
	switch {
	case !validString(h.Tenant):
		return errors.New("handle: tenant is empty or not UTF-8")
	case !validString(h.WorkflowID):
		return errors.New("handle: workflow ID is empty or not UTF-8")
	case !validKind(h.Kind):
		return fmt.Errorf("handle: kind must match ^[a-z][a-z0-9_]{0,%d}$", maxKindLen-1)
	case !validExpiry(h.Expiry):
		return errors.New("handle: expiry is zero or out of range")
	}
	return nil
}

// Validate reports whether SealHandle can seal h with any keyring: fields
// set and valid, and the sealed string within [MaxHandleLen].
func (h Handle) Validate() error {
	n, err := sealedSize(&handleFormat, h)
	if err == nil && n > MaxHandleLen {
		err = fmt.Errorf("handle: sealed handle would be %d bytes, limit %d (tenant or workflow ID too long)", n, MaxHandleLen)
	}
	return err
}

// SealHandle returns h signed with the current key. It returns "" — which
// never opens — if h is invalid or too long; use [Handle.Validate] first when
// the fields are not known to be good.
func (k *Keyring) SealHandle(h Handle) string { return sealToken(k, &handleFormat, h) }

// OpenHandle verifies s (in constant time) with the key its kid names and
// decodes it. Errors match [ErrMalformed] or [ErrExpired]. With ErrExpired
// the decoded Handle is returned too, so the caller can check the tenant
// first; with ErrMalformed the Handle is zero.
func (k *Keyring) OpenHandle(s string, now time.Time) (Handle, error) {
	return openToken[Handle, handleWire](k, &handleFormat, s, now)
}

// FilterFingerprint returns a stable 22-character fingerprint (base64url of
// the first 16 bytes of SHA-256) of the canonical encoding of pairs: "k=v"
// pairs sorted by key, keys and values query-escaped and joined by "&", so no
// two different maps share an encoding. Pass normalized values and leave out
// absent filters: a key with an empty value is not the same as no key. A nil
// map fingerprints like an empty one.
func FilterFingerprint(pairs map[string]string) string {
	v := make(url.Values, len(pairs))
	for k, val := range pairs {
		v[k] = []string{val}
	}
	sum := sha256.Sum256([]byte("jobgate-filter-v1\n" + v.Encode()))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}
