package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// ResumeVerifier opens the seal a frontend put on a resume (frontend/handle's resume seal, with
// the resume keys only frontends and workers hold). The worker injects it (cmd wires it); the
// workflows never see a key. Implementations must be safe for concurrent use, must not block,
// and must return an error for anything but a correctly signed, unexpired seal at now; the
// error text reaches the sender and must not contain key material.
type ResumeVerifier interface {
	OpenResumeSeal(seal string, now time.Time) (ResumeSeal, error)
}

// ResumeSeal is what a resume seal binds: the answer, the run and open request it answers, and
// the principal whose verified token carried it.
type ResumeSeal struct {
	WorkflowID  string
	RunID       string
	InputID     string
	ScopeDigest string
	Principal   authz.Principal
	Decision    string
	// CommentDigest is CommentDigest(comment).
	CommentDigest string
	Surface       string
	SignedInWith  string
	Identity      Identity
	// MeaningDigest is TextDigest of the meaning shown ("" for none).
	MeaningDigest string
	Expiry        time.Time
}

// Surfaces a resume arrives through (ResumeRequest.Surface).
const (
	SurfaceTool  = "tool"  // resume_* tool call
	SurfaceMRTR  = "mrtr"  // an MRTR answer to a get_* elicitation
	SurfaceTasks = "tasks" // tasks/update answering a task's input request
	SurfacePage  = "page"  // the /approvals web pages, by a signed-in person
	// SurfaceApp: the MCP Apps approval card, through its app-only tool with the card's nonce
	// (frontend/jobcore/apps.go says what that proves).
	SurfaceApp = "app"
	// SurfaceCLI: `jobgate approvals` says so in the request (_meta); self-declared by a client
	// holding a valid token, so it records what the client claimed, not a proof.
	SurfaceCLI = "cli"
)

// SignedInBearerJWT is ResumeRequest.SignedInWith for a principal from a verified bearer JWT.
const SignedInBearerJWT = "bearer-jwt"

// CommentDigest is the lowercase hex SHA-256 of a resume's comment, as sealed.
func CommentDigest(comment string) string { return TextDigest(comment) }

// TextDigest is the lowercase hex SHA-256 of s: how the seal binds a comment or a meaning.
func TextDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// MeaningDigest is the sealed digest of a meaning text: "" for none, else TextDigest.
func MeaningDigest(meaning string) string {
	if meaning == "" {
		return ""
	}
	return TextDigest(meaning)
}

// Workflows are the job kinds' workflow functions together with the behaviour the worker
// injects into them. Register its methods under the kinds' names (Kind.Workflow).
type Workflows struct {
	// Resume opens resume seals. Nil makes every resume refused (fail closed): a worker without
	// resume keys cannot tell a frontend's answer from a forged one.
	Resume ResumeVerifier
	// Notify says which events a tenant has notification endpoints for (wired in cmd from the
	// tenants file). Nil sends none.
	Notify Notifications
}

// DecisionRecord is who answered a job's input request, when, through which surface and how
// they signed in, what they were shown and exactly what they answered, with the seal; it goes
// to the export's result and manifest. The accepted ResumeRequest is in history as well.
type DecisionRecord = contract.DecisionRecord

func decisionRecord(req ResumeRequest, info *workflow.Info, prompt string, at time.Time) *DecisionRecord {
	d := &DecisionRecord{InputID: req.InputID, ScopeDigest: req.ScopeDigest, Decision: req.Decision,
		Tenant: req.Principal.Tenant, By: req.Principal.Subject, At: at, Surface: req.Surface, SignedInWith: req.SignedInWith,
		Identity: req.Identity, Comment: req.Comment, Prompt: prompt, Seal: req.Seal,
		Signature: req.Signature}
	if req.Seal != "" { // records of answers from before seals carry neither (replays stay the same)
		d.WorkflowID, d.RunID = info.WorkflowExecution.ID, info.WorkflowExecution.RunID
	}
	for _, s := range req.Principal.Scopes {
		d.Scopes = append(d.Scopes, string(s))
	}
	return d
}

// checkSeal is the validator's first step: only an answer sealed by a frontend for exactly
// this run, this open request, this principal, decision and comment gets any further.
func (r *jobRun) checkSeal(ctx workflow.Context, req ResumeRequest) error {
	info := workflow.GetInfo(ctx)
	log := workflow.GetLogger(ctx)
	if r.verifier == nil {
		log.Error("resume refused: this worker has no resume keys (--resume-keys / --resume-keys-file), so it cannot tell a frontend's answer from a forged one",
			"workflow_id", info.WorkflowExecution.ID)
		return reject(RejectUnsealed, "this worker has no resume keys configured; no answer can be accepted")
	}
	if req.Seal == "" {
		log.Warn("resume refused: no seal", "workflow_id", info.WorkflowExecution.ID, "sub", req.Principal.Subject)
		return reject(RejectUnsealed, "the answer carries no seal from a jobgate frontend")
	}
	s, err := r.verifier.OpenResumeSeal(req.Seal, workflow.Now(ctx))
	if err != nil {
		log.Warn("resume refused: seal does not open", "workflow_id", info.WorkflowExecution.ID, "error", err)
		return reject(RejectUnsealed, "the answer's seal is not valid: "+err.Error())
	}
	field := ""
	switch {
	case s.WorkflowID != info.WorkflowExecution.ID:
		field = "workflow ID"
	case s.RunID != info.WorkflowExecution.RunID:
		field = "run ID"
	case s.InputID != req.InputID:
		field = "input_id"
	case s.ScopeDigest != req.ScopeDigest:
		field = "scope_digest"
	case s.Principal.Tenant != req.Principal.Tenant || s.Principal.Subject != req.Principal.Subject ||
		!slices.Equal(s.Principal.Scopes, req.Principal.Scopes):
		field = "principal"
	case s.Decision != req.Decision:
		field = "decision"
	case s.CommentDigest != CommentDigest(req.Comment):
		field = "comment"
	case s.Surface != req.Surface || s.SignedInWith != req.SignedInWith:
		field = "surface"
	default:
		field = IdentityMismatch(s.Identity, req.Identity)
		if field == "" && s.MeaningDigest != MeaningDigest(req.Meaning) {
			field = "meaning"
		}
	}
	if field != "" {
		log.Warn("resume refused: seal does not match the request", "workflow_id", info.WorkflowExecution.ID, "field", field)
		return reject(RejectUnsealed, "the answer's seal does not match its "+field)
	}
	return nil
}

// IdentityMismatch names the first approver field where sealed and got differ ("" when they
// agree): issuer, name, email, auth_time, amr or acr. auth_time compares to the second, as
// sealed. Shared by the validator and `jobgate verify`'s record check.
func IdentityMismatch(sealed, got Identity) string {
	switch {
	case sealed.Issuer != got.Issuer:
		return "issuer"
	case sealed.Name != got.Name:
		return "name"
	case sealed.Email != got.Email:
		return "email"
	case sealed.AuthTime.IsZero() != got.AuthTime.IsZero() ||
		!sealed.AuthTime.IsZero() && sealed.AuthTime.Unix() != got.AuthTime.Unix():
		return "auth_time"
	case !slices.Equal(sealed.AMR, got.AMR):
		return "amr"
	case sealed.ACR != got.ACR:
		return "acr"
	}
	return ""
}
