package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// The conformance fixtures: the tools the official MCP conformance suite's Tasks scenarios call
// (greet, slow_compute, failing_job, protocol_error_job, confirm_delete, multi_input,
// test_tool_with_task), each a real job of this kind. The kind is served on request (Kind.OnRequest): only `jobgate
// dev --conformance-fixtures` registers it (worker and frontend), so no production worker or
// frontend ever serves it.

const (
	// KindFixture is the fixture kind's name.
	KindFixture = "fixture"
	// FixtureWorkflowName is part of history; never rename it.
	FixtureWorkflowName = "jobgate.ConformanceFixture"
	fixtureUnit         = "steps"

	// The fixture tools, as the conformance suite names them.
	FixtureGreet         = "greet"
	FixtureSlowCompute   = "slow_compute"
	FixtureFailingJob    = "failing_job"
	FixtureProtocolError = "protocol_error_job"
	FixtureConfirmDelete = "confirm_delete"
	FixtureMultiInput    = "multi_input"
	FixtureToolWithTask  = "test_tool_with_task"

	// ErrCodeFixtureFailed is failing_job's failure: a tool execution error.
	ErrCodeFixtureFailed = "fixture_failed"
	// FixtureSecondsMax bounds slow_compute's seconds.
	FixtureSecondsMax = 600
)

// FixtureKind declares the fixture kind: registered like any kind, but served on request only
// (OnRequest): a worker or frontend serves it only when told to.
func FixtureKind() Kind {
	return Kind{Name: KindFixture, OnRequest: true, WorkflowName: FixtureWorkflowName, Workflow: func(w *Workflows) any { return w.Fixture },
		// AutoUpgrade: a fixture job lives seconds; nothing pins it to a build.
		Versioning: workflow.VersioningBehaviorAutoUpgrade,
		Unit:       fixtureUnit, Activities: []string{contract.FixtureTextActivityName},
		Story: Story{Steps: map[string][2]string{"FixtureText": {"answer", "answers"}},
			Args: func(raw json.RawMessage) string {
				var in FixtureInput
				if json.Unmarshal(raw, &in) != nil {
					return ""
				}
				return "fixture " + in.Tool
			}}}
}

// FixtureInput starts a fixture job: the tool called and its arguments.
type FixtureInput struct {
	Tenant string `json:"tenant"`
	Owner  string `json:"owner"`
	Tool   string `json:"tool"`
	// Name is greet's name, or the one test_tool_with_task gathered before it started.
	Name     string `json:"name,omitempty"`
	Seconds  int    `json:"seconds,omitempty"` // slow_compute
	Label    string `json:"label,omitempty"`   // slow_compute
	Filename string `json:"filename,omitempty"`
	// InputTimeout bounds each wait for an answer (confirm_delete, multi_input).
	InputTimeout Duration `json:"input_timeout"`
}

// FixtureResult is a succeeded fixture job's answer.
type FixtureResult struct {
	Text string `json:"text" jsonschema:"the fixture's answer, e.g. Hello, World!"`
}

// fixtureQuestion is one question of a fixture's input request: its key in the answers, what it
// asks and the properties of the form that answers it.
type fixtureQuestion struct {
	key, message string
	props        map[string]any
}

// fixtureRun is one fixture job's run.
type fixtureRun struct {
	*jobRun
	in FixtureInput
}

// Fixture runs one fixture tool: it asks its questions (confirm_delete, multi_input), waits
// (slow_compute; failing_job and protocol_error_job for a second), then ends as the tool does.
func (w *Workflows) Fixture(ctx workflow.Context, in FixtureInput) (FixtureResult, error) {
	jr, err := newJobRun(ctx, w, in.Tenant, in.Owner)
	if err != nil {
		return FixtureResult{}, err
	}
	r := &fixtureRun{jobRun: jr, in: in}
	var answers map[string]any
	switch in.Tool {
	case FixtureConfirmDelete:
		answers, err = r.askForm(ctx, []fixtureQuestion{{key: "confirm", message: fmt.Sprintf("Delete %s?", in.Filename),
			props: map[string]any{"confirm": map[string]any{"type": "boolean", "title": "Delete the file"}}}})
	case FixtureMultiInput:
		qs := make([]fixtureQuestion, 0, 2)
		for _, k := range []string{"first", "second"} {
			qs = append(qs, fixtureQuestion{key: k, message: "The " + k + " of two questions asked at once: your name?",
				props: map[string]any{"name": map[string]any{"type": "string", "title": "Name"},
					"confirm": map[string]any{"type": "boolean", "title": "Confirm"}}})
		}
		answers, err = r.askForm(ctx, qs)
	}
	if err != nil {
		return FixtureResult{}, err
	}
	r.setStatus(ctx, StatusRunning)
	r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "running", 0)})
	wait := time.Duration(min(max(in.Seconds, 0), FixtureSecondsMax)) * time.Second
	if in.Tool == FixtureFailingJob || in.Tool == FixtureProtocolError {
		wait = time.Second
	}
	if wait > 0 {
		err = workflow.NewTimerWithOptions(ctx, wait, workflow.TimerOptions{Summary: in.Tool}).Get(ctx, nil)
	}
	if err == nil {
		switch in.Tool {
		case FixtureGreet:
			// greet's call waits for its job: one workflow task, no activity to dispatch.
			r.finish(ctx, StatusSucceeded, nil, r.progress(ctx, "finished", 1))
			return FixtureResult{Text: "Hello, " + in.Name + "!"}, nil
		case FixtureFailingJob:
			return r.fail(ctx, ErrCodeFixtureFailed, "failing_job always fails: a tool execution error")
		case FixtureProtocolError:
			return r.fail(ctx, ErrCodeInternal, "protocol_error_job always fails: an internal error while executing the request")
		}
		var out contract.FixtureTextOut
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
			RetryPolicy: retryPolicy(3), Summary: in.Tool})
		target := ""
		if in.Tool == FixtureConfirmDelete {
			target = in.Filename
		}
		err = workflow.ExecuteActivity(actx, contract.FixtureTextActivityName, contract.FixtureTextIn{Tool: in.Tool, Name: in.Name,
			Label: in.Label, Seconds: in.Seconds, Target: target, Answers: answers}).Get(ctx, &out)
		if err == nil {
			r.finish(ctx, StatusSucceeded, nil, r.progress(ctx, "finished", 1))
			return FixtureResult{Text: out.Text}, nil
		}
	}
	if ctx.Err() != nil || temporal.IsCanceledError(err) {
		r.finish(ctx, StatusCancelled, &JobError{Code: ErrCodeCancelled, Message: "cancelled on request"}, r.progress(ctx, "cancelled", 0))
		return FixtureResult{}, temporal.NewCanceledError("cancelled on request")
	}
	return r.fail(ctx, ErrCodeInternal, "the fixture's answer could not be composed")
}

func (r *fixtureRun) fail(ctx workflow.Context, code, msg string) (FixtureResult, error) {
	r.finish(ctx, StatusFailed, &JobError{Code: code, Message: msg}, r.progress(ctx, msg, 0))
	return FixtureResult{}, temporal.NewNonRetryableApplicationError(msg, code, nil)
}

func (r *fixtureRun) progress(ctx workflow.Context, msg string, done int) Progress {
	return Progress{Done: done, Total: 1, Unit: fixtureUnit, Message: msg, AsOf: workflow.Now(ctx)}
}

// askForm asks every question of qs at once, as one open input request of the owner whose
// Scope lists the pending question keys and whose AnswerSchema has one object property per
// question. An answer (the jobgate.resume update, sealed and validated like every answer) is
// an approve whose comment is {"answers": {key: content}}; it may answer some questions only,
// and the rest are asked again in a new request (a new input ID and digest) until none is
// left. An approve without answers (resume_fixture) answers every pending question with
// nothing; a reject cancels the job, as it does any job.
func (r *fixtureRun) askForm(ctx workflow.Context, qs []fixtureQuestion) (map[string]any, error) {
	info := workflow.GetInfo(ctx)
	sum := sha256.Sum256([]byte(info.WorkflowExecution.ID + "|" + FirstRunID(ctx)))
	answers := map[string]any{}
	pending := slices.Clone(qs)
	for round := 1; len(pending) > 0; round++ {
		keys := make([]string, len(pending))
		props := map[string]any{}
		var prompt strings.Builder
		for i, q := range pending {
			keys[i] = q.key
			props[q.key] = map[string]any{"type": "object", "title": q.message, "properties": q.props}
			if i > 0 {
				prompt.WriteString(" ")
			}
			prompt.WriteString(q.message)
		}
		r.answer = nil
		r.needs = &NeedsInput{
			InputID:      fmt.Sprintf("form-%d-%s", round, hex.EncodeToString(sum[:6])),
			Prompt:       prompt.String(),
			AnswerSchema: map[string]any{"type": "object", "properties": props},
			ScopeDigest:  Digest(map[string]any{"tool": r.in.Tool, "pending": keys}),
			Scope:        map[string]any{"pending": keys},
			Approver:     authz.ApproverOwner,
			RequestedBy:  r.owner,
			ExpiresAt:    workflow.Now(ctx).Add(r.in.InputTimeout.D()),
		}
		r.setStatus(ctx, StatusAwaitingInput)
		r.upsertMemo(ctx, map[string]any{MemoNeedsInput: r.needs, MemoProgress: r.progress(ctx, "waiting for input", 0)})
		answered, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: r.in.InputTimeout.D(),
			TimerOptions: workflow.TimerOptions{Summary: "waiting for input"}}, func() bool { return r.answer != nil })
		if err != nil {
			r.finish(ctx, StatusCancelled, &JobError{Code: ErrCodeCancelled, Message: "cancelled while waiting for input"}, r.progress(ctx, "cancelled", 0))
			return nil, err
		}
		if !answered {
			r.needs = nil
			msg := "the input request was not answered in time"
			r.finish(ctx, StatusFailed, &JobError{Code: ErrCodeInputExpired, Message: msg}, r.progress(ctx, msg, 0))
			return nil, temporal.NewNonRetryableApplicationError(msg, ErrCodeInputExpired, nil)
		}
		if r.answer.Decision == DecisionReject {
			msg := "rejected by " + r.answer.Principal.Subject
			r.finish(ctx, StatusCancelled, &JobError{Code: ErrCodeRejected, Message: msg}, r.progress(ctx, "rejected", 0))
			return nil, temporal.NewCanceledError(msg)
		}
		var form struct {
			Answers map[string]any `json:"answers"`
		}
		if json.Unmarshal([]byte(r.answer.Comment), &form) != nil || len(form.Answers) == 0 {
			form.Answers = map[string]any{}
			for _, k := range keys {
				form.Answers[k] = nil // a plain approve answers everything with nothing
			}
		}
		pending = slices.DeleteFunc(pending, func(q fixtureQuestion) bool {
			v, ok := form.Answers[q.key]
			if ok {
				answers[q.key] = v
			}
			return ok
		})
	}
	r.upsertMemo(ctx, map[string]any{MemoNeedsInput: nil})
	return answers, nil
}
