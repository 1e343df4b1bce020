package handle

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/url"
	"time"
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
)

// maxKindLen is the longest job kind a handle may carry.
const maxKindLen = 32

var (
	handleFormat = format{HandlePrefix, handleLabel, MaxHandleLen}
	handleKind   = kind[Handle, handleWire]{&handleFormat, "handle:", "handle"}
)

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
	if err := requireStrings("handle:", field{"tenant", h.Tenant}, field{"workflow ID", h.WorkflowID}); err != nil {
		return err
	}
	if !validKind(h.Kind) {
		return fmt.Errorf("handle: kind must match ^[a-z][a-z0-9_]{0,%d}$", maxKindLen-1)
	}
	return nil
}

// Validate reports whether SealHandle can seal h with any keyring: fields
// set and valid, and the sealed string within [MaxHandleLen].
func (h Handle) Validate() error { return handleKind.validate(h, " (tenant or workflow ID too long)") }

// SealHandle returns h signed with the current key. It returns "" — which
// never opens — if h is invalid or too long; use [Handle.Validate] first when
// the fields are not known to be good.
func (k *Keyring) SealHandle(h Handle) string { return handleKind.seal(k, h) }

// OpenHandle verifies s (in constant time) with the key its kid names and
// decodes it. Errors match [ErrMalformed] or [ErrExpired]. With ErrExpired
// the decoded Handle is returned too, so the caller can check the tenant
// first; with ErrMalformed the Handle is zero.
func (k *Keyring) OpenHandle(s string, now time.Time) (Handle, error) {
	return handleKind.open(k, s, now)
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
