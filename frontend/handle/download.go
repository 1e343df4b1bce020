package handle

import (
	"errors"
	"time"
)

const (
	// MaxDownloadLen is the longest string OpenDownload looks at; longer
	// input is rejected before any other work, and SealDownload never
	// produces one. It leaves room for any tenant and workflow ID a handle
	// can carry plus a subject of a few hundred bytes, and keeps
	// "https://<host>/artifacts/<token>" well under the 2 KiB that every
	// browser, proxy and log pipeline handles.
	MaxDownloadLen = 1536

	// DownloadPrefix starts every sealed download token; the trailing digit
	// is the format version.
	DownloadPrefix = "jgd1"

	downloadLabel = "jobgate-download-v1"

	digestHexLen = 64 // hex of a SHA-256
)

var (
	downloadFormat = format{DownloadPrefix, downloadLabel, MaxDownloadLen}
	downloadKind   = kind[Download, downloadWire]{&downloadFormat, "handle: download", "download token"}
)

// Download is a short-lived link to one artifact of one job, for
// GET /artifacts/<token>. It is bound to the principal it was issued to and
// to the exact bytes of the artifact, and — like a handle — it is not a
// permission on its own: the request must also carry that principal's (or a
// tenant admin's) bearer token.
type Download struct {
	Tenant     string
	WorkflowID string
	Subject    string    // the principal's "sub" it was issued to
	Digest     string    // lowercase hex SHA-256 (64 characters) of the artifact it names
	Expiry     time.Time // second precision: sealing truncates to the second
}

type downloadWire struct {
	V int    `json:"v"`
	T string `json:"t"` // tenant
	W string `json:"w"` // workflow ID
	S string `json:"s"` // subject
	D string `json:"d"` // artifact digest, lowercase hex SHA-256
	E int64  `json:"e"` // expiry, Unix seconds
}

func (d Download) wire() downloadWire {
	return downloadWire{V: payloadVersion, T: d.Tenant, W: d.WorkflowID, S: d.Subject, D: d.Digest, E: d.Expiry.Unix()}
}

func (w downloadWire) header() (int, int64) { return w.V, w.E }

func (w downloadWire) token() (Download, bool) {
	return Download{Tenant: w.T, WorkflowID: w.W, Subject: w.S, Digest: w.D, Expiry: expiryFromUnix(w.E)}, true
}

// validDigest reports whether s is 64 lowercase hex digits. Only one
// spelling is accepted, so the digest compares with ==.
func validDigest(s string) bool { return len(s) == digestHexLen && lowerHex(s) }

// lowerHex reports whether s is all lowercase hex digits: the one spelling of a digest that
// sealed strings accept (SHA-256 digests here, event positions' view digests).
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (d Download) validateFields() error {
	if err := requireStrings("handle: download", field{"tenant", d.Tenant}, field{"workflow ID", d.WorkflowID},
		field{"subject", d.Subject}); err != nil {
		return err
	}
	if !validDigest(d.Digest) {
		return errors.New("handle: download digest is not 64 lowercase hex digits (SHA-256)")
	}
	return nil
}

// Validate reports whether SealDownload can seal d with any keyring: fields
// set and valid, and the sealed string within [MaxDownloadLen].
func (d Download) Validate() error {
	return downloadKind.validate(d, " (tenant, workflow ID or subject too long)")
}

// SealDownload returns d signed with the current key, or "" — which never
// opens — if d is invalid or too long (see [Download.Validate]).
func (k *Keyring) SealDownload(d Download) string { return downloadKind.seal(k, d) }

// OpenDownload is OpenHandle for download tokens: errors match
// [ErrMalformed] or [ErrExpired], and with ErrExpired the decoded Download is
// returned too; with ErrMalformed it is zero.
func (k *Keyring) OpenDownload(s string, now time.Time) (Download, error) {
	return downloadKind.open(k, s, now)
}
