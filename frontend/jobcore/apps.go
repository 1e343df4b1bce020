package jobcore

// MCP Apps (io.modelcontextprotocol/ui, SEP-1865): for a host that declares the extension,
// list_approvals and get_* name an approval card (frontend/mcpapp serves it), their results
// carry in _meta a short-lived nonce per open request the caller may answer, and the card's
// decision comes back through decide_approval, a tool only the app may call. Hosts that do not
// declare the extension never see any of it. Also here: the surfaces a job's open request may
// be answered on (a dataset's approval_surfaces) and the step-up rule of the app surface.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

const (
	// AppsExtension names the MCP Apps extension in client and server capabilities.
	AppsExtension = "io.modelcontextprotocol/ui"
	// AppMIMEType is the card's resource type: an HTML document for a sandboxed iframe.
	AppMIMEType = "text/html;profile=mcp-app"
	// ApprovalCardURI is the approval card's resource.
	ApprovalCardURI = "ui://jobgate/approval-card"
	// DecideToolName is the app-only tool the card decides through.
	DecideToolName = "decide_approval"
	// MetaApprovalCard is the result _meta key under which the card finds its nonces
	// (wire.ApprovalCardMeta); hosts keep a result's _meta from the model.
	MetaApprovalCard = "io.jobgate/approval-card"
	// AppNonceTTL bounds an app nonce's life (and the request's own expiry bounds it further).
	AppNonceTTL = 10 * time.Minute
	// SurfaceApp is the decision record's surface of an answer given on the approval card.
	SurfaceApp = workflows.SurfaceApp
)

// DeclaresApps reports whether a request's own capabilities (2026-07-28 params._meta) declare
// the MCP Apps extension with the card's MIME type. Older clients declare capabilities only in
// initialize, which a stateless server does not keep: they are hosts without MCP Apps here.
func DeclaresApps(meta map[string]any) bool {
	raw, ok := meta[mcp.MetaKeyClientCapabilities]
	if !ok {
		return false
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return false
	}
	var caps struct {
		Extensions map[string]struct {
			MIMETypes []string `json:"mimeTypes"`
		} `json:"extensions"`
	}
	if json.Unmarshal(b, &caps) != nil {
		return false
	}
	ext, ok := caps.Extensions[AppsExtension]
	return ok && slices.Contains(ext.MIMETypes, AppMIMEType)
}

// callDeclaresApps: the tool call being served comes from a 2026-07-28 host that renders apps.
func callDeclaresApps(ctx context.Context) bool {
	req := callRequest(ctx)
	if req == nil || req.Params == nil {
		return false
	}
	if s := req.Session; s != nil {
		if ip := s.InitializeParams(); ip != nil && ip.ProtocolVersion < ProtocolMRTR {
			return false
		}
	}
	return DeclaresApps(req.Params.Meta)
}

// noteApprovalCards gives the card, when the call's host renders apps, a nonce for each of
// jobs whose open request p may answer now: in the result's _meta only (CallRecord.meta),
// never in what the model reads. A job p may not answer (the owner's own job that waits for a
// steward) gets none: its card shows the request without a form.
func (f *Core) noteApprovalCards(ctx context.Context, p authz.Principal, jobs ...*jobstore.Job) {
	rec, ok := ctx.Value(CallRecordKey{}).(*CallRecord)
	if !ok || !callDeclaresApps(ctx) {
		return
	}
	m := wire.ApprovalCardMeta{Nonces: map[string]string{}}
	for _, j := range jobs {
		if j.NeedsInput == nil || j.Status() != workflows.StatusAwaitingInput || authz.Decide(p, authz.ActionResume, j.PolicyJob()) != authz.Allow {
			continue
		}
		r, exp := f.sealableRequest(p, j, AppNonceTTL)
		n := f.Opts.ResumeKeys.SealAppNonce(handle.AppNonce{Request: r, Expiry: exp})
		if n != "" {
			m.Nonces[j.ID] = n
		}
	}
	if len(m.Nonces) > 0 {
		rec.meta = mcp.Meta{MetaApprovalCard: m}
	}
}

// DecideIn are decide_approval's arguments: resume_*'s, and the card's nonce.
type DecideIn struct {
	Handle      string `json:"handle" jsonschema:"the job's handle, verbatim"`
	InputID     string `json:"input_id" jsonschema:"needs_input.input_id of the open request"`
	ScopeDigest string `json:"scope_digest" jsonschema:"needs_input.scope_digest of the open request"`
	Decision    string `json:"decision" jsonschema:"approve or reject"`
	Comment     string `json:"comment,omitempty" jsonschema:"optional note recorded with the decision (at most 1000 chars)"`
	Nonce       string `json:"nonce" jsonschema:"the approval card's nonce for this request, from the shown result's _meta"`
}

// decideTool is the approval card's decision: only the app may call it (_meta.ui.visibility),
// and a host without MCP Apps is never shown it (frontend/mcpapp filters tools/list).
func (f *Core) decideTool() ToolDef {
	td := NewTool(f, authz.ActionResume, &mcp.Tool{
		Name:  DecideToolName,
		Title: "Decide an approval on the approval card",
		Description: "Called by jobgate's approval card (MCP Apps) when the person clicks Approve or Reject; not for models: " +
			"it needs the card's nonce, which only the card is given. Models answer with resume_* where the dataset allows it.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
		Meta:        mcp.Meta{"ui": map[string]any{"resourceUri": ApprovalCardURI, "visibility": []string{"app"}}},
	}, f.decide).enum("decision", workflows.DecisionApprove, workflows.DecisionReject)
	return td
}

// decide answers the open request shown on the card: the job resolved for p as resume_*
// does, then the nonce checked against p and exactly that request, then the step-up rule,
// then the same resume as every surface, recorded with surface app.
func (f *Core) decide(ctx context.Context, p authz.Principal, in DecideIn) (*JobSummary, error) {
	if err := checkAnswer(in.InputID, in.ScopeDigest, in.Decision, in.Comment); err != nil {
		return nil, err
	}
	if in.Nonce == "" {
		return nil, invalidArg("nonce", "is required (the approval card's nonce)")
	}
	j, err := f.Resolve(ctx, p, in.Handle, f.RefKind(in.Handle), authz.ActionResume)
	if err != nil {
		return nil, err
	}
	n, err := f.Opts.ResumeKeys.OpenAppNonce(in.Nonce, f.Opts.Now())
	switch {
	case errors.Is(err, handle.ErrExpired):
		return nil, ToolErr(CodeForbidden, "the approval card has expired; reload it (call the tool that showed it again) and decide there")
	case err != nil || !n.PutTo(p.Tenant, p.Subject, j.ID):
		return nil, ToolErr(CodeForbidden, "this decision carries no valid approval-card nonce for you and this job: it must come from jobgate's approval card shown to you")
	case n.InputID != in.InputID || n.ScopeDigest != in.ScopeDigest:
		return nil, ToolErr(CodeInputNotExpected, "the card was shown for another request (input_id or scope_digest differ); reload it")
	}
	ni := j.NeedsInput
	if in.Decision == workflows.DecisionApprove && ni != nil && ni.InputID == in.InputID && sensitiveScope(ni) {
		if err := f.stepUp(ctx, j); err != nil {
			return nil, err
		}
	}
	j, err = f.ResumeJob(ctx, p, j, ResumeIn{Handle: in.Handle, InputID: in.InputID, ScopeDigest: in.ScopeDigest,
		Decision: in.Decision, Comment: in.Comment}, TokenAnswerer(ctx, SurfaceApp), ShownPrompt(j, in.InputID))
	if err != nil {
		return nil, err
	}
	s := f.Summary(p, j)
	return &s, nil
}

// sensitiveScope: the open request approves sensitive columns (the pages' rule for a fresh
// sign-in).
func sensitiveScope(ni *workflows.NeedsInput) bool {
	return len(pages.ScopeStrings(ni.Scope["sensitive_columns"])) > 0
}

// stepUp is the pages' fresh-sign-in rule on the app surface: approving a sensitive scope on the
// card needs a token whose auth_time is no older than ApprovalMaxAge. A host's token says when
// the person last signed in (auth_time) or nothing; nothing, or too long ago, is refused with
// the page's link, where the person can sign in again.
func (f *Core) stepUp(ctx context.Context, j *jobstore.Job) error {
	maxAge := f.Opts.ApprovalMaxAge
	if maxAge <= 0 {
		maxAge = pages.ApprovalMaxAgeDefault
	}
	at := CallIdentity(ctx).AuthTime
	if pages.FreshEnough(at, f.Opts.Now(), maxAge) {
		return nil
	}
	why := "your token does not say when you signed in (no auth_time)"
	if !at.IsZero() {
		why = "you signed in at " + pages.When(at) + ", longer ago than " + maxAge.String()
	}
	return ToolErr(CodeForbidden, "approving a sensitive scope needs a recent sign-in and %s: sign in to your chat host again, or approve on the page %s",
		why, f.ApprovalPageURL(j.ID))
}

// ApprovalPageURL is the link to job jobID's request page on this server.
func (f *Core) ApprovalPageURL(jobID string) string {
	return f.publicBase() + pages.ApprovalPath(jobID)
}

// surfacesOf are the only surfaces job j's open request may be answered on (nil: any), as its
// kind says (an export's dataset's approval_surfaces, for a sensitive scope).
func (f *Core) surfacesOf(j *jobstore.Job) []string {
	for _, k := range f.Kinds {
		if k.Name == j.Kind && k.Surfaces != nil {
			return k.Surfaces(j)
		}
	}
	return nil
}

// checkSurface refuses an answer through surface when job j's open request must be answered on
// a human surface: forbidden, with the page's link.
func (f *Core) checkSurface(j *jobstore.Job, surface string) error {
	allowed := f.surfacesOf(j)
	if allowed == nil || slices.Contains(allowed, surface) {
		return nil
	}
	where := "jobgate's approval page"
	if slices.Contains(allowed, SurfaceApp) {
		where += " or the approval card of a chat host with MCP Apps"
	}
	if !slices.Contains(allowed, workflows.SurfacePage) {
		where = "the approval card of a chat host with MCP Apps"
	}
	return ToolErr(CodeForbidden, "this request must be approved by a person on %s, not with a bearer token (%s): %s",
		where, surface, f.ApprovalPageURL(j.ID))
}

// exportSurfaces is the export kind's rule: a sensitive scope of a dataset with
// approval_surfaces is answered on those surfaces only.
func (k *exportKind) exportSurfaces(j *jobstore.Job) []string {
	ni := j.NeedsInput
	if ni == nil || !sensitiveScope(ni) {
		return nil
	}
	d, ok := k.opts.Datasets[fmt.Sprint(ni.Scope["dataset"])]
	if !ok || len(d.ApprovalSurfaces) == 0 {
		return nil
	}
	out := make([]string, 0, len(d.ApprovalSurfaces))
	for _, s := range d.ApprovalSurfaces {
		switch s {
		case contract.ApprovalSurfacePage:
			out = append(out, workflows.SurfacePage)
		case contract.ApprovalSurfaceApp:
			out = append(out, SurfaceApp)
		}
	}
	return out
}
