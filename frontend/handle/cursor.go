package handle

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
)

// Cursors are encrypted, not only signed: a cursor carries Temporal's page token, which names
// the position of the next row (its start time, workflow ID and run ID), and the binding to a
// principal and a query. Whoever holds a cursor learns nothing from it; only a frontend holding
// the keyring can read or make one.
//
//	jgc2.<kid>.<base64url(nonce || AES-256-GCM(payload JSON) || tag)>
//
// The AES key and a nonce key are derived from the keyring's key <kid> with HKDF-SHA256 (one
// derivation per purpose, so the HMAC key of handles is never used as a cipher key). The nonce is
// synthetic — HMAC-SHA256(nonce key, header || payload), truncated to 96 bits — and checked on
// open: sealing is deterministic (the same cursor seals to the same string, which keeps the
// fuzz targets' re-seal property and known-answer seeds), a nonce never repeats for different
// payloads short of an HMAC collision, and only strings this package made open. The header
// "jgc2.<kid>" is the additional data, so prefix and key ID cannot be swapped. Rotation works as
// for handles: the current key seals, every key of the ring opens.
const (
	// CursorPrefix starts every sealed cursor; the digit is the format version (jgc1 cursors
	// were signed JSON, readable by their holder; they are no longer accepted).
	CursorPrefix = "jgc2"

	cursorLabel    = "jobgate-cursor-v2"
	cursorNonceLen = 12 // GCM's standard nonce
	cursorTagLen   = 16
)

// errSealed: the ciphertext does not authenticate under the key its kid names (tampered,
// truncated, another ring's, or not made by this package).
var errSealed = fmt.Errorf("%w: ciphertext does not authenticate", ErrMalformed)

// An aeadSealer is an encrypted kind of string: prefix.kid.base64url(nonce || AES-256-GCM || tag),
// at most max bytes, its keys derived from the ring's key kid with HKDF-SHA256 under info strings
// of its own label (so no two kinds, and never the handle MAC, share a key): "<label> aes-256-gcm"
// for the cipher key and "<label> synthetic-nonce" for the nonce key, the rule written once here
// as a format's label is. Cursors are the first such kind; browser sessions and login states
// (session.go), event positions and comment drafts are the others. Every kind seals exactly as
// the cursor always has, so cursors stay byte-identical.
type aeadSealer struct {
	prefix, label string
	max           int
}

var (
	cursorAEAD = &aeadSealer{CursorPrefix, cursorLabel, MaxCursorLen}
	cursorKind = kind[Cursor, cursorWire]{cursorAEAD, "handle: cursor", "cursor"}
)

// aeadSealers are the encrypted kinds; NewKeyring derives each one's keys once per key.
var aeadSealers = []*aeadSealer{cursorAEAD, sessionAEAD, loginStateAEAD, eventPosAEAD, commentDraftAEAD}

// aeadKeys are one keyring key's derived keys for one kind. cipher.AEAD is safe for concurrent use.
type aeadKeys struct {
	aead     cipher.AEAD
	nonceKey []byte
}

// aeadID names one kind's derived keys of one key ID in Keyring.aeads.
type aeadID struct{ prefix, kid string }

func (a *aeadSealer) deriveKeys(key []byte) *aeadKeys {
	enc, err := hkdf.Key(sha256.New, key, nil, a.label+" aes-256-gcm", 32)
	if err != nil {
		panic("handle: HKDF: " + err.Error()) // only for lengths HKDF-SHA256 cannot produce
	}
	nk, err := hkdf.Key(sha256.New, key, nil, a.label+" synthetic-nonce", 32)
	if err != nil {
		panic("handle: HKDF: " + err.Error())
	}
	block, err := aes.NewCipher(enc)
	if err != nil {
		panic("handle: AES: " + err.Error()) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("handle: GCM: " + err.Error())
	}
	return &aeadKeys{aead: aead, nonceKey: nk}
}

// aeadKeysFor returns a's derived keys of kid (which must be in the ring).
func (k *Keyring) aeadKeysFor(a *aeadSealer, kid string) *aeadKeys {
	if ak := k.aeads[aeadID{a.prefix, kid}]; ak != nil {
		return ak
	}
	return a.deriveKeys(k.keys[kid])
}

func (ak *aeadKeys) nonce(header string, js []byte) []byte {
	m := hmac.New(sha256.New, ak.nonceKey)
	m.Write([]byte(header))
	m.Write(js)
	return m.Sum(nil)[:cursorNonceLen]
}

// sealedLen is the length of a sealed string with a jsonLen-byte payload and kid.
func (a *aeadSealer) sealedLen(jsonLen, kidLen int) int {
	return len(a.prefix) + 1 + kidLen + 1 + b64.EncodedLen(cursorNonceLen+jsonLen+cursorTagLen)
}

func (a *aeadSealer) maxLen() int                                   { return a.max }
func (a *aeadSealer) sealJSON(k *Keyring, js []byte) string         { return k.sealAEAD(a, js, a.max) }
func (a *aeadSealer) openJSON(k *Keyring, s string) ([]byte, error) { return k.openAEAD(a, s) }

// sealCursorJSON encrypts js as a cursor with the current key, or returns "" beyond limit
// bytes (tests seal arbitrary payloads with it).
func (k *Keyring) sealCursorJSON(js []byte, limit int) string {
	return k.sealAEAD(cursorAEAD, js, limit)
}

// sealAEAD encrypts js as a's kind with the current key, or returns "" beyond limit bytes.
func (k *Keyring) sealAEAD(a *aeadSealer, js []byte, limit int) string {
	kid := k.current
	if a.sealedLen(len(js), len(kid)) > limit {
		return ""
	}
	header := a.prefix + "." + kid
	ak := k.aeadKeysFor(a, kid)
	nonce := ak.nonce(header, js)
	sealed := ak.aead.Seal(append(make([]byte, 0, cursorNonceLen+len(js)+cursorTagLen), nonce...), nonce, js, []byte(header))
	return header + "." + b64.EncodeToString(sealed)
}

// openAEAD checks size, shape, prefix and kid, then decrypts and authenticates, and returns
// the payload JSON.
func (k *Keyring) openAEAD(a *aeadSealer, s string) ([]byte, error) {
	kid, payload, err := k.checkShape(s, a.max, 2, a.prefix)
	if err != nil {
		return nil, err
	}
	sealed, err := b64.DecodeString(payload)
	if err != nil {
		return nil, errPayload
	}
	if len(sealed) < cursorNonceLen+cursorTagLen {
		return nil, errSealed
	}
	header := a.prefix + "." + kid
	ak := k.aeadKeysFor(a, kid)
	nonce := sealed[:cursorNonceLen]
	js, err := ak.aead.Open(nil, nonce, sealed[cursorNonceLen:], []byte(header))
	if err != nil || !hmac.Equal(nonce, ak.nonce(header, js)) {
		return nil, errSealed
	}
	return js, nil
}

// Cursor is a position in one list traversal by one principal.
type Cursor struct {
	Tenant    string
	Subject   string // the principal's "sub"
	Tool      string // e.g. "list_jobs"
	Filter    string // FilterFingerprint of the normalized filters
	PageToken []byte // Temporal's next page token; never empty
	Expiry    time.Time
}

type cursorWire struct {
	V int    `json:"v"`
	T string `json:"t"` // tenant
	S string `json:"s"` // subject
	O string `json:"o"` // tool (operation)
	F string `json:"f"` // filter fingerprint
	P []byte `json:"p"` // page token (standard base64 inside the JSON)
	E int64  `json:"e"` // expiry, Unix seconds
}

func (c Cursor) wire() cursorWire {
	return cursorWire{V: payloadVersion, T: c.Tenant, S: c.Subject, O: c.Tool, F: c.Filter, P: c.PageToken, E: c.Expiry.Unix()}
}

func (w cursorWire) header() (int, int64) { return w.V, w.E }

func (w cursorWire) token() (Cursor, bool) {
	return Cursor{Tenant: w.T, Subject: w.S, Tool: w.O, Filter: w.F, PageToken: w.P, Expiry: expiryFromUnix(w.E)}, true
}

func (c Cursor) validateFields() error {
	if err := requireStrings("handle: cursor", field{"tenant", c.Tenant}, field{"subject", c.Subject}, field{"tool", c.Tool},
		field{"filter fingerprint", c.Filter}); err != nil {
		return err
	}
	if len(c.PageToken) == 0 {
		// A cursor without a page token would silently restart the listing.
		return errors.New("handle: cursor page token is empty")
	}
	return nil
}

// Validate reports whether SealCursor can seal c with any keyring: fields
// set and valid, and the sealed string within [MaxCursorLen].
func (c Cursor) Validate() error {
	return cursorKind.validate(c, fmt.Sprintf(" (page token is %d bytes)", len(c.PageToken)))
}

// SealCursor returns c encrypted and authenticated with the current key, or "" if c is
// invalid or too long (see [Cursor.Validate]).
func (k *Keyring) SealCursor(c Cursor) string { return cursorKind.seal(k, c) }

// OpenCursor is OpenHandle for cursors: errors match [ErrMalformed] or
// [ErrExpired], and with ErrExpired the decoded Cursor is returned so the
// caller can check Tenant, Subject, Tool and Filter first.
func (k *Keyring) OpenCursor(s string, now time.Time) (Cursor, error) {
	return cursorKind.open(k, s, now)
}
