package frontend

import (
	"errors"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

// UIURLFor values (Options.UIURLFor).
const (
	UIURLForAdmin = "admin" // principals holding jobs:admin
	UIURLForAll   = "all"   // everyone (jobgate dev: the tour links to the UI)
	UIURLForNone  = "none"
)

// showUIURL reports whether p gets ui_url in job views: the Web UI shows every job of the
// namespace and is an operator tool, not a tenant surface.
func (f *Frontend) showUIURL(p authz.Principal) bool {
	if f.opts.UIBaseURL == "" {
		return false
	}
	switch f.opts.UIURLFor {
	case UIURLForAll:
		return true
	case UIURLForAdmin:
		return p.Has(authz.ScopeAdmin)
	}
	return false
}

func scopeStrings(scopes []authz.Scope) []string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = string(s)
	}
	return out
}

// ResumeVerifier opens resume seals made with keys (the resume keys) for the workflows'
// update validator; the worker injects it (workflows.Workflows.Resume).
func ResumeVerifier(keys *handle.Keyring) workflows.ResumeVerifier { return resumeVerifier{keys} }

type resumeVerifier struct{ keys *handle.Keyring }

var (
	errSealMalformed = errors.New("not a resume seal made with this deployment's resume keys")
	errSealExpired   = errors.New("the seal has expired")
)

func (v resumeVerifier) OpenResumeSeal(seal string, now time.Time) (workflows.ResumeSeal, error) {
	r, err := v.keys.OpenResume(seal, now)
	switch {
	case errors.Is(err, handle.ErrExpired):
		return workflows.ResumeSeal{}, errSealExpired
	case err != nil:
		return workflows.ResumeSeal{}, errSealMalformed
	}
	p := authz.Principal{Tenant: r.Tenant, Subject: r.Subject}
	if len(r.Scopes) > 0 {
		p.Scopes = make([]authz.Scope, len(r.Scopes))
		for i, s := range r.Scopes {
			p.Scopes[i] = authz.Scope(s)
		}
	}
	return workflows.ResumeSeal{WorkflowID: r.WorkflowID, RunID: r.RunID, InputID: r.InputID, ScopeDigest: r.ScopeDigest,
		Principal: p, Decision: r.Decision, CommentDigest: r.CommentDigest, Surface: r.Surface,
		SignedInWith: r.SignedInWith, Expiry: r.Expiry}, nil
}
