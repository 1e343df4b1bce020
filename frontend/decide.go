package frontend

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// identityKey holds, in a verified token's TokenInfo.Extra, what the token says of the person
// (workflows.Identity): it goes to the decision record of an answer the token carries.
const identityKey = "jobgate.identity"

// SignedInOIDCSession is the SignedInWith of an answer given in a browser session (pages).
const SignedInOIDCSession = "oidc-session"

// MetaSurface is wire.MetaSurface: the _meta key by which a resume_* call declares its surface.
const MetaSurface = wire.MetaSurface

func identityOf(c authz.Claims) workflows.Identity {
	return workflows.Identity{Issuer: c.Issuer, Name: c.Person.Name, Email: c.Person.Email,
		AuthTime: c.Person.AuthTime, AMR: c.Person.AMR, ACR: c.Person.ACR}
}

// callIdentity is the identity of the token that carried this call: the tool call's (MRTR and
// resume_*), else the HTTP request's (tasks/*). Zero when none is known.
func callIdentity(ctx context.Context) workflows.Identity {
	var ti *auth.TokenInfo
	if rec, ok := ctx.Value(callRecordKey{}).(*callRecord); ok && rec.req != nil && rec.req.Extra != nil {
		ti = rec.req.Extra.TokenInfo
	}
	if ti == nil {
		ti = auth.TokenInfoFromContext(ctx)
	}
	if ti == nil {
		return workflows.Identity{}
	}
	id, _ := ti.Extra[identityKey].(workflows.Identity)
	return id
}

// callSurface is the surface a resume_* call declares in its _meta (see MetaSurface).
func callSurface(ctx context.Context) string {
	if rec, ok := ctx.Value(callRecordKey{}).(*callRecord); ok && rec.req != nil && rec.req.Params != nil {
		if s, _ := rec.req.Params.GetMeta()[MetaSurface].(string); s == wire.SurfaceCLI {
			return workflows.SurfaceCLI
		}
	}
	return workflows.SurfaceTool
}

// answerer is who a resume is recorded as given by beyond the principal: their identity, the
// surface and how they signed in.
type answerer struct {
	id           workflows.Identity
	surface      string
	signedInWith string
}

// tokenAnswerer is the answerer of a call carried by a bearer token through surface.
func tokenAnswerer(ctx context.Context, surface string) answerer {
	return answerer{id: callIdentity(ctx), surface: surface, signedInWith: workflows.SignedInBearerJWT}
}

// answererOf is who answers, as the seal and the decision record carry it.
func answererOf(a wire.Approver) answerer {
	who := answerer{surface: a.Surface, signedInWith: a.SignedInWith,
		id: workflows.Identity{Issuer: a.Issuer, Name: a.Name, Email: a.Email, AuthTime: a.AuthTime, AMR: a.AMR, ACR: a.ACR}}
	if !who.id.AuthTime.IsZero() {
		who.id.AuthTime = who.id.AuthTime.Truncate(time.Second).UTC() // sealed to the second
	}
	return who
}

// shownPrompt is the meaning a surface showed for input request inputID of j: its prompt while
// that request is open, else "" (the validator then refuses the stale input_id anyway).
func shownPrompt(j *jobstore.Job, inputID string) string {
	if j.NeedsInput == nil || j.NeedsInput.InputID != inputID {
		return ""
	}
	return j.NeedsInput.Prompt
}

// decisionView is a decision record as get_* shows it (nil for none): everything but the seal,
// which stays in the manifest for `jobgate verify`.
func decisionView(d *workflows.DecisionRecord) *wire.Decision {
	if d == nil {
		return nil
	}
	return &wire.Decision{Decision: d.Decision, By: d.By, Issuer: d.Issuer, Name: d.Name, Email: d.Email, At: d.At,
		AuthTime: d.AuthTime, AMR: d.AMR, ACR: d.ACR, Surface: d.Surface, SignedInWith: d.SignedInWith, Meaning: d.Prompt,
		ScopeDigest: d.ScopeDigest, Comment: d.Comment, Sealed: d.Seal != ""}
}
