package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

// StartEvalIn are start_eval's arguments.
type StartEvalIn struct {
	IdempotencyKey string         `json:"idempotency_key" jsonschema:"your name for this logical run, 1-128 chars of [A-Za-z0-9._:@=+-]; retrying with the same key and arguments returns the same job"`
	Suite          string         `json:"suite" jsonschema:"name of a server-configured eval suite, e.g. demo"`
	Episodes       int            `json:"episodes" jsonschema:"number of episodes to run (1 to the suite's limit, 20000 by default); runs above the suite's approval threshold wait for approval first"`
	Concurrency    int            `json:"concurrency,omitempty" jsonschema:"episodes in flight at once (1 to the suite's limit, 64 by default); defaults to min(episodes, 8)"`
	Params         map[string]any `json:"params,omitempty" jsonschema:"suite parameters; demo takes episode_ms (default 1000) and fail_rate (0-1, default 0.05)"`
}

// HandleIn names a job.
type HandleIn struct {
	Handle string `json:"handle" jsonschema:"the handle from start_eval, get_eval or list_jobs, verbatim"`
}

// CancelIn are cancel_*'s arguments.
type CancelIn struct {
	Handle string `json:"handle" jsonschema:"the job's handle, verbatim"`
	Reason string `json:"reason,omitempty" jsonschema:"why, for the audit trail (at most 500 chars)"`
}

// ResumeIn are resume_*'s arguments.
type ResumeIn struct {
	Handle      string `json:"handle" jsonschema:"the job's handle, verbatim"`
	InputID     string `json:"input_id" jsonschema:"needs_input.input_id of the open request"`
	ScopeDigest string `json:"scope_digest" jsonschema:"needs_input.scope_digest of the open request; binds the answer to exactly what was asked"`
	Decision    string `json:"decision" jsonschema:"approve or reject"`
	Comment     string `json:"comment,omitempty" jsonschema:"optional note recorded with the decision (at most 1000 chars)"`
}

const (
	concurrencyDefaultCap = 8
	reasonMax             = 500
	commentMax            = 1000
)

var idemKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@=+-]{0,127}$`)

func (f *Frontend) startEvalTool() toolDef {
	return newTool(f, &mcp.Tool{
		Name:  "start_eval",
		Title: "Start an eval run",
		Description: "Start an eval run of a suite, or find the one already started with this idempotency_key. " +
			"Returns at once, after the job is durably recorded, with a handle to poll via get_eval. " +
			"Same key and arguments: the same job (created=false). Same key, other arguments: idempotency_key_reused.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, f.startEval).bounds("episodes", 1, f.suiteMax(func(s activities.Suite) int { return s.MaxEpisodes })).
		bounds("concurrency", 1, f.suiteMax(func(s activities.Suite) int { return s.MaxConcurrency }))
}

// suiteMax is the largest limit any configured suite allows (the schema's bound; each suite
// is checked exactly at start).
func (f *Frontend) suiteMax(limit func(activities.Suite) int) float64 {
	m := 1
	for _, s := range f.opts.Suites {
		m = max(m, limit(s))
	}
	return float64(m)
}

func (f *Frontend) getEvalTool() toolDef {
	return newTool(f, &mcp.Tool{
		Name:        "get_eval",
		Title:       "Get an eval run",
		Description: "The eval job's current view: status, progress, open input request, result or error. Answers even while no worker runs (progress as of progress.as_of).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, p authz.Principal, in HandleIn) (*JobView, error) {
		j, err := f.resolve(ctx, p, in.Handle, workflows.KindEval, authz.ActionGet)
		if err != nil {
			return nil, err
		}
		return f.view(ctx, j)
	})
}

func (f *Frontend) cancelEvalTool() toolDef {
	return newTool(f, &mcp.Tool{
		Name:        "cancel_eval",
		Title:       "Cancel an eval run",
		Description: "Request cancellation: running episodes are stopped and the job ends cancelled. Idempotent; a finished job reports its final state.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, p authz.Principal, in CancelIn) (*JobView, error) {
		return f.cancel(ctx, p, in, workflows.KindEval)
	})
}

func (f *Frontend) resumeEvalTool() toolDef {
	return newTool(f, &mcp.Tool{
		Name:  "resume_eval",
		Title: "Answer an eval run's input request",
		Description: "Approve or reject the open input request of an eval job (status awaiting_input). " +
			"input_id and scope_digest must be the ones in needs_input. Needs the owner (jobs:write) or jobs:approve, as needs_input.approver says.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, p authz.Principal, in ResumeIn) (*JobView, error) {
		return f.resume(ctx, p, in, workflows.KindEval)
	}).enum("decision", workflows.DecisionApprove, workflows.DecisionReject)
}

// evalArgs validates and normalizes start_eval's arguments against the suite catalog.
func (f *Frontend) evalArgs(in StartEvalIn) (workflows.EvalArgs, activities.Suite, error) {
	var zero workflows.EvalArgs
	if !idemKeyRE.MatchString(in.IdempotencyKey) {
		return zero, activities.Suite{}, invalidArg("idempotency_key", "must be 1-128 chars of [A-Za-z0-9._:@=+-], starting with a letter or digit")
	}
	if in.Suite == "" {
		return zero, activities.Suite{}, invalidArg("suite", "is required (available: %s)", strings.Join(f.opts.Suites.Names(), ", "))
	}
	s, ok := f.opts.Suites[in.Suite]
	if !ok {
		return zero, activities.Suite{}, invalidArg("suite", "unknown suite %q (available: %s)", truncate(in.Suite, 64), strings.Join(f.opts.Suites.Names(), ", "))
	}
	if in.Episodes < 1 || in.Episodes > s.MaxEpisodes {
		return zero, s, invalidArg("episodes", "must be between 1 and %d", s.MaxEpisodes)
	}
	conc := in.Concurrency
	if conc == 0 {
		conc = min(in.Episodes, concurrencyDefaultCap)
	}
	if conc < 1 || conc > s.MaxConcurrency {
		return zero, s, invalidArg("concurrency", "must be between 1 and %d", s.MaxConcurrency)
	}
	params, err := s.NormalizeParams(in.Params)
	if err != nil {
		var pe *activities.ParamError
		if errors.As(err, &pe) {
			return zero, s, invalidArg(pe.Field, "%s", pe.Reason)
		}
		return zero, s, invalidArg("params", "%v", err)
	}
	return workflows.EvalArgs{Suite: s.Name, Episodes: in.Episodes, Concurrency: conc, Params: params}, s, nil
}

func (f *Frontend) startEval(ctx context.Context, p authz.Principal, in StartEvalIn) (*JobView, error) {
	if authz.Decide(p, authz.ActionStart, authz.Job{}) != authz.Allow {
		return nil, toolErr(CodeForbidden, "starting jobs needs jobs:write")
	}
	args, suite, err := f.evalArgs(in)
	if err != nil {
		return nil, err
	}
	id := jobID(p.Tenant, workflows.KindEval, in.IdempotencyKey)
	noteJob(ctx, id)
	hash := workflows.Digest(args)
	now := f.opts.Now().UTC()
	wfIn := workflows.EvalInput{
		Tenant: p.Tenant, Owner: p.Subject, Args: args,
		Approval: workflows.ApprovalPolicy{Threshold: suite.ApprovalThreshold, Approver: suite.Approver, Timeout: suite.ApprovalTimeout.D()},
		Episode:  workflows.EpisodePolicy{Timeout: suite.EpisodeTimeout.D(), HeartbeatTimeout: suite.HeartbeatTimeout.D(), MaxAttempts: suite.MaxAttempts},
	}
	tctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
	defer cancel()
	run, err := f.opts.Temporal.ExecuteWorkflow(tctx, client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                f.opts.TaskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.SAJobTenant.ValueSet(p.Tenant), workflows.SAJobOwner.ValueSet(p.Subject),
			workflows.SAJobKind.ValueSet(workflows.KindEval), workflows.SAJobStatus.ValueSet(string(workflows.StatusQueued))),
		Memo: map[string]any{
			workflows.MemoInputHash: hash,
			workflows.MemoCreatedAt: now,
			workflows.MemoProgress:  workflows.Progress{Total: args.Episodes, Message: "queued", AsOf: now},
		},
		StaticSummary: fmt.Sprintf("eval %s · %d episodes · owner %s", args.Suite, args.Episodes, p.Subject),
		StaticDetails: fmt.Sprintf("**eval** of suite `%s`\n\n- owner: `%s` (tenant `%s`)\n- episodes: %d, concurrency: %d\n- idempotency key: `%s`\n- args digest: `%s`",
			args.Suite, p.Subject, p.Tenant, args.Episodes, args.Concurrency, in.IdempotencyKey, hash),
	}, workflows.EvalWorkflowName, wfIn)
	if err == nil {
		j := &job{id: id, runID: run.GetRunID(), tenant: p.Tenant, owner: p.Subject, kind: workflows.KindEval,
			exec: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, saStatus: workflows.StatusQueued, inputHash: hash, createdAt: now,
			progress: workflows.Progress{Total: args.Episodes, Message: "queued", AsOf: now}}
		v, err := f.view(ctx, j)
		if v != nil {
			v.Created = ptr(true)
		}
		return v, err
	}
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if !errors.As(err, &started) {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	// The key is taken: the same request gets the same job; anything else is a reuse.
	j, err := f.describe(ctx, id)
	if err != nil {
		var te *ToolError
		if errors.As(err, &te) && te.Code == CodeNotFound {
			return nil, toolErr(CodeUnavailable, "the job for this key is being replaced; retry")
		}
		return nil, err
	}
	if j.tenant != p.Tenant || j.kind != workflows.KindEval || j.owner != p.Subject || j.inputHash != hash {
		return nil, toolErr(CodeIdempotencyKeyReused, "idempotency_key %q already names another job in your tenant (other arguments or another owner); use a new key for a new job", in.IdempotencyKey)
	}
	v, err := f.view(ctx, j)
	if v != nil {
		v.Created = ptr(false)
	}
	return v, err
}

func (f *Frontend) cancel(ctx context.Context, p authz.Principal, in CancelIn, kind string) (*JobView, error) {
	if utf8.RuneCountInString(in.Reason) > reasonMax {
		return nil, invalidArg("reason", "at most %d characters", reasonMax)
	}
	j, err := f.resolve(ctx, p, in.Handle, kind, authz.ActionCancel)
	if err != nil {
		return nil, err
	}
	if j.status().Terminal() {
		return f.view(ctx, j)
	}
	tctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
	defer cancel()
	reason := "cancelled by " + p.Subject
	if in.Reason != "" {
		reason += ": " + in.Reason
	}
	_, err = f.opts.Temporal.WorkflowService().RequestCancelWorkflowExecution(tctx, &workflowservice.RequestCancelWorkflowExecutionRequest{
		Namespace:         f.opts.Namespace,
		WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: j.id},
		Identity:          "jobgate:" + p.Tenant + "/" + p.Subject,
		RequestId:         uuid.NewString(),
		Reason:            reason,
	})
	if err != nil {
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) {
			return nil, fmt.Errorf("cancel %s: %w", j.id, err)
		}
		// Closed meanwhile: report the final state.
	}
	j2, err := f.describe(ctx, j.id)
	if err != nil {
		return nil, err
	}
	return f.view(ctx, j2)
}

func (f *Frontend) resume(ctx context.Context, p authz.Principal, in ResumeIn, kind string) (*JobView, error) {
	switch {
	case in.InputID == "":
		return nil, invalidArg("input_id", "is required (needs_input.input_id)")
	case in.ScopeDigest == "":
		return nil, invalidArg("scope_digest", "is required (needs_input.scope_digest)")
	case in.Decision != workflows.DecisionApprove && in.Decision != workflows.DecisionReject:
		return nil, invalidArg("decision", "must be approve or reject")
	case utf8.RuneCountInString(in.Comment) > commentMax:
		return nil, invalidArg("comment", "at most %d characters", commentMax)
	case len(in.InputID) > 128:
		return nil, invalidArg("input_id", "at most 128 characters")
	case len(in.ScopeDigest) > 128:
		return nil, invalidArg("scope_digest", "at most 128 characters")
	}
	j, err := f.resolve(ctx, p, in.Handle, kind, authz.ActionResume)
	if err != nil {
		return nil, err
	}
	if j.needsInput == nil || j.status() != workflows.StatusAwaitingInput {
		return nil, toolErr(CodeInputNotExpected, "the job is not waiting for input (status %s)", j.status())
	}
	// Same principal + same answer → same update ID, so a retried resume (lost response) is
	// deduplicated by Temporal instead of being rejected as input_not_expected.
	sum := sha256.Sum256([]byte(strings.Join([]string{p.Tenant, p.Subject, in.InputID, in.ScopeDigest, in.Decision}, "\x00")))
	tctx, cancel := context.WithTimeout(ctx, ResumeTimeoutDefault)
	defer cancel()
	h, err := f.opts.Temporal.UpdateWorkflow(tctx, client.UpdateWorkflowOptions{
		WorkflowID:   j.id,
		UpdateID:     "resume-" + hex.EncodeToString(sum[:12]),
		UpdateName:   workflows.UpdateResume,
		WaitForStage: client.WorkflowUpdateStageCompleted,
		Args: []any{workflows.ResumeRequest{Principal: p, InputID: in.InputID, ScopeDigest: in.ScopeDigest,
			Decision: in.Decision, Comment: in.Comment}},
	})
	if err == nil {
		err = h.Get(tctx, nil)
	}
	if err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			switch appErr.Type() {
			case workflows.RejectNotFound:
				return nil, errNotFound()
			case workflows.RejectForbidden:
				return nil, toolErr(CodeForbidden, "%s", appErr.Message())
			case workflows.RejectInvalidArgument:
				return nil, invalidArg("decision", "%s", appErr.Message())
			default:
				return nil, toolErr(CodeInputNotExpected, "%s", appErr.Message())
			}
		}
		if errors.Is(err, context.DeadlineExceeded) || isUnavailable(err) {
			return nil, toolErr(CodeUnavailable, "no worker processed the answer in time; it may still be applied when one does — retry the same call (retries are deduplicated)")
		}
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil, toolErr(CodeInputNotExpected, "the job is no longer waiting for input")
		}
		return nil, fmt.Errorf("resume %s: %w", j.id, err)
	}
	j2, err := f.describe(ctx, j.id)
	if err != nil {
		return nil, err
	}
	return f.view(ctx, j2)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
