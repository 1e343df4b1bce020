package jobcore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle/resumeseal"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// HandleIn names a job.
type HandleIn struct {
	Handle string `json:"handle" jsonschema:"the handle from start_*, get_* or list_jobs, verbatim; or the job's job_id"`
}

// CancelIn are cancel_*'s arguments.
type CancelIn struct {
	Handle string `json:"handle" jsonschema:"the job's handle, verbatim; or its job_id"`
	Reason string `json:"reason,omitempty" jsonschema:"why, for the audit trail (at most 500 chars)"`
}

// ResumeIn are resume_*'s arguments.
type ResumeIn struct {
	Handle      string `json:"handle" jsonschema:"the job's handle, verbatim; or its job_id"`
	InputID     string `json:"input_id" jsonschema:"needs_input.input_id of the open request"`
	ScopeDigest string `json:"scope_digest" jsonschema:"needs_input.scope_digest of the open request; binds the answer to exactly what was asked"`
	Decision    string `json:"decision" jsonschema:"approve or reject"`
	Comment     string `json:"comment,omitempty" jsonschema:"optional note recorded with the decision (at most 1000 chars)"`
	// ExtendBy answers an eval's budget request only (resume_eval).
	ExtendBy *workflows.Budget `json:"extend_by,omitempty" jsonschema:"evals only, approving a budget request: how much to raise the budget by (max_cost in the suite's cost_unit, max_episode_seconds); without it approve raises it by needs_input.scope.approve_extends_by"`
}

const (
	reasonMax  = 500
	CommentMax = 1000
)

// cancel requests cancellation of the caller's job and returns the job as it is afterwards.
func (f *Core) cancel(ctx context.Context, p authz.Principal, in CancelIn, kind string) (*jobstore.Job, error) {
	if utf8.RuneCountInString(in.Reason) > reasonMax {
		return nil, invalidArg("reason", "at most %d characters", reasonMax)
	}
	j, err := f.Resolve(ctx, p, in.Handle, kind, authz.ActionCancel)
	if err != nil {
		return nil, err
	}
	if j.Status().Terminal() {
		return j, nil
	}
	tctx, cancel := context.WithTimeout(ctx, f.Opts.TemporalTimeout)
	defer cancel()
	reason := "cancelled by " + p.Subject
	if in.Reason != "" {
		reason += ": " + in.Reason
	}
	if err := f.Store.Cancel(tctx, j.ID, "jobgate:"+p.Tenant+"/"+p.Subject, reason); err != nil && !errors.Is(err, jobstore.ErrJobNotFound) {
		return nil, err
	}
	// Closed meanwhile (jobstore.ErrJobNotFound): report the final state.
	return f.Describe(ctx, j.ID)
}

// resume answers the job's open input request through the workflow's validated update and
// returns the job as it is afterwards.
func (f *Core) resume(ctx context.Context, p authz.Principal, in ResumeIn, kind string) (*jobstore.Job, error) {
	if err := checkAnswer(in.InputID, in.ScopeDigest, in.Decision, in.Comment); err != nil {
		return nil, err
	}
	j, err := f.Resolve(ctx, p, in.Handle, kind, authz.ActionResume)
	if err != nil {
		return nil, err
	}
	meaning := ""
	if j.NeedsInput != nil {
		meaning = j.NeedsInput.Prompt // what get_* showed as needs_input.prompt
	}
	return f.ResumeJob(ctx, p, j, in, TokenAnswerer(ctx, CallSurface(ctx)), meaning)
}

// checkAnswer validates an answer's fields, naming the one at fault.
func checkAnswer(inputID, scopeDigest, decision, comment string) error {
	in := ResumeIn{InputID: inputID, ScopeDigest: scopeDigest, Decision: decision, Comment: comment}
	switch {
	case in.InputID == "":
		return invalidArg("input_id", "is required (needs_input.input_id)")
	case in.ScopeDigest == "":
		return invalidArg("scope_digest", "is required (needs_input.scope_digest)")
	case in.Decision != workflows.DecisionApprove && in.Decision != workflows.DecisionReject:
		return invalidArg("decision", "must be approve or reject")
	case utf8.RuneCountInString(in.Comment) > CommentMax:
		return invalidArg("comment", "at most %d characters", CommentMax)
	case len(in.InputID) > 128:
		return invalidArg("input_id", "at most 128 characters")
	case len(in.ScopeDigest) > 128:
		return invalidArg("scope_digest", "at most 128 characters")
	}
	return nil
}

// resumeJob delivers an answer to job j, which the caller has resolved: the jobgate.resume
// update, whose validator re-checks principal, input_id and scope_digest before history.
// resume_*, MRTR retries, Tasks updates and the pages (pagesPort.Decide) all end here, and who says
// which surface and who answered beyond p; meaning is the text the surface showed. The request is
// sealed with the resume keys for exactly this run, request, principal and answer: the
// validator refuses anything unsealed, so no other Temporal client can answer for anyone.
func (f *Core) ResumeJob(ctx context.Context, p authz.Principal, j *jobstore.Job, in ResumeIn, who Answerer, meaning string) (*jobstore.Job, error) {
	if authz.Decide(p, authz.ActionResume, j.PolicyJob()) == authz.Forbidden {
		return nil, ToolErr(CodeForbidden, "%s", authz.ResumeRefusal(p, j.PolicyJob()))
	}
	if j.NeedsInput == nil || j.Status() != workflows.StatusAwaitingInput {
		return nil, ToolErr(CodeInputNotExpected, "the job is not waiting for input (status %s)", j.Status())
	}
	if err := f.checkSurface(j, who.Surface); err != nil { // a dataset's approval_surfaces (apps.go)
		return nil, err
	}
	if err := checkExtendBy(in, j.NeedsInput); err != nil {
		return nil, err
	}
	if err := f.raiseQuota(ctx, p.Tenant, in, j.NeedsInput); err != nil {
		return nil, err
	}
	// Same principal + same answer → same update ID, so a retried resume (lost response) is
	// deduplicated by Temporal instead of being rejected as input_not_expected. The answer is
	// all of what the record keeps of it, comment and surface included: a retry with another
	// comment (or from another surface) must not be answered with the first one's outcome while
	// the caller believes its own comment was recorded; it gets a new ID, and the validator
	// refuses it as already answered.
	parts := []string{p.Tenant, p.Subject, in.InputID, in.ScopeDigest, in.Decision, workflows.CommentDigest(in.Comment), who.Surface}
	if in.ExtendBy != nil { // a budget raise is part of the answer; other answers keep their IDs
		parts = append(parts, workflows.ExtendByText(in.ExtendBy))
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	tctx, cancel := context.WithTimeout(ctx, ResumeTimeoutDefault)
	defer cancel()
	req := workflows.ResumeRequest{Principal: p, InputID: in.InputID, ScopeDigest: in.ScopeDigest,
		Decision: in.Decision, Comment: in.Comment, Surface: who.Surface, SignedInWith: who.SignedInWith,
		Identity: who.id, Meaning: meaning, ExtendBy: in.ExtendBy}
	expiry := f.Opts.Now().Add(ResumeSealTTL).Truncate(time.Second)
	req.Seal = resumeseal.Seal(f.Opts.ResumeKeys, j.ID, j.RunID, req, expiry)
	// The same fields, signed for auditors (the decision record's signature); none without
	// signing keys, and the record then fails `jobgate verify`.
	req.Signature = resumeseal.Sign(f.Opts.SigningKeys, j.ID, j.RunID, req, expiry)
	if req.Seal == "" {
		// Only an oversized principal or a describe without a run ID gets here; the worker would
		// refuse the unsealed request anyway.
		f.Logger(ctx).Error("resume not sealed", zap.String("job_id", j.ID), zap.String("run_id", j.RunID))
		return nil, fmt.Errorf("resume %s: the answer could not be sealed", j.ID)
	}
	err := f.Store.Resume(tctx, j.ID, j.RunID, "resume-"+hex.EncodeToString(sum[:12]), req)
	if err != nil {
		return nil, f.resumeError(ctx, j, err)
	}
	return f.Describe(ctx, j.ID)
}

// resumeError maps the store's answer to a resume to the contract's errors.
func (f *Core) resumeError(ctx context.Context, j *jobstore.Job, err error) error {
	var rej *jobstore.ResumeRejected
	switch {
	case errors.As(err, &rej):
		switch rej.Kind {
		case workflows.RejectNotFound:
			return ErrNotFound()
		case workflows.RejectForbidden:
			return ToolErr(CodeForbidden, "%s", rej.Msg)
		case workflows.RejectInvalidArgument:
			if strings.HasPrefix(rej.Msg, "extend_by") { // the budget request's check (eval_budget.go)
				return ToolErr(CodeInvalidArgument, "%s", rej.Msg) // it names the field already
			}
			return invalidArg("decision", "%s", rej.Msg)
		case workflows.RejectUnsealed:
			// This frontend sealed it, so the deployment is wrong: the workers lack the resume
			// keys or hold others, or the clocks are minutes apart.
			f.Logger(ctx).Error("a worker refused this frontend's resume seal; give frontends and workers the same --resume-keys",
				zap.String("job_id", j.ID), zap.String("reason", rej.Msg))
			return ToolErr(CodeUnavailable, "the worker could not verify this server's answer (a deployment problem: the operators are told); retry later")
		default:
			return ToolErr(CodeInputNotExpected, "%s", rej.Msg)
		}
	case errors.Is(err, jobstore.ErrUpdateTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, jobstore.ErrStoreUnavailable):
		return ToolErr(CodeUnavailable, "no worker processed the answer in time; it may still be applied when one does — retry the same call (retries are deduplicated)")
	case errors.Is(err, jobstore.ErrJobNotFound):
		return ToolErr(CodeInputNotExpected, "the job is no longer waiting for input")
	}
	return fmt.Errorf("resume %s: %w", j.ID, err)
}
