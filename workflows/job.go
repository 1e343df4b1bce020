package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/authz"
)

// jobRun is the kind-independent part of one workflow run: the JobStatus search attribute, the
// memo get_* reads, the cancel watcher and the one input-request mechanism (request, validator,
// expiry, reject, the jobgate.resume update). Every kind's workflow embeds one.
type jobRun struct {
	tenant, owner string
	// needs is the open input request; nil when none is open.
	needs *NeedsInput
	// answer is the accepted resume of the current request; nil until one arrives.
	answer *ResumeRequest
	// decision records the accepted answer (who, when, surface, how signed in); nil until one.
	decision *DecisionRecord
	// rejected: the run ends because its request was rejected; finish keeps the decision
	// record in the memo (MemoDecision), the one place get_* can read it for a job with no result.
	rejected bool
	terminal bool
	// status is the last status set (setStatus); "" while the run is still queued.
	status Status
	// verifier opens resume seals; nil refuses every resume.
	verifier ResumeVerifier
	// notifications says which events the tenant wants sent; nil: none.
	notifications Notifications
	// usage, when set, says what the job used; finish records it in the memo (MemoUsage).
	usage func() Usage
	// checkExtend checks an open budget request's extend_by (InputRequest.CheckExtend); nil
	// when the open request takes none.
	checkExtend func(Budget) string
	// progressAsked: this run has decided whether to start a job.progress notifier;
	// progressNotify: the job has one (started by this run or, carried, an earlier one).
	progressAsked, progressNotify bool
}

// newJobRun checks the run belongs to tenant, then registers the resume update (validator next
// to the handler) and the cancel watcher.
func newJobRun(ctx workflow.Context, w *Workflows, tenant, owner string) (*jobRun, error) {
	if err := checkTenant(ctx, tenant); err != nil {
		return nil, err
	}
	r := &jobRun{tenant: tenant, owner: owner}
	if w != nil {
		r.verifier = w.Resume
		r.notifications = w.Notify
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateResume, r.resume,
		workflow.UpdateHandlerOptions{Validator: r.validateResume}); err != nil {
		return nil, err
	}
	// Read-only: it waits for state the run sets anyway and issues no command, so histories
	// without it replay unchanged. A run that ends without ever setting a status (it fails
	// before) abandons the waiter; the caller then reads the job as it is.
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateFirstState, r.firstState,
		workflow.UpdateHandlerOptions{Validator: r.validateFirstState, UnfinishedPolicy: workflow.HandlerUnfinishedPolicyAbandon}); err != nil {
		return nil, err
	}
	if breakingChange {
		// Test builds only (breaking_on.go): an ungated new first command.
		if err := workflow.Sleep(ctx, time.Millisecond); err != nil {
			return nil, err
		}
	}
	// Report "cancelling" as soon as a cancel request lands, while the work winds down.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, func(g workflow.Context) {
		ctx.Done().Receive(g, nil)
		if !r.terminal {
			r.setStatus(g, StatusCancelling)
		}
	})
	return r, nil
}

func (r *jobRun) setStatus(ctx workflow.Context, s Status) {
	r.status = s
	// JobAnswerer follows the open request: set while awaiting input, cleared on every other
	// status. It rides in the same upsert command as JobStatus, so the commands a run issues are
	// unchanged and recorded histories replay (the SDK matches an upsert by type, not content).
	answerer := SAJobAnswerer.ValueUnset()
	if a := Answerer(r.needs); s == StatusAwaitingInput && a != "" {
		answerer = SAJobAnswerer.ValueSet(a)
	}
	// Upserting search attributes only fails on a misregistered namespace; the job itself must
	// go on, and get_* falls back to the execution status.
	if err := workflow.UpsertTypedSearchAttributes(ctx, SAJobStatus.ValueSet(string(s)), answerer); err != nil {
		workflow.GetLogger(ctx).Warn("upsert JobStatus failed", "error", err)
	}
	if s == StatusRunning {
		// Once per job, for every kind: the job.progress notifier (when the tenant wants it).
		r.startProgressNotify(ctx)
	}
}

func (r *jobRun) upsertMemo(ctx workflow.Context, m map[string]any) {
	if err := workflow.UpsertMemo(ctx, m); err != nil {
		workflow.GetLogger(ctx).Warn("upsert memo failed", "error", err)
	}
}

// finish records a terminal status, final progress and error before the run closes.
func (r *jobRun) finish(ctx workflow.Context, s Status, jerr *JobError, p Progress) {
	r.terminal = true
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	r.setStatus(dctx, s)
	m := map[string]any{MemoProgress: p, MemoNeedsInput: nil}
	if jerr != nil {
		m[MemoError] = jerr
	}
	if r.rejected && r.decision != nil {
		// In the same upsert command as the error, so the run issues no extra command for it.
		m[MemoDecision] = r.decision
	}
	if r.usage != nil {
		// Also in that upsert: a memo's content is no command, so histories replay.
		m[MemoUsage] = r.usage()
	}
	r.upsertMemo(dctx, m)
	r.notifyFinished(dctx, s, jerr)
}

// InputRequest is what a workflow asks a person before it goes on.
type InputRequest struct {
	// Name makes the input ID unique within the job ("approve", "approve-2" after a re-ask).
	Name        string
	Prompt      string
	Scope       map[string]any // what is being approved, shown to whoever answers
	ScopeDigest string
	Approver    authz.Approver
	// AllowSelf lets the job's owner answer an approver request (four eyes off).
	AllowSelf bool
	Timeout   time.Duration
	// Soft: a reject or an expiry does not end the job; askInput returns errInputDeclined and
	// the kind decides (an eval's budget request ends it succeeded with a partial result).
	Soft bool
	// AnswerSchema is the answer's JSON schema; nil: approve/reject with a comment.
	AnswerSchema map[string]any
	// CheckExtend, when set, lets an approval carry extend_by and says what is wrong with one
	// ("" when nothing); nil refuses extend_by.
	CheckExtend func(Budget) string
}

// errInputDeclined is askInput's answer to a Soft request that was rejected or expired.
var errInputDeclined = errors.New("input request declined")

// askInput opens req, waits for an accepted answer, expiry or cancel, and returns nil only on
// approval. On anything else the job's terminal state is recorded and the error to return
// from the workflow is given; progress renders the job's progress with a message.
func (r *jobRun) askInput(ctx workflow.Context, req InputRequest, progress func(workflow.Context, string) Progress) error {
	info := workflow.GetInfo(ctx)
	sum := sha256.Sum256([]byte(info.WorkflowExecution.ID + "|" + info.OriginalRunID))
	// "approve-<hex>" for the first request: the ID every recorded history carries.
	id := req.Name + "-" + hex.EncodeToString(sum[:6])
	r.answer = nil
	r.checkExtend = req.CheckExtend
	schema := req.AnswerSchema
	if schema == nil {
		schema = approvalAnswerSchema()
	}
	r.needs = &NeedsInput{
		InputID:      id,
		Prompt:       req.Prompt,
		AnswerSchema: schema,
		ScopeDigest:  req.ScopeDigest,
		Scope:        req.Scope,
		Approver:     req.Approver,
		AllowSelf:    req.AllowSelf,
		RequestedBy:  r.owner,
		ExpiresAt:    workflow.Now(ctx).Add(req.Timeout),
	}
	r.setStatus(ctx, StatusAwaitingInput)
	r.upsertMemo(ctx, map[string]any{MemoNeedsInput: r.needs, MemoProgress: progress(ctx, "waiting for approval")})
	// Tell the approvers (never waited for); the delivery stops once the request is answered,
	// expires or the job is cancelled: nobody needs to be told about a request no longer open.
	stopNotify := r.notifyApproval(ctx)
	defer stopNotify()

	// A named timer, so the UI's timeline says what the job is waiting for.
	answered, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: req.Timeout,
		TimerOptions: workflow.TimerOptions{Summary: "waiting for approval (" + string(req.Approver) + ")"}},
		func() bool { return r.answer != nil })
	if err != nil { // cancelled while waiting
		r.finish(ctx, StatusCancelled, &JobError{Code: ErrCodeCancelled, Message: "cancelled while waiting for approval"}, progress(ctx, "cancelled"))
		return err
	}
	if req.Soft && (!answered || r.answer.Decision == DecisionReject) {
		r.needs = nil
		r.upsertMemo(ctx, map[string]any{MemoNeedsInput: nil})
		return errInputDeclined
	}
	if !answered {
		r.needs = nil
		msg := "approval was not answered in time"
		r.finish(ctx, StatusFailed, &JobError{Code: ErrCodeInputExpired, Message: msg}, progress(ctx, msg))
		return temporal.NewNonRetryableApplicationError(msg, ErrCodeInputExpired, nil)
	}
	if r.answer.Decision == DecisionReject {
		msg := "rejected by " + r.answer.Principal.Subject
		if r.answer.Comment != "" {
			msg += ": " + r.answer.Comment
		}
		// Runs from before changeRejectDecision replay without the record in their memo.
		r.rejected = workflow.GetVersion(ctx, changeRejectDecision, workflow.DefaultVersion, 1) >= 1
		r.finish(ctx, StatusCancelled, &JobError{Code: ErrCodeRejected, Message: msg}, progress(ctx, "rejected"))
		return temporal.NewCanceledError(msg)
	}
	r.upsertMemo(ctx, map[string]any{MemoNeedsInput: nil})
	return nil
}

// changeRejectDecision is the workflow.GetVersion change ID of a rejected job keeping its
// decision record in its memo (MemoDecision).
const changeRejectDecision = "reject-decision-memo"

// approvedBy is the subject whose answer was accepted last ("" when none).
func (r *jobRun) approvedBy() string {
	if r.answer == nil {
		return ""
	}
	return r.answer.Principal.Subject
}

func approvalAnswerSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"decision": map[string]any{"type": "string", "enum": []string{DecisionApprove, DecisionReject}},
			"comment":  map[string]any{"type": "string", "maxLength": 1000},
		},
		"required": []string{"decision"},
	}
}

func reject(kind, msg string) error { return temporal.NewApplicationError(msg, kind) }

// PolicyJob is what authz needs to know about a job with open request needs (nil: none).
func PolicyJob(tenant, owner string, needs *NeedsInput) authz.Job {
	j := authz.Job{Tenant: tenant, Owner: owner}
	if needs != nil {
		j.OpenInput, j.SelfApproval = needs.Approver, needs.AllowSelf
	}
	return j
}

// checkTenant fails a run whose input names another tenant than its workflow ID ("<tenant>/…"):
// the frontend always starts jobs under the caller's tenant, so a mismatch is a start by someone
// else (a plain Temporal client) trying to act in one tenant under another's name. It runs
// before anything is recorded (no memo, search attribute or activity), and issues no command, so
// histories of jobs started by a frontend replay unchanged.
func checkTenant(ctx workflow.Context, tenant string) error {
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	if tenant == "" || !strings.HasPrefix(id, tenant+"/") {
		workflow.GetLogger(ctx).Error("job refused: its input's tenant does not match its workflow ID",
			"workflow_id", id, "tenant", tenant)
		return temporal.NewNonRetryableApplicationError("the job's tenant does not match its workflow ID", ErrCodeTenantMismatch, nil)
	}
	return nil
}

// validateFirstState refuses the first-state update of a finished run, so that a late one
// leaves no trace in its history.
func (r *jobRun) validateFirstState(workflow.Context) error {
	if r.terminal {
		return reject(RejectInputNotExpected, "the job has ended")
	}
	return nil
}

// firstState waits until the run has set a status and answers it (UpdateFirstState).
func (r *jobRun) firstState(ctx workflow.Context) (Status, error) {
	if err := workflow.Await(ctx, func() bool { return r.status != "" }); err != nil {
		return "", err
	}
	return r.status, nil
}

// validateResume runs before an update is admitted to history: nothing it rejects leaves a trace.
// The seal comes first, so the policy below decides with a principal a frontend verified.
func (r *jobRun) validateResume(ctx workflow.Context, req ResumeRequest) error {
	if err := r.checkSeal(ctx, req); err != nil {
		return err
	}
	job := PolicyJob(r.tenant, r.owner, r.needs)
	switch authz.Decide(req.Principal, authz.ActionResume, job) {
	case authz.NotFound:
		return reject(RejectNotFound, "job not found")
	case authz.Forbidden:
		return reject(RejectForbidden, authz.ResumeRefusal(req.Principal, job))
	}
	if r.needs == nil {
		return reject(RejectInputNotExpected, "the job is not waiting for input")
	}
	if req.InputID != r.needs.InputID {
		return reject(RejectInputNotExpected, "input_id does not name the open input request")
	}
	if req.ScopeDigest != r.needs.ScopeDigest {
		return reject(RejectInputNotExpected, "scope_digest does not match the scope awaiting approval")
	}
	if req.Meaning != "" && req.Meaning != r.needs.Prompt {
		// The surface showed another text than the open request's: answering would approve
		// words the approver never read. A validator is no command, so histories replay.
		return reject(RejectInputNotExpected, "the request changed since it was shown (its meaning differs); read it again and answer the current one")
	}
	if req.Decision != DecisionApprove && req.Decision != DecisionReject {
		return reject(RejectInvalidArgument, "decision must be approve or reject")
	}
	if req.ExtendBy != nil {
		switch {
		case r.checkExtend == nil:
			return reject(RejectInvalidArgument, "extend_by: only an eval's budget request takes it")
		case req.Decision != DecisionApprove:
			return reject(RejectInvalidArgument, "extend_by: only with decision approve")
		}
		if msg := r.checkExtend(*req.ExtendBy); msg != "" {
			return reject(RejectInvalidArgument, msg)
		}
	}
	return nil
}

func (r *jobRun) resume(ctx workflow.Context, req ResumeRequest) (ResumeResult, error) {
	r.answer = &req
	prompt := ""
	if r.needs != nil { // set whenever the validator admitted the update
		prompt = r.needs.Prompt
	}
	r.decision = decisionRecord(req, workflow.GetInfo(ctx), prompt, workflow.Now(ctx))
	r.needs = nil // a second resume, even a concurrent one, is now input_not_expected
	return ResumeResult{Decision: req.Decision, By: req.Principal.Subject}, nil
}
