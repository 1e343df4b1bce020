package handle

import (
	"time"
)

const (
	// MaxAppNonceLen is the longest string OpenAppNonce looks at; SealAppNonce never produces one.
	MaxAppNonceLen = 1024

	// AppNoncePrefix starts every app decision nonce; the digit is the format version.
	AppNoncePrefix = "jgan1"

	appNonceLabel = "jobgate-app-decision-nonce-v1"
)

var (
	appNonceFormat = format{AppNoncePrefix, appNonceLabel, MaxAppNonceLen}
	appNonceKind   = kind[AppNonce, appNonceWire]{&appNonceFormat, "handle: app nonce", "app nonce"}
)

// AppNonce is what jobgate hands an MCP Apps approval card (only in a tool result's _meta,
// which hosts keep from the model) so that the card's decision, sent through the app-only
// decision tool, can be told from a call a model composed from what it read: it names the
// approver (tenant and subject of the token the card's result was fetched with), the job and
// the open request (input ID and scope digest) it was shown for — its Request, what an MRTR
// State binds but the tool call — and expires within minutes.
// Sealed with the resume keys, under a label of its own, so no other token kind opens as one.
type AppNonce struct {
	Request
	Expiry time.Time
}

type appNonceWire struct {
	V int `json:"v"`
	requestWire
	E int64 `json:"e"` // expiry, Unix seconds
}

func (n AppNonce) wire() appNonceWire {
	return appNonceWire{V: payloadVersion, requestWire: n.Request.wire(), E: n.Expiry.Unix()}
}

func (w appNonceWire) header() (int, int64) { return w.V, w.E }

func (w appNonceWire) token() (AppNonce, bool) {
	return AppNonce{Request: w.request(), Expiry: expiryFromUnix(w.E)}, true
}

func (n AppNonce) validateFields() error {
	return requireStrings("handle: app nonce", n.Request.fields()...)
}

// Validate reports whether SealAppNonce can seal n: fields set and valid, within MaxAppNonceLen.
func (n AppNonce) Validate() error { return appNonceKind.validate(n, "") }

// SealAppNonce returns n signed with the current key, or "" (which never opens) if n is invalid.
func (k *Keyring) SealAppNonce(n AppNonce) string { return appNonceKind.seal(k, n) }

// OpenAppNonce is OpenHandle for app nonces: errors match [ErrMalformed] or [ErrExpired]; with
// ErrExpired the decoded AppNonce is returned too.
func (k *Keyring) OpenAppNonce(str string, now time.Time) (AppNonce, error) {
	return appNonceKind.open(k, str, now)
}
