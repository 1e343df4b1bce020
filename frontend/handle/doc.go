// Package handle seals and opens jobgate's opaque strings (request states, state.go, and resume
// seals, resume.go, follow the same rules as the three below):
//
//   - a job handle ("jgh1.<kid>.<payload>.<sig>") names one job (Temporal
//     workflow) of one tenant, and carries its kind (any ^[a-z][a-z0-9_]{0,31}$;
//     which kinds exist is the caller's business). It is an address, never a
//     permission: a caller that opens a handle must still check the
//     authenticated caller against the job on every use.
//   - a list cursor ("jgc2.<kid>.<ciphertext>") carries Temporal's next-page
//     token (which names a row's position and run ID) and is bound to tenant,
//     principal (sub), tool and a fingerprint of the normalized filters (see
//     [FilterFingerprint]). It is encrypted, not only signed (cursor.go): its
//     holder reads nothing from it.
//   - a download token ("jgd1.<kid>.<payload>.<sig>", the <signed-token> of
//     GET /artifacts/<signed-token>) is short-lived and bound to tenant, job
//     (workflow ID), the principal (sub) it was issued to and the lowercase
//     hex SHA-256 of the artifact's bytes. Like a handle it is not a
//     permission: the request must also carry that principal's (or a tenant
//     admin's) bearer token, so a leaked link alone is worthless.
//   - an event position ("jge1.<kid>.<ciphertext>", events.go) is the SSE id of a job event
//     stream: per watched job the run and history event reached and a digest of what was sent,
//     bound to tenant, principal and the stream's target; encrypted like a cursor, so it shows
//     its holder nothing of the jobs' histories.
//   - a comment draft ("jgt1.<kid>.<ciphertext>", draft.go) carries an approver's typed comment
//     across a fresh sign-in back to the request page, bound to that person (issuer, subject,
//     tenant) and job and encrypted; only it pre-fills the page's comment, never a ?comment=.
//   - a resume seal ("jgr1.<kid>.<payload>.<sig>") rides on every answer a frontend sends to a
//     job and binds it to one workflow run, input request, principal, decision and comment; the
//     workers' update validator opens it. Seal it with a ring of its own (the resume keys), never
//     the handle ring: holding the resume keys is the power to approve.
//
// Handles and download tokens are HMAC-SHA256 signed, cursors AES-256-GCM sealed
// under keys derived (HKDF-SHA256) from the same key, with the current key of a
// [Keyring]; every key of the ring verifies/opens, so keys can be rotated by key
// ID (kid). The signed payload is
// base64url (no padding) of a compact JSON object with a version field; the
// signature covers a domain-separation label that differs between handles,
// cursors and download tokens, so one can never be accepted as another. The
// whole string uses only [A-Za-z0-9._-] and can travel verbatim in JSON, URL
// queries and URL path segments. Lengths are capped ([MaxHandleLen],
// [MaxCursorLen], [MaxDownloadLen]) before anything else is looked at.
//
// # Opening, and mapping errors to tool errors
//
// Open* never panics. It returns an error matching (with [errors.Is]) exactly
// one of:
//
//   - [ErrMalformed]: anything wrong with the string — size, shape, prefix or
//     version, unknown kid, encoding, signature, JSON, field values. Maps to
//     invalid_handle / cursor_invalid / 404. The wrapped detail ("unknown key id",
//     "signature mismatch", ...) is for operator logs only and never contains
//     the input.
//   - [ErrExpired]: well-formed and correctly signed, but now >= Expiry. The
//     decoded value is returned alongside the error.
//
// Because an expired value is still returned, callers must check binding
// FIRST and expiry second, so another tenant's expired handle answers exactly
// like an unknown job:
//
//	h, err := ring.OpenHandle(s, now)
//	switch {
//	case errors.Is(err, handle.ErrMalformed):
//		return invalid_handle
//	case h.Tenant != caller.Tenant:
//		return not_found // byte-identical to an unknown job, expired or not
//	case errors.Is(err, handle.ErrExpired):
//		return handle_expired
//	}
//	// load the job and re-check caller against it (owner / scopes)
//
// Cursors follow the same order: ErrMalformed → cursor_invalid; Tenant,
// Subject, Tool or Filter differing from the current request → cursor_invalid;
// then ErrExpired → cursor_expired.
//
// Download tokens too, except that every failure is the same bare 404:
//
//	d, err := ring.OpenDownload(token, now)
//	switch {
//	case errors.Is(err, handle.ErrMalformed),
//		d.Tenant != caller.Tenant,
//		d.Subject != caller.Subject && !caller.IsTenantAdmin(),
//		errors.Is(err, handle.ErrExpired):
//		return 404
//	}
//	// load job d.WorkflowID, re-check caller against it, and serve its
//	// artifact only if its SHA-256 is exactly d.Digest (else 404);
//	// an artifact past retention → 410
//
// Mint a download token with an Expiry of minutes, not hours: it is meant to
// be used right away by the principal it was issued to.
//
// Never log a sealed string (it contains the signature; for a download token,
// also keep it out of access logs of GET /artifacts/…); log the decoded tenant
// and workflow ID instead.
//
// It imports only the standard library: the frontend, pages and cmd seal through it, so it must
// never import frontend, workflows, activities or cmd.
package handle
