package handle

import (
	"time"
)

const (
	// MaxStateLen is the longest string OpenState looks at; SealState never produces one.
	MaxStateLen = 2048

	// StatePrefix starts every sealed MRTR request state; the digit is the format version.
	StatePrefix = "jgs1"

	stateLabel = "jobgate-request-state-v1"
)

var (
	stateFormat = format{StatePrefix, stateLabel, MaxStateLen}
	stateKind   = kind[State, stateWire]{&stateFormat, "handle: request state", "request state"}
)

// State is the sealed requestState of a multi-round-trip (MRTR) tool result: which open input
// request of which job was put to which principal, through which tool call. The client echoes
// it with its answer, on any replica; it is attacker-controlled input, so everything that
// decides what the answer may do is bound here and re-checked against the job.
type State struct {
	Tenant      string
	Subject     string // the principal the elicitation was put to
	WorkflowID  string
	InputID     string
	ScopeDigest string
	Tool        string // the tool whose call carried the elicitation
	ArgsDigest  string // digest of that call's arguments (without inputResponses/requestState)
	Expiry      time.Time
}

type stateWire struct {
	V int    `json:"v"`
	T string `json:"t"` // tenant
	S string `json:"s"` // subject
	W string `json:"w"` // workflow ID
	I string `json:"i"` // input ID
	D string `json:"d"` // scope digest
	O string `json:"o"` // tool
	A string `json:"a"` // arguments digest
	E int64  `json:"e"` // expiry, Unix seconds
}

func (s State) wire() stateWire {
	return stateWire{V: payloadVersion, T: s.Tenant, S: s.Subject, W: s.WorkflowID, I: s.InputID, D: s.ScopeDigest,
		O: s.Tool, A: s.ArgsDigest, E: s.Expiry.Unix()}
}

func (w stateWire) header() (int, int64) { return w.V, w.E }

func (w stateWire) token() (State, bool) {
	return State{Tenant: w.T, Subject: w.S, WorkflowID: w.W, InputID: w.I, ScopeDigest: w.D, Tool: w.O, ArgsDigest: w.A,
		Expiry: expiryFromUnix(w.E)}, true
}

func (s State) validateFields() error {
	return requireStrings("handle: request state", field{"tenant", s.Tenant}, field{"subject", s.Subject},
		field{"workflow ID", s.WorkflowID}, field{"input ID", s.InputID}, field{"scope digest", s.ScopeDigest},
		field{"tool", s.Tool}, field{"arguments digest", s.ArgsDigest})
}

// Validate reports whether SealState can seal s: fields set and valid, within MaxStateLen.
func (s State) Validate() error { return stateKind.validate(s, "") }

// SealState returns s signed with the current key, or "" (which never opens) if s is invalid.
func (k *Keyring) SealState(s State) string { return stateKind.seal(k, s) }

// OpenState is OpenHandle for request states: errors match [ErrMalformed] or [ErrExpired]; with
// ErrExpired the decoded State is returned too.
func (k *Keyring) OpenState(str string, now time.Time) (State, error) {
	return stateKind.open(k, str, now)
}
