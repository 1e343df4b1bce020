// Package resumeseal seals every answer a frontend sends to a job (resume_*, MRTR,
// tasks/update, the approvals pages) and opens the seal for the workflows' update validator:
// the worker needs only this, not the frontend. It owns the mapping between a
// workflows.ResumeRequest and a handle.Resume; it never imports the frontend or any store.
package resumeseal

import (
	"errors"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

// SealResume seals req, an answer to run runID of job workflowID, with keys (the resume keys),
// as every frontend surface does before the resume update; the workflows' validator checks
// each sealed field against the request. "" when req cannot be sealed (see handle.SealResume).
// Exported for the tests and history generators that play a frontend.
func Seal(keys *handle.Keyring, workflowID, runID string, req workflows.ResumeRequest, expiry time.Time) string {
	return keys.SealResume(resumeOf(workflowID, runID, req, expiry))
}

// Sign is the Ed25519 decision signature over the same fields and expiry as Seal, with the
// signing keys (req.Signature, the decision record's signature): what lets an auditor check the
// record with the published public keys alone. "" when keys is nil or req cannot be signed.
func Sign(keys *handle.SigningKeyring, workflowID, runID string, req workflows.ResumeRequest, expiry time.Time) string {
	if keys == nil {
		return ""
	}
	return keys.SignDecision(resumeOf(workflowID, runID, req, expiry))
}

func resumeOf(workflowID, runID string, req workflows.ResumeRequest, expiry time.Time) handle.Resume {
	p := req.Principal
	scopes := make([]string, len(p.Scopes))
	for i, s := range p.Scopes {
		scopes[i] = string(s)
	}
	return handle.Resume{WorkflowID: workflowID, RunID: runID, InputID: req.InputID,
		ScopeDigest: req.ScopeDigest, Tenant: p.Tenant, Subject: p.Subject, Scopes: scopes, Decision: req.Decision,
		CommentDigest: workflows.CommentDigest(req.Comment), Surface: req.Surface, SignedInWith: req.SignedInWith,
		Issuer: req.Issuer, Name: req.Name, Email: req.Email, AuthTime: req.AuthTime, AMR: req.AMR, ACR: req.ACR,
		MeaningDigest: workflows.MeaningDigest(req.Meaning), ExtendBy: workflows.ExtendByText(req.ExtendBy), Expiry: expiry}
}

// ResumeVerifier opens resume seals made with keys (the resume keys) for the workflows'
// update validator; the worker injects it (workflows.Workflows.Resume).
func Verifier(keys *handle.Keyring) workflows.ResumeVerifier { return resumeVerifier{keys} }

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
		SignedInWith: r.SignedInWith, Expiry: r.Expiry, MeaningDigest: r.MeaningDigest, ExtendBy: r.ExtendBy,
		Identity: workflows.Identity{Issuer: r.Issuer, Name: r.Name, Email: r.Email, AuthTime: r.AuthTime, AMR: r.AMR, ACR: r.ACR}}, nil
}
