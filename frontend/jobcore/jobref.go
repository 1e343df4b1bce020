package jobcore

import (
	"context"
	"strings"
	"unicode"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// A job ID works wherever a handle does (issue 35): people read job IDs in `jobgate jobs list`,
// the pages and the Web UI, and type them back. A job ID is an address like a handle, never a
// permission: resolveJobID reads the job and applies exactly the checks a handle's job gets, so
// another tenant's job, a job the caller may not see and a job that does not exist are the same
// not_found, byte for byte. What a job ID cannot carry is a signature or an expiry, so it never
// answers invalid_handle or handle_expired.

// jobIDMax bounds a job ID given in place of a handle: Temporal's default limit on workflow IDs.
const jobIDMax = 1000

// IsJobID reports whether ref, given where a handle is asked, is a job ID: it holds a '/', which
// no handle does (handles are dot-separated base64url).
func IsJobID(ref string) bool { return strings.Contains(ref, "/") }

// RefKind is the kind a handle or job ID names, read without checking anything ("" when it names
// none): which kind's tools to resolve it for. Resolve checks signature, tenant and policy.
func (f *Core) RefKind(ref string) string {
	if IsJobID(ref) {
		_, rest, _ := strings.Cut(ref, "/")
		kind, _, _ := strings.Cut(rest, "/")
		if _, ok := workflows.LookupKind(kind); ok {
			return kind
		}
		return ""
	}
	h, _ := f.Opts.Keys.OpenHandle(ref, f.Opts.Now())
	return h.Kind
}

// resolveJobID is Resolve for a job ID "<tenant>/<kind>/…". The tenant and kind it names are the
// caller's own words; the tenant must be the caller's (else not_found without a store call), and
// a kind other than the tool's is named back (as for a handle: the caller's own string, so it
// tells nothing about any job).
func (f *Core) resolveJobID(ctx context.Context, p authz.Principal, id, kind string, a authz.Action) (*jobstore.Job, error) {
	tenant, rest, _ := strings.Cut(id, "/")
	idKind, _, _ := strings.Cut(rest, "/")
	if len(id) > jobIDMax || tenant != p.Tenant || strings.ContainsFunc(id, func(r rune) bool {
		return r == unicode.ReplacementChar || unicode.IsControl(r)
	}) {
		return nil, ErrNotFound()
	}
	if _, ok := workflows.LookupKind(idKind); !ok {
		return nil, ErrNotFound()
	}
	if idKind != kind {
		te := invalidArg("handle", "names a %s job; use the %s tools for it", idKind, idKind)
		te.Kind = idKind
		return nil, te
	}
	j, err := f.Describe(ctx, id)
	if err != nil {
		return nil, err
	}
	noteJob(ctx, j.ID)
	return f.authorize(p, j, kind, a)
}
