package handle

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
)

const (
	// MinKeyLen is the minimum HMAC key length in bytes.
	MinKeyLen = 32
	// MaxKIDLen is the maximum length of a key ID.
	MaxKIDLen = 16
)

// Keyring holds HMAC keys by key ID. The current key signs; every key
// verifies, which is how keys are rotated: add the new key as current, keep the
// old one until everything it signed has expired, then drop it.
//
// A Keyring is immutable and safe for concurrent use. Its String, GoString
// and LogValue methods never reveal key material.
type Keyring struct {
	current string
	keys    map[string][]byte
	macs    map[string]*macPool // by key ID, the same keys; nil in a ring built without NewKeyring
	// aeads holds each key's derived encryption keys of each encrypted kind (cursor.go); nil in
	// a ring built without NewKeyring, which derives them per use.
	aeads map[aeadID]*aeadKeys
}

// NewKeyring returns a keyring whose current (signing) key is
// keys[currentKID]. Every key must be at least [MinKeyLen] bytes and every key
// ID 1–[MaxKIDLen] characters of [A-Za-z0-9_-]. The keys are copied.
func NewKeyring(currentKID string, keys map[string][]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("handle: keyring has no keys")
	}
	kr := &Keyring{current: currentKID, keys: make(map[string][]byte, len(keys)), macs: make(map[string]*macPool, len(keys)),
		aeads: make(map[aeadID]*aeadKeys, len(keys)*len(aeadSealers))}
	for _, kid := range slices.Sorted(maps.Keys(keys)) {
		if !validKID(kid) {
			return nil, fmt.Errorf("handle: invalid key ID %q (want 1-%d characters of [A-Za-z0-9_-])", kid, MaxKIDLen)
		}
		key := keys[kid]
		if len(key) < MinKeyLen {
			return nil, fmt.Errorf("handle: key %q is %d bytes, need at least %d", kid, len(key), MinKeyLen)
		}
		kr.keys[kid] = slices.Clone(key)
		kr.macs[kid] = newMACPool(kr.keys[kid])
		for _, a := range aeadSealers {
			kr.aeads[aeadID{a.prefix, kid}] = a.deriveKeys(kr.keys[kid])
		}
	}
	if _, ok := kr.keys[currentKID]; !ok {
		if !validKID(currentKID) {
			return nil, fmt.Errorf("handle: invalid current key ID (want 1-%d characters of [A-Za-z0-9_-])", MaxKIDLen)
		}
		return nil, fmt.Errorf("handle: current key ID %q has no key", currentKID)
	}
	return kr, nil
}

// ParseKeyring parses a keyring spec of the form
//
//	kid1:KEY1,kid0:KEY0
//
// where the FIRST entry is the current (signing) key and the others only
// verify. Each KEY is hex or base64 (standard or URL alphabet, padded or not);
// a key made only of an even number of hex digits is read as hex. Prefix a key
// with "hex:" or "base64:" to remove the ambiguity. Spaces around entries are
// ignored. Errors name the entry (by position and, when valid, key ID) and
// the problem, and never contain key material.
func ParseKeyring(spec string) (*Keyring, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("handle: keyring spec is empty")
	}
	keys := make(map[string][]byte)
	var current string
	for i, entry := range strings.Split(spec, ",") {
		n := i + 1
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, fmt.Errorf("handle: keyring entry %d is empty", n)
		}
		kid, enc, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, fmt.Errorf("handle: keyring entry %d: want <kid>:<key>", n)
		}
		kid = strings.TrimSpace(kid)
		if !validKID(kid) {
			// Do not echo: a malformed entry may be key material.
			return nil, fmt.Errorf("handle: keyring entry %d: invalid key ID (want 1-%d characters of [A-Za-z0-9_-])", n, MaxKIDLen)
		}
		if _, dup := keys[kid]; dup {
			return nil, fmt.Errorf("handle: keyring entry %d: duplicate key ID %q", n, kid)
		}
		key, err := decodeKey(strings.TrimSpace(enc))
		if err != nil {
			return nil, fmt.Errorf("handle: keyring entry %d (key ID %q): %v", n, kid, err)
		}
		if len(key) < MinKeyLen {
			return nil, fmt.Errorf("handle: keyring entry %d (key ID %q): key is %d bytes, need at least %d", n, kid, len(key), MinKeyLen)
		}
		keys[kid] = key
		if i == 0 {
			current = kid
		}
	}
	return NewKeyring(current, keys)
}

var base64Encodings = []*base64.Encoding{
	base64.StdEncoding.Strict(),
	base64.RawStdEncoding.Strict(),
	base64.URLEncoding.Strict(),
	base64.RawURLEncoding.Strict(),
}

// decodeKey decodes hex or base64 key text. Its errors never contain s.
func decodeKey(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("key is empty")
	}
	switch {
	case strings.HasPrefix(s, "hex:"):
		b, err := hex.DecodeString(s[len("hex:"):])
		if err != nil {
			return nil, errors.New("key is not valid hex")
		}
		return b, nil
	case strings.HasPrefix(s, "base64:"):
		if b, ok := decodeBase64(s[len("base64:"):]); ok {
			return b, nil
		}
		return nil, errors.New("key is not valid base64")
	}
	if b, err := hex.DecodeString(s); err == nil {
		return b, nil
	}
	if b, ok := decodeBase64(s); ok {
		return b, nil
	}
	return nil, errors.New("key is neither valid hex nor valid base64")
}

func decodeBase64(s string) ([]byte, bool) {
	// The decoders skip '\r' and '\n'; a key spec has no business holding them.
	if s == "" || strings.ContainsAny(s, "\r\n") {
		return nil, false
	}
	for _, enc := range base64Encodings {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

func validKID(kid string) bool {
	if len(kid) == 0 || len(kid) > MaxKIDLen {
		return false
	}
	for i := 0; i < len(kid); i++ {
		if !isKIDByte(kid[i]) {
			return false
		}
	}
	return true
}

func isKIDByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// CurrentKID returns the ID of the signing key.
func (k *Keyring) CurrentKID() string {
	if k == nil {
		return ""
	}
	return k.current
}

// KIDs returns the IDs of all verifying keys, sorted.
func (k *Keyring) KIDs() []string {
	if k == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(k.keys))
}

// String describes the ring without key material.
func (k Keyring) String() string {
	return fmt.Sprintf("handle.Keyring{current: %s, kids: %v}", k.current, k.KIDs())
}

// Format makes every fmt verb (%v, %+v, %#v, %x, %d, ...) print String, so
// formatting a Keyring or *Keyring never prints key material.
func (k Keyring) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, k.String()) }

// LogValue implements [slog.LogValuer] without key material.
func (k *Keyring) LogValue() slog.Value {
	if k == nil {
		return slog.StringValue("nil")
	}
	return slog.GroupValue(slog.String("current", k.current), slog.Any("kids", k.KIDs()))
}

// GenerateKey returns [MinKeyLen] fresh random bytes, e.g. for a dev keyring.
func GenerateKey() []byte {
	b := make([]byte, MinKeyLen)
	// crypto/rand.Read never returns an error (it aborts the program instead).
	_, _ = rand.Read(b)
	return b
}

// GenerateKeyHex returns a fresh key hex-encoded, ready for a keyring spec
// such as "k1:"+GenerateKeyHex().
func GenerateKeyHex() string { return hex.EncodeToString(GenerateKey()) }

// mac returns HMAC-SHA256(key, label || "." || signed).
func mac(key []byte, label string, signed string) []byte {
	h := hmac.New(sha256.New, key)
	_, _ = io.WriteString(h, label)
	_, _ = io.WriteString(h, ".")
	_, _ = io.WriteString(h, signed)
	return h.Sum(make([]byte, 0, sha256.Size))
}

// verifyMAC reports whether sig is HMAC-SHA256(key kid of k, label || "." || signed),
// comparing in constant time.
func verifyMAC(k *Keyring, kid, label, signed string, sig []byte) bool {
	var want [sha256.Size]byte
	macInto(k, kid, label, signed, &want)
	return hmac.Equal(sig, want[:])
}

// macPool hands out HMAC-SHA256 states keyed with one key. An HMAC's Reset returns it to the
// state just after the key, so a pooled state signs or verifies without allocating and without
// hashing the key pads again: mac builds a fresh state per call (about eight allocations).
type macPool struct {
	key  []byte
	pool sync.Pool // of *macState
}

type macState struct {
	h   hash.Hash
	in  []byte // label || "." || signed, reused
	out []byte // the sum, reused
}

func newMACPool(key []byte) *macPool {
	mp := &macPool{key: key}
	mp.pool.New = func() any {
		return &macState{h: hmac.New(sha256.New, mp.key), out: make([]byte, 0, sha256.Size)}
	}
	return mp
}

// macInto sets out to HMAC-SHA256(key kid, label || "." || signed), the same value as mac, using
// the ring's pooled state for kid when it has one.
func macInto[S ~string | ~[]byte](k *Keyring, kid, label string, signed S, out *[sha256.Size]byte) {
	mp := k.macs[kid]
	if mp == nil {
		copy(out[:], mac(k.keys[kid], label, string(signed)))
		return
	}
	st := mp.pool.Get().(*macState)
	st.in = append(append(append(st.in[:0], label...), '.'), signed...)
	st.h.Reset()
	_, _ = st.h.Write(st.in)
	st.out = st.h.Sum(st.out[:0])
	copy(out[:], st.out)
	if cap(st.in) <= 2*MaxCursorLen { // keep pooled buffers small
		mp.pool.Put(st)
	}
}
