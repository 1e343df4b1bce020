package jobcore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// The conformance fixtures (workflows/fixture.go): the tools the official MCP conformance
// suite's Tasks scenarios call, each a real job of the fixture kind through the same job core
// as eval and export (start, handle, get_fixture, cancel_fixture, resume_fixture, tasks/*).
// Only `jobgate dev --conformance-fixtures` serves this kind; DefaultKinds never lists it.
//
// What each tool does, as the suite requires:
//   - greet: never a task; runs its job and answers "Hello, <name>!" when it has ended.
//   - slow_compute: a task for a client that declares the Tasks extension, else it waits for
//     its job and answers the result; the job waits `seconds` and is cancelled promptly.
//   - failing_job: a task only (-32021 otherwise); the job fails after a second, a tool error.
//   - protocol_error_job: a task only; the job fails after a second on a fault (task failed).
//   - confirm_delete, multi_input: tasks only; the job asks one question, or two at once
//     (answerable one at a time through tasks/update), then completes.
//   - test_tool_with_task: a task only; first an MRTR round asks for user_name (no job yet),
//     then the retry carrying the answer starts the job, whose result greets that name.
//
// A fixture call carries no idempotency key: each call is a new job (key "fx-<uuid>").

// FixtureKind is the conformance fixtures' kind.
func FixtureKind() KindSpec { return fixtureKind{} }

type fixtureKind struct{}

func (fixtureKind) Name() string { return workflows.KindFixture }

// FixtureResultView is a succeeded fixture job's result.
type FixtureResultView struct {
	Text string `json:"text" jsonschema:"the fixture's answer, e.g. Hello, World!"`
}

// ToolText: a fixture answers with its words, as the conformance suite reads them.
func (r FixtureResultView) ToolText() (string, bool) { return r.Text, true }

// GreetIn are greet's arguments.
type GreetIn struct {
	Name string `json:"name" jsonschema:"who to greet (1-200 characters)"`
}

// SlowComputeIn are slow_compute's arguments.
type SlowComputeIn struct {
	Seconds int    `json:"seconds" jsonschema:"how long the job waits before it answers (0-600)"`
	Label   string `json:"label,omitempty" jsonschema:"a label repeated in the answer (at most 200 characters)"`
}

// ConfirmDeleteIn are confirm_delete's arguments.
type ConfirmDeleteIn struct {
	Filename string `json:"filename" jsonschema:"the file the job asks to confirm deleting (1-200 characters; nothing is deleted)"`
}

// FixtureNoArgs are the arguments of the fixtures that take none.
type FixtureNoArgs struct{}

// fixtureInputKey is test_tool_with_task's MRTR question.
const FixtureInputKey = "user_name"

// fixtureInputTimeout bounds a fixture job's wait for an answer.
const fixtureInputTimeout = 10 * time.Minute

type fixtureView = KindView[FixtureResultView]

func (k fixtureKind) Serve(f *Core) ServedKind {
	jk := JobKind[FixtureResultView]{Name: workflows.KindFixture, Noun: "MCP conformance fixture job",
		Result: func(ctx context.Context, _ *Core, _ authz.Principal, _ *jobstore.Job, decode func(ptr any) error) (*FixtureResultView, error) {
			var r workflows.FixtureResult
			if err := decode(&r); err != nil {
				return nil, err
			}
			return &FixtureResultView{Text: r.Text}, nil
		}}
	sk := jk.served(f, fixtureTool(f, jk, workflows.FixtureSlowCompute, "Waits `seconds`, then answers what it computed.", TaskOptional,
		func(ctx context.Context, p authz.Principal, in SlowComputeIn) (*fixtureView, error) {
			if in.Seconds < 0 || in.Seconds > workflows.FixtureSecondsMax {
				return nil, invalidArg("seconds", "must be between 0 and %d", workflows.FixtureSecondsMax)
			}
			if utf8.RuneCountInString(in.Label) > 200 {
				return nil, invalidArg("label", "at most 200 characters")
			}
			v, err := k.start(ctx, f, jk, p, workflows.FixtureInput{Tool: workflows.FixtureSlowCompute, Seconds: in.Seconds, Label: in.Label})
			if err != nil || f.createsTask(ctx, callRequest(ctx)) {
				return v, err
			}
			// No task for this client: the call answers once the job has ended.
			return k.awaitEnd(ctx, f, jk, p, v, time.Duration(in.Seconds)*time.Second+f.Opts.TemporalTimeout)
		}).bounds("seconds", 0, workflows.FixtureSecondsMax))
	sk.Writes = []ToolDef{
		fixtureTool(f, jk, workflows.FixtureGreet, "Greets `name`: Hello, <name>! Never a task.", TaskForbidden,
			func(ctx context.Context, p authz.Principal, in GreetIn) (*fixtureView, error) {
				if in.Name == "" || utf8.RuneCountInString(in.Name) > 200 {
					return nil, invalidArg("name", "is required, at most 200 characters")
				}
				v, err := k.start(ctx, f, jk, p, workflows.FixtureInput{Tool: workflows.FixtureGreet, Name: in.Name})
				if err != nil {
					return nil, err
				}
				return k.awaitEnd(ctx, f, jk, p, v, f.Opts.TemporalTimeout)
			}),
		fixtureTool(f, jk, workflows.FixtureFailingJob, "Fails after a second with a tool execution error. Needs the Tasks extension.", TaskRequired,
			func(ctx context.Context, p authz.Principal, _ FixtureNoArgs) (*fixtureView, error) {
				return k.start(ctx, f, jk, p, workflows.FixtureInput{Tool: workflows.FixtureFailingJob})
			}),
		fixtureTool(f, jk, workflows.FixtureProtocolError, "Fails after a second on an internal error: the task ends failed. Needs the Tasks extension.", TaskRequired,
			func(ctx context.Context, p authz.Principal, _ FixtureNoArgs) (*fixtureView, error) {
				return k.start(ctx, f, jk, p, workflows.FixtureInput{Tool: workflows.FixtureProtocolError})
			}),
		fixtureTool(f, jk, workflows.FixtureConfirmDelete, "Asks to confirm deleting `filename` (tasks/get input_required), then completes. Deletes nothing. Needs the Tasks extension.", TaskRequired,
			func(ctx context.Context, p authz.Principal, in ConfirmDeleteIn) (*fixtureView, error) {
				if in.Filename == "" || utf8.RuneCountInString(in.Filename) > 200 {
					return nil, invalidArg("filename", "is required, at most 200 characters")
				}
				return k.start(ctx, f, jk, p, workflows.FixtureInput{Tool: workflows.FixtureConfirmDelete, Filename: in.Filename})
			}),
		fixtureTool(f, jk, workflows.FixtureMultiInput, "Asks two questions at once, answerable one at a time, then completes. Needs the Tasks extension.", TaskRequired,
			func(ctx context.Context, p authz.Principal, _ FixtureNoArgs) (*fixtureView, error) {
				return k.start(ctx, f, jk, p, workflows.FixtureInput{Tool: workflows.FixtureMultiInput})
			}),
		fixtureTool(f, jk, workflows.FixtureToolWithTask, "Asks user_name by MRTR, then starts a task greeting that name. Needs the Tasks extension.", TaskRequired,
			func(ctx context.Context, p authz.Principal, _ FixtureNoArgs) (*fixtureView, error) {
				name, err := UserName(callRequest(ctx))
				if err != nil || name == "" {
					return nil, err
				}
				return k.start(ctx, f, jk, p, workflows.FixtureInput{Tool: workflows.FixtureToolWithTask, Name: name})
			}),
	}
	sk.taskInput = FixtureInput{}
	return sk
}

// fixtureTool is one fixture tool: a start tool (jobs:write) of the fixture kind, with its
// support of the Tasks extension.
func fixtureTool[In any](f *Core, jk JobKind[FixtureResultView], name, desc string, task TaskSupport,
	run func(ctx context.Context, p authz.Principal, in In) (*fixtureView, error)) ToolDef {
	td := newKindTool(f, jk.Name, authz.ActionStart, &mcp.Tool{Name: name, Title: "Conformance fixture " + name,
		Description: desc + " A conformance fixture of `jobgate dev --conformance-fixtures`: every call is a new job.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, p authz.Principal, in In) (*fixtureView, error) {
		if authz.Decide(p, authz.ActionStart, authz.Job{}) != authz.Allow {
			return nil, ToolErr(CodeForbidden, "starting jobs needs jobs:write")
		}
		return run(ctx, p, in)
	})
	td.Task = task
	return td
}

// start starts a fixture job for in under a fresh key. The call's MRTR answer (test_tool_with_task's
// user_name) was the tool's own, not an answer to the job's input request: the job core does
// not see it.
func (fixtureKind) start(ctx context.Context, f *Core, jk JobKind[FixtureResultView], p authz.Principal, in workflows.FixtureInput) (*fixtureView, error) {
	in.Tenant, in.Owner, in.InputTimeout = p.Tenant, p.Subject, workflows.Duration(fixtureInputTimeout)
	key := "fx-" + uuid.NewString()
	sctx := ctx
	if req := callRequest(ctx); carriesAnswer(req) {
		params := *req.Params
		params.InputResponses, params.RequestState = nil, ""
		stripped := *req
		stripped.Params = &params
		sctx = context.WithValue(ctx, CallRecordKey{}, &CallRecord{Req: &stripped})
	}
	v, err := jk.Start(sctx, f, p, StartSpec{Key: key, Hash: workflows.Digest(in), Input: in, Total: 1,
		Summary: "conformance fixture " + in.Tool + " · owner " + p.Subject,
		Details: fmt.Sprintf("**conformance fixture** `%s`\n\n- owner: `%s` (tenant `%s`)\n- key: `%s`", in.Tool, p.Subject, p.Tenant, key)})
	if v != nil {
		noteJob(ctx, v.JobID)
	}
	return v, err
}

// awaitEnd waits, at most d, for the job of view v to end, and renders it as it is then.
func (fixtureKind) awaitEnd(ctx context.Context, f *Core, jk JobKind[FixtureResultView], p authz.Principal, v *fixtureView, d time.Duration) (*fixtureView, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	// A failed or cancelled run is an error here; the job's state below says what happened.
	_ = f.Store.Result(wctx, v.JobID, "", nil)
	cancel()
	j, err := f.Describe(ctx, v.JobID)
	if err != nil {
		return nil, err
	}
	v2, err := jk.view(ctx, f, p, j)
	if v2 != nil {
		v2.Created = v.Created
	}
	return v2, err
}

// userName is test_tool_with_task's MRTR round: the name in the retry's answer, or the question
// (an input_required result, before any job exists) when the call carries no usable answer.
func UserName(req *mcp.CallToolRequest) (string, error) {
	if req != nil && req.Params != nil {
		if r, ok := req.Params.InputResponses[FixtureInputKey].(*mcp.ElicitResult); ok && r != nil && r.Action == "accept" {
			if name, ok := r.Content["name"].(string); ok && name != "" && utf8.RuneCountInString(name) <= 200 {
				return name, nil
			}
		}
	}
	return "", &InputRequired{Res: &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{FixtureInputKey: &mcp.ElicitParams{
		Mode:    "form",
		Message: "What is your name?",
		RequestedSchema: map[string]any{"type": "object", "required": []string{"name"},
			"properties": map[string]any{"name": map[string]any{"type": "string", "title": "Name", "maxLength": 200}}},
	}}}}
}

// fixtureInput is how a fixture job's questions read on the Tasks surface (workflows
// fixtureRun.askForm): one form elicitation per pending question, keyed by the question, so a
// question keeps its key while it is pending and an answer to some of them leaves the others
// outstanding. The answers become one resume of the open request: approve, with the answered
// contents as its comment ({"answers": {key: content}}), sealed and validated like any answer.
type FixtureInput struct{}

// questions are the open request's pending questions: key → its title and form properties.
func (FixtureInput) questions(ni *workflows.NeedsInput) map[string]map[string]any {
	props, _ := ni.AnswerSchema["properties"].(map[string]any)
	pending, _ := ni.Scope["pending"].([]any)
	out := map[string]map[string]any{}
	for _, k := range pending {
		key, _ := k.(string)
		if q, ok := props[key].(map[string]any); ok && key != "" {
			out[key] = q
		}
	}
	return out
}

func (in FixtureInput) Requests(ni *workflows.NeedsInput) mcp.InputRequestMap {
	qs := in.questions(ni)
	if len(qs) == 0 {
		return approvalInput{}.Requests(ni) // not a fixture's form: a plain approval
	}
	out := mcp.InputRequestMap{}
	for key, q := range qs {
		title, _ := q["title"].(string)
		out[key] = &mcp.ElicitParams{Mode: "form", Message: title,
			RequestedSchema: map[string]any{"type": "object", "properties": q["properties"]}}
	}
	return out
}

func (in FixtureInput) Answer(ni *workflows.NeedsInput, resps map[string]*mcp.ElicitResult) (ResumeIn, bool, error) {
	qs := in.questions(ni)
	if len(qs) == 0 {
		return approvalInput{}.Answer(ni, resps)
	}
	answers := map[string]any{}
	for key, r := range resps {
		if _, ok := qs[key]; ok && r.Action == "accept" {
			answers[key] = r.Content
		}
	}
	if len(answers) == 0 {
		return ResumeIn{}, false, nil // declined or dismissed: nothing changes
	}
	b, err := json.Marshal(map[string]any{"answers": answers})
	if err != nil || len(b) > CommentMax {
		return ResumeIn{}, false, invalidArg("inputResponses", "the answers must be JSON of at most %d bytes", CommentMax)
	}
	return ResumeIn{InputID: ni.InputID, ScopeDigest: ni.ScopeDigest, Decision: workflows.DecisionApprove, Comment: string(b)}, true, nil
}
