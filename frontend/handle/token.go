package handle

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The steps every kind of sealed string shares are written once here; each kind keeps its own
// wire struct, field rules, error messages, format and limit in its own file. Every kind seals
// and opens the same way:
//
//	seal: the kind's own fields → expiry in range → JSON of the wire struct → sealer (length
//	      cap, sign or encrypt)
//	open: sealer (length cap, shape, key, signature or tag) → canonical JSON → version →
//	      expiry in range → the kind's own fields → expiry against now
//
// so a rule of the sequence (say, check the binding fields before expiry) cannot be forgotten
// in one kind.

const (
	payloadVersion = 1
	sigB64Len      = 43           // base64url, no padding, of 32 bytes
	maxUnixSeconds = 253402300799 // 9999-12-31T23:59:59Z
)

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

// A sealable is the Go value of one kind of sealed string (Handle, Cursor, Download, State,
// Resume); W is its wire struct, the compact JSON object the string carries.
type sealable[W any] interface {
	// wire is the payload to seal, with payloadVersion and the expiry in Unix seconds.
	wire() W
	// validateFields is the kind's own check of its fields but the expiry (which kind.checked
	// checks for every kind); its errors are Validate's.
	validateFields() error
}

// A payload is the wire struct of sealable T as decoded from a sealed string.
type payload[T any] interface {
	// header returns the payload's format version and expiry (Unix seconds).
	header() (version int, expiry int64)
	// token returns the T the payload carries; false if it can carry none (a resume seal
	// without its scope list), which opens as errFields.
	token() (T, bool)
}

// A sealer makes a kind's string from its payload JSON and back: signed (format) or
// encrypted (aeadSealer).
type sealer interface {
	// sealedLen is the length of the sealed string for a jsonLen-byte payload and a
	// kidLen-byte key ID.
	sealedLen(jsonLen, kidLen int) int
	// sealJSON seals js with the ring's current key, or returns "" beyond the kind's limit.
	sealJSON(k *Keyring, js []byte) string
	// openJSON checks everything but the payload and returns the payload JSON; its errors
	// match ErrMalformed.
	openJSON(k *Keyring, s string) ([]byte, error)
	// maxLen is the kind's length cap: the longest string it seals or opens.
	maxLen() int
}

// A kind is one kind of sealed string as its exported methods see it: its sealer, how its
// errors begin and the noun its too-long error names it by. Each kind's Validate, Seal* and
// Open* are one call of it.
type kind[T sealable[W], W payload[T]] struct {
	sealer sealer
	what   string // "handle:", "handle: cursor", …: "<what> expiry is zero or out of range"
	noun   string // "handle", "request state", …: "handle: sealed <noun> would be …"
}

// checked checks t and returns its wire struct: t's own field rules first, then the expiry
// rule every kind shares (set, and within Unix seconds 1 to 9999-12-31), written once here so
// that no kind can leave it out.
func (c kind[T, W]) checked(t T) (W, error) {
	if err := t.validateFields(); err != nil {
		var zero W
		return zero, err
	}
	w := t.wire()
	if _, e := w.header(); !validUnix(e) {
		return w, fmt.Errorf("%s expiry is zero or out of range", c.what)
	}
	return w, nil
}

// validate is Validate: t's field error, or one naming the length t would have sealed under
// the longest possible key ID and the limit, followed by why (" (what made it long)", or "").
func (c kind[T, W]) validate(t T, why string) error {
	w, err := c.checked(t)
	if err != nil {
		return err
	}
	js, _ := json.Marshal(w)
	if n, limit := c.sealer.sealedLen(len(js), MaxKIDLen), c.sealer.maxLen(); n > limit {
		return fmt.Errorf("handle: sealed %s would be %d bytes, limit %d%s", c.noun, n, limit, why)
	}
	return nil
}

// seal returns t sealed with k's current key, or "" — which never opens — if k is nil or t is
// invalid or too long.
func (c kind[T, W]) seal(k *Keyring, t T) string {
	if k == nil {
		return ""
	}
	w, err := c.checked(t)
	if err != nil {
		return ""
	}
	js, err := json.Marshal(w)
	if err != nil {
		return ""
	}
	return c.sealer.sealJSON(k, js)
}

// open opens str as a T. Errors match ErrMalformed (and the T is zero) or ErrExpired (and the
// decoded T is returned too, so the caller can check its binding before its expiry).
func (c kind[T, W]) open(k *Keyring, str string, now time.Time) (T, error) {
	var zero T
	js, err := c.sealer.openJSON(k, str)
	if err != nil {
		return zero, err
	}
	var w W
	if err := decodeCanonical(js, &w); err != nil {
		return zero, err
	}
	v, e := w.header()
	if v != payloadVersion {
		return zero, errVersion
	}
	if !validUnix(e) {
		return zero, errFields
	}
	// The expiry is in range (just checked), so the kind's own field rules are all that is left.
	t, ok := w.token()
	if !ok || t.validateFields() != nil {
		return zero, errFields
	}
	if !now.Before(expiryFromUnix(e)) {
		return t, ErrExpired
	}
	return t, nil
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

// A field is one string field of a sealable, by the name its errors use.
type field struct{ name, value string }

// requireStrings checks fields in the order given (a slice, not a map, so a value with several
// bad fields always names the same one) and returns "<what> <name> is empty or not UTF-8" for
// the first that is.
func requireStrings(what string, fields ...field) error {
	for _, f := range fields {
		if !validString(f.value) {
			return fmt.Errorf("%s %s is empty or not UTF-8", what, f.name)
		}
	}
	return nil
}

// optionalStrings checks fields that may be "" (unknown) in the order given and returns
// "<what> <name> is not UTF-8" for the first that is not.
func optionalStrings(what string, fields ...field) error {
	for _, f := range fields {
		if !utf8.ValidString(f.value) {
			return fmt.Errorf("%s %s is not UTF-8", what, f.name)
		}
	}
	return nil
}

// A list is one []string field of a sealable: at most max values, none empty, all UTF-8 (so
// the JSON round trip is exact). Its errors name it "<what> has <n> <plural>, limit <max>" and
// "<what> <singular> is empty or not UTF-8".
type list struct {
	plural, singular string
	values           []string
	max              int
}

// requireLists checks lists in the order given, like requireStrings.
func requireLists(what string, lists ...list) error {
	for _, l := range lists {
		if len(l.values) > l.max {
			return fmt.Errorf("%s has %d %s, limit %d", what, len(l.values), l.plural, l.max)
		}
		for _, v := range l.values {
			if !validString(v) {
				return fmt.Errorf("%s %s is empty or not UTF-8", what, l.singular)
			}
		}
	}
	return nil
}

// optionalTime checks a time that may be zero (unknown), such as an auth_time, against the
// expiry's range: "<what> <name> is out of range".
func optionalTime(what, name string, t time.Time) error {
	if !t.IsZero() && !validExpiry(t) {
		return fmt.Errorf("%s %s is out of range", what, name)
	}
	return nil
}

func validExpiry(t time.Time) bool { return validUnix(t.Unix()) }

func validUnix(u int64) bool { return u >= 1 && u <= maxUnixSeconds }

func expiryFromUnix(u int64) time.Time { return time.Unix(u, 0).UTC() }

// ---------------------------------------------------------------- signed strings

// A format is a signed kind of string: prefix.kid.payload.sig, capped at max bytes, the MAC
// over label || "." || everything before the signature.
type format struct {
	prefix, label string
	max           int
}

func (f *format) maxLen() int { return f.max }

// sealedLen is the length of a sealed string with the given payload and kid.
func (f format) sealedLen(jsonLen, kidLen int) int {
	return len(f.prefix) + 1 + kidLen + 1 + b64.EncodedLen(jsonLen) + 1 + sigB64Len
}

// A format's strings are signed: prefix.kid.payload.sig (handles, download tokens, request
// states, resume seals).
func (f *format) sealJSON(k *Keyring, js []byte) string         { return k.seal(*f, js) }
func (f *format) openJSON(k *Keyring, s string) ([]byte, error) { return k.open(*f, s) }

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

// Encrypted strings (cursors, sessions, login states): aeadSealer, cursor.go.
