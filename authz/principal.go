package authz

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Scope is one OAuth scope string understood by jobgate. See the scopes table
// in CONTRACT.md for what each grants.
type Scope string

// The scopes jobgate understands. Any other scope string in a token is ignored.
const (
	ScopeRead    Scope = "jobs:read"    // get_*, list_jobs, artifact download: own jobs
	ScopeWrite   Scope = "jobs:write"   // start_*, cancel_*: own jobs
	ScopeApprove Scope = "jobs:approve" // resume_* on input requests that need an approver
	ScopeAdmin   Scope = "jobs:admin"   // read and cancel any job of the same tenant
)

// AllScopes returns every known scope in canonical order (the order
// [Principal.Scopes] and [ParseScopes] results use). It is a function, not a
// package variable, so no caller can change the canonical list for everyone:
// each call returns a fresh slice the caller may keep or modify.
func AllScopes() []Scope { return []Scope{ScopeRead, ScopeWrite, ScopeApprove, ScopeAdmin} }

// Known reports whether s is one of [AllScopes].
func (s Scope) Known() bool { return scopeIndex(s) >= 0 }

// Limits on identities.
const (
	// MaxTenantLen is the longest tenant ValidTenant accepts, in bytes.
	MaxTenantLen = 63
	// MaxSubjectLen is the longest subject ValidSubject accepts, in characters (runes).
	MaxSubjectLen = 256
)

var (
	errTenant  = errors.New("tenant must be 1-63 characters of [a-z0-9_-], starting with a letter or digit")
	errSubject = errors.New("subject must be 1-256 printable UTF-8 characters")
)

// ValidTenant reports whether s is a well-formed tenant: 1-63 characters of
// [a-z0-9_-], the first one in [a-z0-9]. A tenant is embedded in Temporal
// workflow IDs "<tenant>/<kind>/<key>", so it can never contain '/'.
// The error describes the rule and never repeats s.
func ValidTenant(s string) error {
	if len(s) == 0 || len(s) > MaxTenantLen {
		return errTenant
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return errTenant
		}
	}
	return nil
}

// ValidSubject reports whether s is a well-formed subject: valid UTF-8,
// 1-256 characters, each printable per [unicode.IsPrint] (so no control,
// format or bidi-override characters; ASCII space is allowed).
// The error describes the rule and never repeats s.
func ValidSubject(s string) error {
	if len(s) > MaxSubjectLen*utf8.UTFMax || !Printable(s) || utf8.RuneCountInString(s) > MaxSubjectLen {
		return errSubject
	}
	return nil
}

// Printable reports whether s is non-empty valid UTF-8 whose every character is printable per
// [unicode.IsPrint] (no control, format or bidi-override characters; ASCII space is allowed):
// the rule for a subject, a person's name and email from a token, and a job store filter value.
func Printable(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// Principal is the caller proven by a verified token. Never built from tool
// arguments or handles: the only producer in the server is a [Verifier].
type Principal struct {
	Tenant  string  `json:"tenant"`
	Subject string  `json:"sub"`
	Scopes  []Scope `json:"scopes"`
}

// Has reports whether p holds scope s.
func (p Principal) Has(s Scope) bool {
	for _, have := range p.Scopes {
		if have == s {
			return true
		}
	}
	return false
}

// HasAny reports whether p holds at least one of scopes (false for none).
// Use it with [ActionScopes].
func (p Principal) HasAny(scopes ...Scope) bool {
	for _, s := range scopes {
		if p.Has(s) {
			return true
		}
	}
	return false
}

// Valid reports whether p's tenant and subject pass [ValidTenant] and
// [ValidSubject]. [Decide] treats an invalid principal as knowing nothing.
func (p Principal) Valid() error {
	if err := ValidTenant(p.Tenant); err != nil {
		return err
	}
	return ValidSubject(p.Subject)
}

// ParseScopes parses a scope list separated by spaces and/or commas, such as
// "jobs:read jobs:write" or "jobs:read,jobs:write". The result is deduplicated
// and in [AllScopes] order; an empty or blank s yields an empty list. An
// unknown scope is an error naming it. Use it for operator input (flags,
// config); tokens go through a [Verifier], which ignores unknown scopes.
func ParseScopes(s string) ([]Scope, error) {
	var seen [4]bool
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		i := scopeIndex(Scope(f))
		if i < 0 {
			if len(f) > 64 {
				f = f[:64] + "..."
			}
			return nil, fmt.Errorf("unknown scope %q (known: jobs:read, jobs:write, jobs:approve, jobs:admin)", f)
		}
		seen[i] = true
	}
	return collect(seen), nil
}

// canonicalScopes keeps the known scopes of in, deduplicated, in AllScopes order.
func canonicalScopes(in []string) []Scope {
	var seen [4]bool
	for _, f := range in {
		if i := scopeIndex(Scope(f)); i >= 0 {
			seen[i] = true
		}
	}
	return collect(seen)
}

// scopeIndex is the position of s in the canonical order ([AllScopes]), or
// -1 if unknown. A switch rather than a search of AllScopes() so that the hot
// path of every Verify allocates nothing.
func scopeIndex(s Scope) int {
	switch s {
	case ScopeRead:
		return 0
	case ScopeWrite:
		return 1
	case ScopeApprove:
		return 2
	case ScopeAdmin:
		return 3
	}
	return -1
}

func collect(seen [4]bool) []Scope {
	canonical := AllScopes()
	out := canonical[:0] // filter in place: out never passes the index being read
	for i, ok := range seen {
		if ok {
			out = append(out, canonical[i])
		}
	}
	return out
}

// ScopeStrings converts scopes to plain strings (token claims, HTTP metadata, logs).
func ScopeStrings(scopes []Scope) []string {
	parts := make([]string, len(scopes))
	for i, s := range scopes {
		parts[i] = string(s)
	}
	return parts
}

func joinScopes(scopes []Scope) string { return strings.Join(ScopeStrings(scopes), " ") }
