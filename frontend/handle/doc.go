// Package handle seals and opens jobgate's two kinds of opaque strings:
//
//   - a job handle ("jgh1.<kid>.<payload>.<sig>") names one job (Temporal
//     workflow) of one tenant. It is an address, never a permission: a caller
//     that opens a handle must still check the authenticated caller against
//     the job on every use.
//   - a list cursor ("jgc1.<kid>.<payload>.<sig>") carries Temporal's opaque
//     next-page token and is bound to tenant, principal (sub), tool and a
//     fingerprint of the normalized filters (see [FilterFingerprint]).
//
// Both are HMAC-SHA256 signed with the current key of a [Keyring]; every key of
// the ring verifies, so keys can be rotated by key ID (kid). The payload is
// base64url (no padding) of a compact JSON object with a version field; the
// signature covers a domain-separation label that differs between handles and
// cursors, so one can never be accepted as the other. The whole string uses
// only [A-Za-z0-9._-] and can travel verbatim in JSON and URLs.
//
// # Opening, and mapping errors to tool errors
//
// Open* never panics. It returns an error matching (with [errors.Is]) exactly
// one of:
//
//   - [ErrMalformed]: anything wrong with the string — size, shape, prefix or
//     version, unknown kid, encoding, signature, JSON, field values. Maps to
//     invalid_handle / cursor_invalid. The wrapped detail ("unknown key id",
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
// Never log a sealed string (it contains the signature); log the decoded
// tenant and workflow ID instead.
package handle
