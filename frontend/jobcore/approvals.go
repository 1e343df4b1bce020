package jobcore

import (
	"context"
	"fmt"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const listApprovalsToolName = "list_approvals"

// ListApprovalsIn are list_approvals' arguments.
type ListApprovalsIn struct {
	Kind     string `json:"kind,omitempty" jsonschema:"only jobs of this kind (eval, export); omit for all kinds"`
	PageSize int    `json:"page_size,omitempty" jsonschema:"rows per page, 1-100 (default 20)"`
	Cursor   string `json:"cursor,omitempty" jsonschema:"next_cursor from the previous page, verbatim, with the same kind and page_size; omit for the first page"`
}

func (f *Core) listApprovalsTool() ToolDef {
	return NewTool(f, authz.ActionListApprovals, &mcp.Tool{
		Name:  listApprovalsToolName,
		Title: "List jobs awaiting my approval",
		Description: "For approvers (jobs:approve): your tenant's jobs whose open input request you may answer — waiting for an " +
			"approver other than their owner. Each row's needs_input says who asked (requested_by), what exactly is to be " +
			"approved (scope: dataset, columns, format, purpose …), its scope_digest and when it expires. Answer with resume_* " +
			"(input_id and scope_digest verbatim). Pages like list_jobs.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, f.ListApprovals).enum("kind", workflows.DefaultKindNames()...).bounds("page_size", 1, ListPageSizeMax)
}

// listApprovals lists the tenant's jobs whose open request the caller may answer. The store
// filter itself selects them (answerer, owner), so every row Temporal returns is one the
// caller may see: pages are full until the last, and the page token sealed into the cursor only
// ever points among answerable rows. keep re-applies the resume policy as defense in depth.
func (f *Core) ListApprovals(ctx context.Context, p authz.Principal, in ListApprovalsIn) (*ListJobsOut, error) {
	if authz.Decide(p, authz.ActionListApprovals, authz.Job{}) != authz.Allow {
		return nil, ToolErr(CodeForbidden, "listing approvals needs jobs:approve")
	}
	lf, err := ParseListFilter(ListJobsIn{Kind: in.Kind, PageSize: in.PageSize, Status: string(workflows.StatusAwaitingInput)}, true)
	if err != nil {
		return nil, err
	}
	fp := lf.Fingerprint() + "|approvals/v2" // v2: rows selected by JobAnswerer in the query
	var token []byte
	if in.Cursor != "" {
		if token, err = f.OpenListCursor(p, listApprovalsToolName, in.Cursor, fp); err != nil {
			return nil, err
		}
	}
	jf, err := ApprovalsJobFilter(p.Tenant, p.Subject, lf)
	if err != nil {
		return nil, fmt.Errorf("list_approvals filter: %w", err)
	}
	var shown []*jobstore.Job
	out, err := f.listPage(ctx, p, listApprovalsToolName, jf, lf.PageSize, token, fp, func(j *jobstore.Job) bool {
		keep := j.NeedsInput != nil && j.NeedsInput.Approver == authz.ApproverApprover &&
			authz.Decide(p, authz.ActionResume, j.PolicyJob()) == authz.Allow
		if keep {
			shown = append(shown, j)
		}
		return keep
	})
	if err == nil {
		f.noteApprovalCards(ctx, p, shown...)
	}
	return out, err
}

// approvalsJobFilter is listJobFilter over the whole tenant, narrowed to open approver requests
// the caller may answer: any that allows self-approval, and the others of jobs the caller does
// not own. Open requests of jobs started before JobAnswerer existed carry no answerer and are
// not listed (they stay answerable through their handles; a re-ask lists them).
//
// A subject no store can match (ownerMatchable) cannot be left out as an owner; for it the
// filter selects every approver request and keep drops the caller's own jobs after the store.
// Only the caller's own rows are skipped then, so nothing of another principal's job reaches
// the page or its (encrypted) cursor.
func ApprovalsJobFilter(tenant, sub string, lf ListFilter) (jobstore.Filter, error) {
	if !lf.All || lf.Status != workflows.StatusAwaitingInput {
		return jobstore.Filter{}, fmt.Errorf("approvals: %w", jobstore.ErrQueryValue)
	}
	jf, err := ListJobFilter(tenant, sub, lf)
	if err != nil {
		return jobstore.Filter{}, err
	}
	if authz.ValidSubject(sub) != nil {
		return jobstore.Filter{}, fmt.Errorf("sub: %w", jobstore.ErrQueryValue)
	}
	jf.Answerers = []string{workflows.AnswererApproverOrOwner, workflows.AnswererApprover}
	if jobstore.OwnerMatchable(sub) {
		jf.ApproverNot = sub
	}
	if err := jf.Validate(); err != nil {
		return jobstore.Filter{}, err
	}
	return jf, nil
}

// identityKey holds, in a verified token's TokenInfo.Extra, what the token says of the person
// (workflows.Identity): it goes to the decision record of an answer the token carries.
const IdentityKey = "jobgate.identity"

// SignedInOIDCSession is the SignedInWith of an answer given in a browser session (pages).
const SignedInOIDCSession = "oidc-session"

// MetaSurface is wire.MetaSurface: the _meta key by which a resume_* call declares its surface.
const MetaSurface = wire.MetaSurface

func IdentityOf(c authz.Claims) workflows.Identity {
	return workflows.Identity{Issuer: c.Issuer, Name: c.Person.Name, Email: c.Person.Email,
		AuthTime: c.Person.AuthTime, AMR: c.Person.AMR, ACR: c.Person.ACR}
}

// callIdentity is the identity of the token that carried this call: the tool call's (MRTR and
// resume_*), else the HTTP request's (tasks/*). Zero when none is known.
func CallIdentity(ctx context.Context) workflows.Identity {
	var ti *auth.TokenInfo
	if rec, ok := ctx.Value(CallRecordKey{}).(*CallRecord); ok && rec.Req != nil && rec.Req.Extra != nil {
		ti = rec.Req.Extra.TokenInfo
	}
	if ti == nil {
		ti = auth.TokenInfoFromContext(ctx)
	}
	if ti == nil {
		return workflows.Identity{}
	}
	id, _ := ti.Extra[IdentityKey].(workflows.Identity)
	return id
}

// callSurface is the surface a resume_* call declares in its _meta (see MetaSurface).
func CallSurface(ctx context.Context) string {
	if rec, ok := ctx.Value(CallRecordKey{}).(*CallRecord); ok && rec.Req != nil && rec.Req.Params != nil {
		if s, _ := rec.Req.Params.GetMeta()[MetaSurface].(string); s == wire.SurfaceCLI {
			return workflows.SurfaceCLI
		}
	}
	return workflows.SurfaceTool
}

// answerer is who a resume is recorded as given by beyond the principal: their identity, the
// surface and how they signed in.
type Answerer struct {
	id           workflows.Identity
	Surface      string
	SignedInWith string
}

// tokenAnswerer is the answerer of a call carried by a bearer token through surface.
func TokenAnswerer(ctx context.Context, surface string) Answerer {
	return Answerer{id: CallIdentity(ctx), Surface: surface, SignedInWith: workflows.SignedInBearerJWT}
}

// answererOf is who answers, as the seal and the decision record carry it.
func AnswererOf(a wire.Approver) Answerer {
	who := Answerer{Surface: a.Surface, SignedInWith: a.SignedInWith,
		id: workflows.Identity{Issuer: a.Issuer, Name: a.Name, Email: a.Email, AuthTime: a.AuthTime, AMR: a.AMR, ACR: a.ACR}}
	if !who.id.AuthTime.IsZero() {
		who.id.AuthTime = who.id.AuthTime.Truncate(time.Second).UTC() // sealed to the second
	}
	return who
}

// shownPrompt is the meaning a surface showed for input request inputID of j: its prompt while
// that request is open, else "" (the validator then refuses the stale input_id anyway).
func ShownPrompt(j *jobstore.Job, inputID string) string {
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
