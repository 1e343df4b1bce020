package authz

// Action is something a caller asks to do; one per tool family.
type Action string

// The actions the tools map to.
const (
	ActionStart    Action = "start"    // start_*
	ActionGet      Action = "get"      // get_*
	ActionList     Action = "list"     // list_jobs
	ActionCancel   Action = "cancel"   // cancel_*
	ActionResume   Action = "resume"   // resume_*
	ActionDownload Action = "download" // GET /artifacts/<token>
	// ActionListApprovals lists the tenant's jobs whose open input request needs an approver.
	ActionListApprovals Action = "list_approvals"
	// ActionUsage reads what the tenant's jobs used (get_usage): admins only.
	ActionUsage Action = "usage"
)

// AllActions returns every action. A function, not a package variable, so no
// caller can change the list for everyone: each call returns a fresh slice.
func AllActions() []Action {
	return []Action{ActionStart, ActionGet, ActionList, ActionCancel, ActionResume, ActionDownload, ActionListApprovals, ActionUsage}
}

// Approver says who may answer a job's open input request.
type Approver string

// Who may answer an input request.
const (
	ApproverNone     Approver = ""         // the job has no open input request
	ApproverOwner    Approver = "owner"    // only the owner (jobs:write) may answer
	ApproverApprover Approver = "approver" // only a jobs:approve holder of the tenant may answer
)

// Job is what the policy needs to know about a job. Its fields come from the
// job's stored state (Temporal), never from tool arguments or the handle.
type Job struct {
	Tenant string // the tenant that owns the job
	Owner  string // the sub of the principal that started it
	// OpenInput is who may answer the job's open input request, or
	// ApproverNone. Any other value is treated as no open request for
	// visibility, and as "nobody may answer" for resume.
	OpenInput Approver
	// SelfApproval lets the owner answer an ApproverApprover request. False (the default) is
	// four eyes: the approver must be someone other than the job's owner.
	SelfApproval bool
}

// Decision is the policy's answer.
type Decision int

// Decisions. The zero value is Allow, so always use Decide's result, never a
// default Decision.
const (
	Allow     Decision = iota
	NotFound           // the caller may not know the job exists: answer exactly like an unknown job
	Forbidden          // the caller may see the job but not do this to it
)

// String returns "allow", "not_found" or "forbidden" (for logs and tests).
func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case NotFound:
		return "not_found"
	case Forbidden:
		return "forbidden"
	}
	return "Decision(?)"
}

// Decide says whether p may do a to j. It is pure: no I/O, no clock.
//
// Start and list ignore j. For every other action a job of another tenant
// (or either tenant empty) is NotFound, and Forbidden is only ever returned
// to a caller who can see the job (its owner with jobs:read or jobs:write,
// any jobs:admin holder of the tenant, or any jobs:approve holder of the
// tenant while the job's open input request needs an approver, i.e.
// OpenInput is ApproverApprover). An invalid principal or unknown action is
// NotFound.
//
// jobs:approve grants nothing on a job whose open input request is for its
// owner (ApproverOwner) or that has none: such a job is invisible to an
// approve holder who is neither its owner nor an admin.
func Decide(p Principal, a Action, j Job) Decision {
	if p.Valid() != nil {
		return NotFound
	}
	switch a {
	case ActionStart, ActionList, ActionListApprovals, ActionUsage:
		return decideWithoutJob(p, a)
	case ActionGet, ActionDownload, ActionCancel, ActionResume:
		return decideOnJob(p, a, j)
	}
	return NotFound
}

// decideWithoutJob decides the actions that name no job (start and the lists): the scope alone
// allows or forbids.
func decideWithoutJob(p Principal, a Action) Decision {
	var allow bool
	switch a {
	case ActionStart:
		allow = p.Has(ScopeWrite)
	case ActionList:
		allow = p.Has(ScopeRead) || p.Has(ScopeAdmin)
	case ActionListApprovals:
		allow = p.Has(ScopeApprove)
	case ActionUsage:
		allow = p.Has(ScopeAdmin)
	}
	if allow {
		return Allow
	}
	return Forbidden
}

// decideOnJob decides an action on j: another tenant's job is NotFound, and a refusal is
// Forbidden only to a caller who can see the job.
func decideOnJob(p Principal, a Action, j Job) Decision {
	if j.Tenant == "" || j.Tenant != p.Tenant {
		return NotFound
	}
	owner := j.Owner != "" && j.Owner == p.Subject
	// needsApprover: jobs:approve holders of the tenant may see and answer.
	needsApprover := j.OpenInput == ApproverApprover

	var allow bool
	switch a {
	case ActionGet, ActionDownload:
		allow = owner && p.Has(ScopeRead) || p.Has(ScopeAdmin) || p.Has(ScopeApprove) && needsApprover
		if !allow {
			return NotFound
		}
		return Allow
	case ActionCancel:
		allow = owner && p.Has(ScopeWrite) || p.Has(ScopeAdmin)
	case ActionResume:
		allow = mayResume(p, owner, j)
	}
	switch {
	case allow:
		return Allow
	case canSee(p, owner, needsApprover):
		return Forbidden
	}
	return NotFound
}

// mayResume reports whether p may answer j's open input request; owner says p owns j.
func mayResume(p Principal, owner bool, j Job) bool {
	switch j.OpenInput {
	case ApproverOwner:
		return owner && p.Has(ScopeWrite)
	case ApproverApprover:
		// Four eyes: the owner may not approve their own job unless the request allows it.
		return p.Has(ScopeApprove) && (!owner || j.SelfApproval)
	case ApproverNone:
		// Let the owner through so they learn input_not_expected.
		return owner && p.Has(ScopeWrite)
	}
	return false
}

// ResumeRefusal explains a Forbidden resume to the caller, for the tool error's message.
func ResumeRefusal(p Principal, j Job) string {
	switch {
	case j.OpenInput == ApproverApprover && j.Owner == p.Subject && p.Has(ScopeApprove) && !j.SelfApproval:
		return "four eyes: this input request needs an approver other than the job's owner"
	case j.OpenInput == ApproverApprover:
		return "this input request needs an approver (jobs:approve) other than the job's owner"
	}
	return "only the job's owner (with jobs:write) may answer this input request"
}

// canSee reports whether p may know the job exists. The caller has checked
// that the tenants match; owner says p owns the job and needsApprover that
// its open input request has approver ApproverApprover.
func canSee(p Principal, owner, needsApprover bool) bool {
	return owner && (p.Has(ScopeRead) || p.Has(ScopeWrite)) ||
		p.Has(ScopeAdmin) ||
		p.Has(ScopeApprove) && needsApprover
}

// ActionScopes returns the scopes of which any one lets a token call the
// action at all. The HTTP layer checks it before reading any job; the first
// scope is the one to name in a 403 insufficient_scope challenge. It returns
// a fresh slice (nil for an unknown action).
func ActionScopes(a Action) []Scope {
	switch a {
	case ActionStart:
		return []Scope{ScopeWrite}
	case ActionGet, ActionDownload:
		return []Scope{ScopeRead, ScopeAdmin, ScopeApprove}
	case ActionList:
		return []Scope{ScopeRead, ScopeAdmin}
	case ActionCancel:
		return []Scope{ScopeWrite, ScopeAdmin}
	case ActionResume:
		return []Scope{ScopeWrite, ScopeApprove}
	case ActionListApprovals:
		return []Scope{ScopeApprove}
	case ActionUsage:
		return []Scope{ScopeAdmin}
	}
	return nil
}

// ListAll reports whether list_jobs shows p the whole tenant (jobs:admin)
// rather than only p's own jobs. False for an invalid principal.
func ListAll(p Principal) bool {
	return p.Valid() == nil && p.Has(ScopeAdmin)
}

// AdministersTenant reports whether p holds jobs:admin of tenant: the codec server opens a
// tenant's payloads for such callers only (an admin reads any job of the tenant anyway).
func AdministersTenant(p Principal, tenant string) bool {
	return p.Valid() == nil && tenant != "" && p.Tenant == tenant && p.Has(ScopeAdmin)
}
