package handle

import (
	"errors"
	"fmt"
	"time"
)

// Event positions are the `id:` of every event of a job event stream (GET /jobs/<handle>/events
// and the notifications/tasks of subscriptions/listen); a client reconnecting sends the last one
// back as Last-Event-ID, to any replica. A position says, for each job the stream watches, how
// far into the job's Temporal history the stream had got (run ID and event ID) and a digest of
// what it last sent for that job, so the replica that resumes sends what changed since and
// nothing twice. It carries run IDs and digests of another principal's view: it is encrypted,
// like a cursor, and bound to tenant, principal and the stream's target (a fingerprint of what
// it watches), so it is worthless anywhere else.
//
//	jge1.<kid>.<base64url(nonce || AES-256-GCM(payload JSON) || tag)>
const (
	// EventPosPrefix starts every sealed event position; the digit is the format version.
	EventPosPrefix = "jge1"
	// MaxEventPosLen is the longest string OpenEventPos looks at; SealEventPos never produces one.
	MaxEventPosLen = 8192
	// MaxEventPosJobs is the most jobs one position can describe (one stream's watched set).
	MaxEventPosJobs = 32
	// maxRunIDLen bounds a run ID (Temporal's are UUIDs: 36 characters).
	maxRunIDLen = 64
	// EventDigestLen is the length of a view digest: lower-case hex.
	EventDigestLen = 16

	eventPosLabel = "jobgate-event-position-v1"
)

var (
	eventPosAEAD = &aeadSealer{EventPosPrefix, eventPosLabel, MaxEventPosLen}
	eventPosKind = kind[EventPos, eventPosWire]{eventPosAEAD, "handle: event position", "event position"}
)

// EventPos is a stream's position in the histories of the jobs it watches.
type EventPos struct {
	Tenant  string
	Subject string // the principal the stream was served to
	// Target fingerprints what the stream watches (the caller's choice of how: see
	// FilterFingerprint); a position of another stream opens but must be ignored.
	Target string
	// Jobs are the positions, one per watched job, in the stream's order.
	Jobs   []JobPos
	Expiry time.Time
}

// JobPos is how far a stream got in one job: the run and the last history event it had read
// when it last rendered the job (zero: not yet), and the digest of what it sent then ("" when
// it has sent nothing for the job).
type JobPos struct {
	Run    string
	Event  int64
	Digest string
}

type jobPosWire struct {
	R string `json:"r"`
	N int64  `json:"n"`
	D string `json:"d"`
}

type eventPosWire struct {
	V int          `json:"v"`
	T string       `json:"t"` // tenant
	S string       `json:"s"` // subject
	G string       `json:"g"` // target fingerprint
	P []jobPosWire `json:"p"` // one per watched job
	E int64        `json:"e"` // expiry, Unix seconds
}

func (p EventPos) wire() eventPosWire {
	w := eventPosWire{V: payloadVersion, T: p.Tenant, S: p.Subject, G: p.Target, P: make([]jobPosWire, len(p.Jobs)), E: p.Expiry.Unix()}
	for i, j := range p.Jobs {
		w.P[i] = jobPosWire{R: j.Run, N: j.Event, D: j.Digest}
	}
	return w
}

func (w eventPosWire) header() (int, int64) { return w.V, w.E }

func (w eventPosWire) token() (EventPos, bool) {
	if w.P == nil {
		return EventPos{}, false
	}
	p := EventPos{Tenant: w.T, Subject: w.S, Target: w.G, Jobs: make([]JobPos, len(w.P)), Expiry: expiryFromUnix(w.E)}
	for i, j := range w.P {
		p.Jobs[i] = JobPos{Run: j.R, Event: j.N, Digest: j.D}
	}
	return p, true
}

func (p EventPos) validateFields() error {
	if err := requireStrings("handle: event position", field{"tenant", p.Tenant}, field{"subject", p.Subject},
		field{"target", p.Target}); err != nil {
		return err
	}
	if len(p.Jobs) == 0 || len(p.Jobs) > MaxEventPosJobs {
		return fmt.Errorf("handle: event position names %d jobs, want 1-%d", len(p.Jobs), MaxEventPosJobs)
	}
	for i, j := range p.Jobs {
		if err := j.validate(); err != nil {
			return fmt.Errorf("handle: event position job %d: %w", i, err)
		}
	}
	return nil
}

// validate: a run ID of printable ASCII (or none, with event 0), a non-negative event ID, a
// digest of EventDigestLen lower-case hex digits or none.
func (j JobPos) validate() error {
	if len(j.Run) > maxRunIDLen {
		return errors.New("run ID too long")
	}
	for i := 0; i < len(j.Run); i++ {
		if c := j.Run[i]; c <= ' ' || c >= 0x7f {
			return errors.New("run ID holds a byte outside printable ASCII")
		}
	}
	if j.Event < 0 || (j.Run == "" && j.Event != 0) {
		return errors.New("event ID negative, or set without a run")
	}
	if j.Digest != "" {
		if len(j.Digest) != EventDigestLen {
			return errors.New("digest of the wrong length")
		}
		if !lowerHex(j.Digest) {
			return errors.New("digest is not lower-case hex")
		}
	}
	return nil
}

// Validate reports whether SealEventPos can seal p: fields set and valid, within MaxEventPosLen.
func (p EventPos) Validate() error { return eventPosKind.validate(p, "") }

// SealEventPos returns p encrypted with the current key, or "" (which never opens) if p is invalid.
func (k *Keyring) SealEventPos(p EventPos) string { return eventPosKind.seal(k, p) }

// OpenEventPos is OpenHandle for event positions: errors match [ErrMalformed] or [ErrExpired];
// with ErrExpired the decoded EventPos is returned too. Check Tenant, Subject and Target
// against the stream before using anything else of it.
func (k *Keyring) OpenEventPos(str string, now time.Time) (EventPos, error) {
	return eventPosKind.open(k, str, now)
}
