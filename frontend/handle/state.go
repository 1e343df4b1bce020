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
// request of which job was put to which principal (its Request), through which tool call. The
// client echoes it with its answer, on any replica; it is attacker-controlled input, so
// everything that decides what the answer may do is bound here and re-checked against the job.
type State struct {
	Request
	Tool       string // the tool whose call carried the elicitation
	ArgsDigest string // digest of that call's arguments (without inputResponses/requestState)
	Expiry     time.Time
}

// Request names one open input request of one job as it was put to one principal: what a
// State and an AppNonce both bind, and what their opener checks against the caller and the
// job it reached before anything else.
type Request struct {
	Tenant      string
	Subject     string // the principal the request was put to
	WorkflowID  string
	InputID     string
	ScopeDigest string
}

// PutTo reports whether r was put to the principal (tenant, subject) about workflow workflowID.
func (r Request) PutTo(tenant, subject, workflowID string) bool {
	return r.Tenant == tenant && r.Subject == subject && r.WorkflowID == workflowID
}

// requestWire is a Request in a wire struct, embedded: encoding/json flattens it, so each
// payload carries these fields where the kind's own wire struct puts it.
type requestWire struct {
	T string `json:"t"` // tenant
	S string `json:"s"` // subject
	W string `json:"w"` // workflow ID
	I string `json:"i"` // input ID
	D string `json:"d"` // scope digest
}

func (r Request) wire() requestWire {
	return requestWire{T: r.Tenant, S: r.Subject, W: r.WorkflowID, I: r.InputID, D: r.ScopeDigest}
}

func (w requestWire) request() Request {
	return Request{Tenant: w.T, Subject: w.S, WorkflowID: w.W, InputID: w.I, ScopeDigest: w.D}
}

// fields are r's fields for requireStrings: all required.
func (r Request) fields() []field {
	return []field{{"tenant", r.Tenant}, {"subject", r.Subject}, {"workflow ID", r.WorkflowID}, {"input ID", r.InputID},
		{"scope digest", r.ScopeDigest}}
}

type stateWire struct {
	V int `json:"v"`
	requestWire
	O string `json:"o"` // tool
	A string `json:"a"` // arguments digest
	E int64  `json:"e"` // expiry, Unix seconds
}

func (s State) wire() stateWire {
	return stateWire{V: payloadVersion, requestWire: s.Request.wire(), O: s.Tool, A: s.ArgsDigest, E: s.Expiry.Unix()}
}

func (w stateWire) header() (int, int64) { return w.V, w.E }

func (w stateWire) token() (State, bool) {
	return State{Request: w.request(), Tool: w.O, ArgsDigest: w.A, Expiry: expiryFromUnix(w.E)}, true
}

func (s State) validateFields() error {
	return requireStrings("handle: request state", append(s.Request.fields(), field{"tool", s.Tool},
		field{"arguments digest", s.ArgsDigest})...)
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
