package authz

import (
	"fmt"
	"slices"
	"testing"
)

func pr(sub string, scopes ...Scope) Principal {
	return Principal{Tenant: "acme", Subject: sub, Scopes: scopes}
}

const (
	R  = ScopeRead
	W  = ScopeWrite
	Ap = ScopeApprove
	Ad = ScopeAdmin
)

func TestDecide(t *testing.T) {
	job := func(open Approver) Job { return Job{Tenant: "acme", Owner: "alice", OpenInput: open} }
	none, own, appr := job(ApproverNone), job(ApproverOwner), job(ApproverApprover)
	otherTenant := Principal{Tenant: "globex", Subject: "alice", Scopes: AllScopes()}

	tests := []struct {
		name string
		p    Principal
		a    Action
		j    Job
		want Decision
	}{
		// start: jobs:write, job ignored
		{"start/write", pr("alice", W), ActionStart, Job{}, Allow},
		{"start/write other tenant job ignored", pr("alice", W), ActionStart, Job{Tenant: "globex"}, Allow},
		{"start/read only", pr("alice", R), ActionStart, Job{}, Forbidden},
		{"start/admin only", pr("alice", Ad), ActionStart, Job{}, Forbidden},
		{"start/approve only", pr("alice", Ap), ActionStart, Job{}, Forbidden},
		{"start/no scopes", pr("alice"), ActionStart, Job{}, Forbidden},

		// list: jobs:read or jobs:admin
		{"list/read", pr("alice", R), ActionList, Job{}, Allow},
		{"list/admin", pr("alice", Ad), ActionList, Job{}, Allow},
		{"list/write", pr("alice", W), ActionList, Job{}, Forbidden},
		{"list/approve", pr("alice", Ap), ActionList, Job{}, Forbidden},
		{"list/no scopes", pr("alice"), ActionList, Job{}, Forbidden},

		// list_approvals: jobs:approve
		{"list approvals/approve", pr("dave", Ap), ActionListApprovals, Job{}, Allow},
		{"list approvals/admin", pr("carol", R, Ad), ActionListApprovals, Job{}, Forbidden},
		{"list approvals/write", pr("alice", W), ActionListApprovals, Job{}, Forbidden},

		// get
		{"get/owner read", pr("alice", R), ActionGet, none, Allow},
		{"get/owner write only", pr("alice", W), ActionGet, none, NotFound},
		{"get/owner no scopes", pr("alice"), ActionGet, none, NotFound},
		{"get/other user read", pr("bob", R), ActionGet, none, NotFound},
		{"get/other user write", pr("bob", R, W), ActionGet, none, NotFound},
		{"get/admin", pr("carol", Ad), ActionGet, none, Allow},
		{"get/approver no open input", pr("dave", Ap), ActionGet, none, NotFound},
		{"get/approver open owner input", pr("dave", Ap), ActionGet, own, NotFound},
		{"get/approver read open owner input", pr("dave", R, Ap), ActionGet, own, NotFound},
		{"get/approver open approver input", pr("dave", Ap), ActionGet, appr, Allow},
		{"get/approver unknown input kind", pr("dave", Ap), ActionGet, job("bogus"), NotFound},
		{"get/other tenant all scopes", otherTenant, ActionGet, own, NotFound},

		// download mirrors get
		{"download/owner read", pr("alice", R), ActionDownload, none, Allow},
		{"download/owner write only", pr("alice", W), ActionDownload, none, NotFound},
		{"download/other user read", pr("bob", R), ActionDownload, none, NotFound},
		{"download/admin", pr("carol", Ad), ActionDownload, none, Allow},
		{"download/approver open input", pr("dave", Ap), ActionDownload, appr, Allow},
		{"download/approver open owner input", pr("dave", Ap), ActionDownload, own, NotFound},
		{"download/approver no input", pr("dave", Ap), ActionDownload, none, NotFound},
		{"download/other tenant", otherTenant, ActionDownload, none, NotFound},

		// cancel
		{"cancel/owner write", pr("alice", W), ActionCancel, none, Allow},
		{"cancel/owner read only", pr("alice", R), ActionCancel, none, Forbidden},
		{"cancel/owner no scopes", pr("alice"), ActionCancel, none, NotFound},
		{"cancel/admin", pr("carol", Ad), ActionCancel, none, Allow},
		{"cancel/other user write", pr("bob", W), ActionCancel, none, NotFound},
		{"cancel/other user read write", pr("bob", R, W), ActionCancel, none, NotFound},
		{"cancel/approver open input", pr("dave", Ap), ActionCancel, appr, Forbidden},
		{"cancel/approver open owner input", pr("dave", Ap), ActionCancel, own, NotFound},
		{"cancel/approver no input", pr("dave", Ap), ActionCancel, none, NotFound},
		{"cancel/other tenant", otherTenant, ActionCancel, none, NotFound},

		// resume, input for owner
		{"resume owner-input/owner write", pr("alice", W), ActionResume, own, Allow},
		{"resume owner-input/owner read", pr("alice", R), ActionResume, own, Forbidden},
		{"resume owner-input/owner write approve", pr("alice", W, Ap), ActionResume, own, Allow},
		{"resume owner-input/owner approve only", pr("alice", Ap), ActionResume, own, NotFound},
		{"resume owner-input/approver", pr("dave", Ap), ActionResume, own, NotFound},
		{"resume owner-input/approver write", pr("dave", W, Ap), ActionResume, own, NotFound},
		{"resume owner-input/approver admin", pr("dave", Ap, Ad), ActionResume, own, Forbidden},
		{"resume owner-input/admin", pr("carol", Ad), ActionResume, own, Forbidden},
		{"resume owner-input/other user write", pr("bob", W), ActionResume, own, NotFound},
		{"resume owner-input/other tenant", otherTenant, ActionResume, own, NotFound},
		// resume, input for an approver
		{"resume approver-input/owner write", pr("alice", W), ActionResume, appr, Forbidden},
		// four eyes: the owner never approves their own job...
		{"resume approver-input/owner write approve", pr("alice", W, Ap), ActionResume, appr, Forbidden},
		{"resume approver-input/owner approve only", pr("alice", Ap), ActionResume, appr, Forbidden},
		// ...unless the request allows self-approval
		{"resume self-approvable/owner approve", pr("alice", Ap), ActionResume, Job{Tenant: "acme", Owner: "alice", OpenInput: ApproverApprover, SelfApproval: true}, Allow},
		{"resume self-approvable/owner write only", pr("alice", W), ActionResume, Job{Tenant: "acme", Owner: "alice", OpenInput: ApproverApprover, SelfApproval: true}, Forbidden},
		{"resume self-approvable/approver", pr("dave", Ap), ActionResume, Job{Tenant: "acme", Owner: "alice", OpenInput: ApproverApprover, SelfApproval: true}, Allow},
		{"resume approver-input/approver", pr("dave", Ap), ActionResume, appr, Allow},
		{"resume approver-input/admin", pr("carol", Ad), ActionResume, appr, Forbidden},
		{"resume approver-input/other user write", pr("bob", R, W), ActionResume, appr, NotFound},
		{"resume approver-input/other tenant", otherTenant, ActionResume, appr, NotFound},
		// resume, no input open
		{"resume no-input/owner write", pr("alice", W), ActionResume, none, Allow},
		{"resume no-input/owner read", pr("alice", R), ActionResume, none, Forbidden},
		{"resume no-input/approver", pr("dave", Ap), ActionResume, none, NotFound},
		{"resume no-input/admin", pr("carol", Ad), ActionResume, none, Forbidden},
		{"resume no-input/other user", pr("bob", W), ActionResume, none, NotFound},
		// resume, unknown input kind: nobody may answer
		{"resume bogus-input/owner write", pr("alice", W), ActionResume, job("bogus"), Forbidden},
		{"resume bogus-input/approver", pr("dave", Ap), ActionResume, job("bogus"), NotFound},

		// tenants and principals
		{"empty job tenant", pr("alice", AllScopes()...), ActionGet, Job{Owner: "alice"}, NotFound},
		{"empty principal tenant", Principal{Subject: "alice", Scopes: AllScopes()}, ActionGet, Job{Owner: "alice"}, NotFound},
		{"empty principal tenant start", Principal{Subject: "alice", Scopes: AllScopes()}, ActionStart, Job{}, NotFound},
		{"invalid principal tenant", Principal{Tenant: "acme/x", Subject: "alice", Scopes: AllScopes()}, ActionGet, Job{Tenant: "acme/x", Owner: "alice"}, NotFound},
		{"invalid principal subject", Principal{Tenant: "acme", Subject: "", Scopes: AllScopes()}, ActionGet, Job{Tenant: "acme", Owner: ""}, NotFound},
		{"invalid principal list", Principal{Tenant: "acme", Scopes: AllScopes()}, ActionList, Job{}, NotFound},
		{"empty job owner", pr("alice", R, W), ActionCancel, Job{Tenant: "acme"}, NotFound},
		{"unknown action", pr("alice", AllScopes()...), Action("delete"), none, NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decide(tt.p, tt.a, tt.j); got != tt.want {
				t.Errorf("Decide(%+v, %q, %+v) = %v, want %v", tt.p, tt.a, tt.j, got, tt.want)
			}
		})
	}
}

// scopeSets returns all 16 subsets of AllScopes.
func scopeSets() [][]Scope {
	var out [][]Scope
	for m := 0; m < 1<<len(AllScopes()); m++ {
		var s []Scope
		for i, sc := range AllScopes() {
			if m&(1<<i) != 0 {
				s = append(s, sc)
			}
		}
		out = append(out, s)
	}
	return out
}

// forEveryCase runs f over every action, scope subset, relation to the job
// and open input kind.
func forEveryCase(f func(p Principal, a Action, j Job, rel string)) {
	for _, a := range AllActions() {
		for _, scopes := range scopeSets() {
			for _, open := range []Approver{ApproverNone, ApproverOwner, ApproverApprover, "bogus"} {
				for _, rel := range []string{"owner", "same-tenant", "other-tenant"} {
					p := Principal{Tenant: "acme", Subject: "alice", Scopes: scopes}
					j := Job{Tenant: "acme", Owner: "alice", OpenInput: open}
					switch rel {
					case "same-tenant":
						j.Owner = "bob"
					case "other-tenant":
						j.Tenant = "globex"
					}
					f(p, a, j, rel)
				}
			}
		}
	}
}

func rank(d Decision) int {
	return map[Decision]int{NotFound: 0, Forbidden: 1, Allow: 2}[d]
}

func TestDecideProperties(t *testing.T) {
	n := 0
	forEveryCase(func(p Principal, a Action, j Job, rel string) {
		n++
		d := Decide(p, a, j)
		where := fmt.Sprintf("%s %v %s %+v -> %v", a, p.Scopes, rel, j, d)
		jobAction := a != ActionStart && a != ActionList && a != ActionListApprovals && a != ActionUsage

		// Another tenant never learns anything about a job.
		if jobAction && rel == "other-tenant" && d != NotFound {
			t.Errorf("cross-tenant leak: %s", where)
		}
		// Forbidden only for callers who may see the job.
		if jobAction && d == Forbidden {
			if !canSee(p, rel == "owner", j.OpenInput == ApproverApprover) || rel == "other-tenant" {
				t.Errorf("Forbidden leaks existence: %s", where)
			}
		}
		// jobs:approve counts only while the open input request needs an
		// approver: for any other job, dropping it changes nothing.
		if j.OpenInput != ApproverApprover && a != ActionListApprovals {
			q := p
			q.Scopes = slices.DeleteFunc(slices.Clone(p.Scopes), func(s Scope) bool { return s == ScopeApprove })
			if d2 := Decide(q, a, j); d2 != d {
				t.Errorf("jobs:approve mattered without an approver request: %s, without it %v", where, d2)
			}
		}
		// Non-job actions never say NotFound to a valid principal.
		if !jobAction && d == NotFound {
			t.Errorf("NotFound for non-job action: %s", where)
		}
		// ActionScopes is a necessary condition for Allow.
		if d == Allow && !p.HasAny(ActionScopes(a)...) {
			t.Errorf("allowed without any of ActionScopes(%s)=%v: %s", a, ActionScopes(a), where)
		}
		// Monotonic: adding any scope never lowers the answer.
		for _, extra := range AllScopes() {
			q := p
			q.Scopes = append(slices.Clone(p.Scopes), extra)
			if d2 := Decide(q, a, j); rank(d2) < rank(d) {
				t.Errorf("adding %s lowered %s to %v", extra, where, d2)
			}
		}
		// Unknown scopes and duplicates change nothing.
		q := p
		q.Scopes = append(append(slices.Clone(p.Scopes), p.Scopes...), "jobs:everything", "JOBS:ADMIN")
		if d2 := Decide(q, a, j); d2 != d {
			t.Errorf("unknown/duplicate scopes changed %s to %v", where, d2)
		}
	})
	if n != len(AllActions())*16*4*3 {
		t.Fatalf("ran %d cases", n)
	}
}

func TestActionScopes(t *testing.T) {
	want := map[Action][]Scope{
		ActionStart:    {W},
		ActionGet:      {R, Ad, Ap},
		ActionDownload: {R, Ad, Ap},
		ActionList:     {R, Ad},
		ActionCancel:   {W, Ad},
		ActionResume:   {W, Ap},
		// listing the approvals queue is the approver's own action
		ActionListApprovals: {Ap},
		// what the tenant's jobs used: its admins'
		ActionUsage: {Ad},
	}
	for _, a := range AllActions() {
		if got := ActionScopes(a); !slices.Equal(got, want[a]) {
			t.Errorf("ActionScopes(%s) = %v, want %v", a, got, want[a])
		}
	}
	if got := ActionScopes("nope"); got != nil {
		t.Errorf("ActionScopes(unknown) = %v, want nil", got)
	}
	// Callers may not corrupt the table.
	s := ActionScopes(ActionStart)
	s[0] = ScopeAdmin
	if ActionScopes(ActionStart)[0] != ScopeWrite {
		t.Error("ActionScopes returned a shared slice")
	}
}

func TestListAll(t *testing.T) {
	for _, tt := range []struct {
		p    Principal
		want bool
	}{
		{pr("alice", Ad), true},
		{pr("alice", R, W, Ap), false},
		{pr("alice"), false},
		{Principal{Tenant: "", Subject: "alice", Scopes: []Scope{Ad}}, false},
	} {
		if got := ListAll(tt.p); got != tt.want {
			t.Errorf("ListAll(%+v) = %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestDecisionString(t *testing.T) {
	for d, want := range map[Decision]string{Allow: "allow", NotFound: "not_found", Forbidden: "forbidden", 9: "Decision(?)"} {
		if d.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(d), d.String(), want)
		}
	}
}
