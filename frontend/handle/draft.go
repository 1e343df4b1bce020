package handle

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// A comment draft carries what an approver typed on a request page across the fresh sign-in
// that approving a sensitive scope may need (frontend/pages): the page answers "sign in again"
// with a link back to the request holding the draft, and after the sign-in the form is filled
// with it. It used to be a plain ?comment=, so a link the requester wrote filled the approver's
// form with the requester's words, which the approver then sealed as theirs. A draft is
// encrypted (the comment is the approver's, and a URL lands in logs) and bound to the signed-in
// person (issuer, subject, tenant: the sign-in it crosses replaces the session itself) and the
// job, so it fills only the form of the one who typed it, on that request:
//
//	jgt1.<kid>.<base64url(nonce || AES-256-GCM(payload JSON) || tag)>
const (
	// CommentDraftPrefix starts every sealed comment draft; the digit is the format version.
	CommentDraftPrefix = "jgt1"
	// MaxCommentDraftLen is the longest sealed draft: it rides in a return path of at most
	// 1 KiB (the login state's), beside the request page's own path.
	MaxCommentDraftLen = 900
	// CommentDraftTTL is how long a draft fills a form: the time a fresh sign-in takes.
	CommentDraftTTL = 15 * time.Minute

	draftLabel = "jobgate-comment-draft-v1"
)

var (
	commentDraftAEAD = &aeadSealer{CommentDraftPrefix, draftLabel, MaxCommentDraftLen}
	commentDraftKind = kind[CommentDraft, commentDraftWire]{commentDraftAEAD, "handle: comment draft", "comment draft"}
)

// CommentDraft is a comment typed by a person on one job's request page.
type CommentDraft struct {
	Issuer  string // the session's identity provider (iss)
	Subject string // the session's sub
	Tenant  string // the session's tenant
	Job     string // the job's ID, as the request page's path names it
	Comment string // what they typed; never empty
	Expiry  time.Time
}

type commentDraftWire struct {
	V int    `json:"v"`
	I string `json:"i"` // issuer
	S string `json:"s"` // subject
	T string `json:"t"` // tenant
	J string `json:"j"` // job ID
	C string `json:"c"` // comment
	E int64  `json:"e"` // expiry, Unix seconds
}

func (d CommentDraft) wire() commentDraftWire {
	return commentDraftWire{V: payloadVersion, I: d.Issuer, S: d.Subject, T: d.Tenant, J: d.Job, C: d.Comment, E: d.Expiry.Unix()}
}

func (w commentDraftWire) header() (int, int64) { return w.V, w.E }

func (w commentDraftWire) token() (CommentDraft, bool) {
	return CommentDraft{Issuer: w.I, Subject: w.S, Tenant: w.T, Job: w.J, Comment: w.C, Expiry: expiryFromUnix(w.E)}, true
}

func (d CommentDraft) validateFields() error {
	// The expiry is checked by kind.checked, as every kind's.
	return requireStrings("handle: comment draft", field{"issuer", d.Issuer}, field{"subject", d.Subject},
		field{"tenant", d.Tenant}, field{"job", d.Job}, field{"comment", d.Comment})
}

// Validate reports whether SealCommentDraft can seal d: fields set and valid, within
// MaxCommentDraftLen (a long comment does not fit: the page then asks to copy it).
func (d CommentDraft) Validate() error {
	return commentDraftKind.validate(d, fmt.Sprintf(" (a comment of %d characters)", utf8.RuneCountInString(d.Comment)))
}

// SealCommentDraft returns d encrypted and authenticated with the current key, or "" (which
// never opens) if d is invalid or too long.
func (k *Keyring) SealCommentDraft(d CommentDraft) string { return commentDraftKind.seal(k, d) }

// OpenCommentDraft is OpenHandle for comment drafts: errors match [ErrMalformed] or
// [ErrExpired]. The caller checks the binding (the session's person and the page's job).
func (k *Keyring) OpenCommentDraft(str string, now time.Time) (CommentDraft, error) {
	return commentDraftKind.open(k, str, now)
}
