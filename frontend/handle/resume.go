package handle

import (
	"errors"
	"time"
)

const (
	// MaxResumeLen is the longest string OpenResume looks at; SealResume never produces one.
	// It leaves room for a principal with a few dozen scopes, workflow IDs of a few hundred
	// bytes and an approver at authz's Person limits (name, email, acr of 256 bytes, 8 amr
	// values of 32, each JSON-escaped up to six times over).
	MaxResumeLen = 16384

	// ResumePrefix starts every resume seal; the digit is the format version.
	ResumePrefix = "jgr1"

	resumeLabel = "jobgate-resume-seal-v1"

	// maxResumeScopes bounds the scopes a sealed principal may carry.
	maxResumeScopes = 64
	// maxResumeAMR bounds the authentication methods a sealed approver may carry.
	maxResumeAMR = 16
)

var (
	resumeFormat = format{ResumePrefix, resumeLabel, MaxResumeLen}
	resumeKind   = kind[Resume, resumeWire]{&resumeFormat, "handle: resume seal", "resume"}
)

// Resume is the seal a frontend puts on every answer it sends to a job (resume_*, an MRTR
// answer, tasks/update): it binds the answer to one open input request of one workflow run,
// to the principal whose verified token carried it, and to the exact decision and comment.
// The workflow's update validator opens it with the resume keys, which only frontends and
// workers hold, so an Update sent to Temporal by anyone else (a Temporal client, the Web UI)
// is refused before it reaches history.
//
// Seal resumes with a keyring of their own (the resume keys), never the handle keys: a
// holder of the handle keys (every frontend) could otherwise be confused with a holder of the
// right to answer. The label differs too, so no other sealed string opens as a Resume.
type Resume struct {
	WorkflowID  string
	RunID       string // the run the frontend described and answered
	InputID     string
	ScopeDigest string
	Tenant      string
	Subject     string
	Scopes      []string // the principal's scopes, in token order
	Decision    string
	// CommentDigest is the hex SHA-256 of the comment (workflows.CommentDigest, which the
	// worker checks it with): the seal binds the comment without carrying it twice.
	CommentDigest string
	// Surface is the frontend path that carried the answer ("tool", "mrtr", "tasks"), and
	// SignedInWith how the principal authenticated ("bearer-jwt"); both go to the decision record.
	Surface      string
	SignedInWith string
	// Who the approver is beyond the principal, when the token or session says (all optional,
	// "" or zero when unknown): the token's issuer, the person's name and email, when they last
	// authenticated at the identity provider (auth_time, second precision) and how (amr, acr).
	// They go to the decision record, so the seal binds them too.
	Issuer   string
	Name     string
	Email    string
	AuthTime time.Time // zero: unknown
	AMR      []string
	ACR      string
	// MeaningDigest is the hex SHA-256 of the meaning text the approver was shown (the input
	// request's prompt); "" for none. The record carries the text, the seal binds its digest.
	MeaningDigest string
	// ExtendBy is the canonical JSON of an eval budget answer's extend_by ("" for none).
	ExtendBy string
	Expiry   time.Time // second precision: sealing truncates to the second
}

type resumeWire struct {
	V int      `json:"v"`
	W string   `json:"w"` // workflow ID
	R string   `json:"r"` // run ID
	I string   `json:"i"` // input ID
	D string   `json:"d"` // scope digest
	T string   `json:"t"` // tenant
	S string   `json:"s"` // subject
	P []string `json:"p"` // scopes
	X string   `json:"x"` // decision
	C string   `json:"c"` // comment digest
	U string   `json:"u"` // surface
	A string   `json:"a"` // how the principal signed in
	E int64    `json:"e"` // expiry, Unix seconds
	// Optional approver details (omitted when unknown, so seals made before them still open).
	Iss string   `json:"iss,omitempty"`
	N   string   `json:"n,omitempty"`   // name
	M   string   `json:"m,omitempty"`   // email
	AT  int64    `json:"at,omitempty"`  // auth_time, Unix seconds
	AMR []string `json:"amr,omitempty"` // authentication methods
	ACR string   `json:"acr,omitempty"` // authentication context class
	MD  string   `json:"md,omitempty"`  // meaning digest
	XB  string   `json:"xb,omitempty"`  // extend_by (canonical JSON); omitted when none, so older seals still open
}

func (r Resume) wire() resumeWire {
	p := r.Scopes
	if p == nil {
		p = []string{} // canonical: the wire always has a list
	}
	var at int64
	if !r.AuthTime.IsZero() {
		at = r.AuthTime.Unix()
	}
	return resumeWire{V: payloadVersion, W: r.WorkflowID, R: r.RunID, I: r.InputID, D: r.ScopeDigest, T: r.Tenant,
		S: r.Subject, P: p, X: r.Decision, C: r.CommentDigest, U: r.Surface, A: r.SignedInWith, E: r.Expiry.Unix(),
		Iss: r.Issuer, N: r.Name, M: r.Email, AT: at, AMR: r.AMR, ACR: r.ACR, MD: r.MeaningDigest, XB: r.ExtendBy}
}

func (w resumeWire) header() (int, int64) { return w.V, w.E }

// token refuses a payload without a scope list: wire always writes one (canonical), so a null
// or missing "p" was not sealed by SealResume.
func (w resumeWire) token() (Resume, bool) {
	r := Resume{WorkflowID: w.W, RunID: w.R, InputID: w.I, ScopeDigest: w.D, Tenant: w.T, Subject: w.S, Scopes: w.P,
		Decision: w.X, CommentDigest: w.C, Surface: w.U, SignedInWith: w.A, Expiry: expiryFromUnix(w.E),
		Issuer: w.Iss, Name: w.N, Email: w.M, AMR: w.AMR, ACR: w.ACR, MeaningDigest: w.MD, ExtendBy: w.XB}
	if w.AT != 0 {
		r.AuthTime = time.Unix(w.AT, 0).UTC()
	}
	// An empty amr list is not canonical (wire omits it), so it was not sealed by SealResume.
	return r, w.P != nil && (w.AMR == nil || len(w.AMR) > 0)
}

func (r Resume) validateFields() error {
	if err := requireStrings("handle: resume seal", field{"workflow ID", r.WorkflowID}, field{"run ID", r.RunID},
		field{"input ID", r.InputID}, field{"scope digest", r.ScopeDigest}, field{"tenant", r.Tenant},
		field{"subject", r.Subject}, field{"decision", r.Decision}, field{"surface", r.Surface},
		field{"sign-in method", r.SignedInWith}); err != nil {
		return err
	}
	if !validDigest(r.CommentDigest) {
		return errors.New("handle: resume seal comment digest is not 64 lowercase hex digits (SHA-256)")
	}
	if err := optionalStrings("handle: resume seal", field{"issuer", r.Issuer}, field{"name", r.Name},
		field{"email", r.Email}, field{"acr", r.ACR}); err != nil {
		return err
	}
	if len(r.ExtendBy) > 256 {
		return errors.New("handle: resume seal extend_by is longer than 256 bytes")
	}
	if r.MeaningDigest != "" && !validDigest(r.MeaningDigest) {
		return errors.New("handle: resume seal meaning digest is not 64 lowercase hex digits (SHA-256)")
	}
	if err := optionalTime("handle: resume seal", "auth_time", r.AuthTime); err != nil {
		return err
	}
	return requireLists("handle: resume seal", list{"amr values", "amr value", r.AMR, maxResumeAMR},
		list{"scopes", "scope", r.Scopes, maxResumeScopes})
}

// Validate reports whether SealResume can seal r: fields set and valid, within MaxResumeLen.
func (r Resume) Validate() error { return resumeKind.validate(r, "") }

// SealResume returns r signed with the current key, or "" (which never opens) if r is invalid.
func (k *Keyring) SealResume(r Resume) string { return resumeKind.seal(k, r) }

// OpenResume is OpenHandle for resume seals: errors match [ErrMalformed] or [ErrExpired]; with
// ErrExpired the decoded Resume is returned too. The caller compares every field with the
// request and the run it reached; expiry alone proves nothing.
func (k *Keyring) OpenResume(str string, now time.Time) (Resume, error) {
	return resumeKind.open(k, str, now)
}
