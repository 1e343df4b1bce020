package handle

import (
	"encoding/json"
	"time"
)

// The steps every kind of sealed string shares are written once here; each kind keeps its own
// wire struct, field rules, error messages, format and limit in its own file. Every kind seals
// and opens the same way:
//
//	seal: fields valid → JSON of the wire struct → sealer (length cap, sign or encrypt)
//	open: sealer (length cap, shape, key, signature or tag) → canonical JSON → version →
//	      expiry in range → the kind's own fields → expiry against now
//
// so a rule of the sequence (say, check the binding fields before expiry) cannot be forgotten
// in one kind.

// A sealable is the Go value of one kind of sealed string (Handle, Cursor, Download, State,
// Resume); W is its wire struct, the compact JSON object the string carries.
type sealable[W any] interface {
	// wire is the payload to seal, with payloadVersion and the expiry in Unix seconds.
	wire() W
	// validateFields is the kind's own check of its fields; its errors are Validate's.
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
// encrypted (cursorSealer).
type sealer interface {
	// sealedLen is the length of the sealed string for a jsonLen-byte payload and a
	// kidLen-byte key ID.
	sealedLen(jsonLen, kidLen int) int
	// sealJSON seals js with the ring's current key, or returns "" beyond the kind's limit.
	sealJSON(k *Keyring, js []byte) string
	// openJSON checks everything but the payload and returns the payload JSON; its errors
	// match ErrMalformed.
	openJSON(k *Keyring, s string) ([]byte, error)
}

// sealedSize returns how long t would be sealed under the longest possible key ID, or t's own
// field error. Validate methods compare it with their limit and word the error themselves.
func sealedSize[T sealable[W], W any](s sealer, t T) (int, error) {
	if err := t.validateFields(); err != nil {
		return 0, err
	}
	js, _ := json.Marshal(t.wire())
	return s.sealedLen(len(js), MaxKIDLen), nil
}

// sealToken returns t sealed with k's current key, or "" — which never opens — if k is nil or
// t is invalid or too long.
func sealToken[T sealable[W], W any](k *Keyring, s sealer, t T) string {
	if k == nil || t.validateFields() != nil {
		return ""
	}
	js, err := json.Marshal(t.wire())
	if err != nil {
		return ""
	}
	return s.sealJSON(k, js)
}

// openToken opens str as a T. Errors match ErrMalformed (and the T is zero) or ErrExpired (and
// the decoded T is returned too, so the caller can check its binding before its expiry).
func openToken[T sealable[W], W payload[T]](k *Keyring, s sealer, str string, now time.Time) (T, error) {
	var zero T
	js, err := s.openJSON(k, str)
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
	if e < 1 || e > maxUnixSeconds {
		return zero, errFields
	}
	t, ok := w.token()
	if !ok || t.validateFields() != nil {
		return zero, errFields
	}
	if !now.Before(expiryFromUnix(e)) {
		return t, ErrExpired
	}
	return t, nil
}

// A format's strings are signed: prefix.kid.payload.sig (handles, download tokens, request
// states, resume seals).
func (f *format) sealJSON(k *Keyring, js []byte) string         { return k.seal(*f, js) }
func (f *format) openJSON(k *Keyring, s string) ([]byte, error) { return k.open(*f, s) }

// cursorSealer's strings are encrypted: jgc2.kid.ciphertext (cursor.go).
type cursorSealer struct{}

func (cursorSealer) sealedLen(jsonLen, kidLen int) int             { return cursorSealedLen(jsonLen, kidLen) }
func (cursorSealer) sealJSON(k *Keyring, js []byte) string         { return k.sealCursorJSON(js, MaxCursorLen) }
func (cursorSealer) openJSON(k *Keyring, s string) ([]byte, error) { return k.openCursorJSON(s) }
