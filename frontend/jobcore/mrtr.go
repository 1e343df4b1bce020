package jobcore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// MRTR (multi-round-trip requests, protocol 2026-07-28): an open input request the caller may
// answer comes back from get_* (and from start_* when the job at once waits for its owner) as
// resultType "input_required" with one form elicitation and a sealed requestState; the retry
// carrying inputResponses and that state is the same resume as resume_*, under the same rules.

const (
	// InputKeyApproval names the one elicitation in inputRequests / inputResponses.
	InputKeyApproval = "approval"
	// StateTTLDefault bounds how long an elicitation's requestState can be answered.
	StateTTLDefault = 10 * time.Minute

	ProtocolMRTR = "2026-07-28"
)

// inputRequired is returned by a tool's run function to answer with an MRTR input request
// instead of its output (newTool sends res as it is).
type InputRequired struct{ Res *mcp.CallToolResult }

func (*InputRequired) Error() string { return "input required" }

// callRequest is the tool call being served (newTool puts it in the context).
func callRequest(ctx context.Context) *mcp.CallToolRequest {
	if rec, ok := ctx.Value(CallRecordKey{}).(*CallRecord); ok {
		return rec.Req
	}
	return nil
}

// wantsElicitation: the request follows the 2026-07-28 protocol and declares form elicitation in
// its own per-request client capabilities. Older clients cannot be sent an elicitation by a
// stateless server and keep resume_*.
func WantsElicitation(req *mcp.CallToolRequest) bool {
	if req == nil || req.Params == nil {
		return false
	}
	if s := req.Session; s != nil {
		if ip := s.InitializeParams(); ip != nil && ip.ProtocolVersion < ProtocolMRTR {
			return false
		}
	}
	raw, ok := req.Params.Meta[mcp.MetaKeyClientCapabilities]
	if !ok {
		return false
	}
	if m, ok := raw.(map[string]any); ok && !hasFoldedKey(m, "elicitation") {
		// What the decode below would conclude without the round trip: encoding/json matches
		// the field name case-insensitively, and no key matches it (most calls: clients that
		// take no elicitations).
		return false
	}
	return DeclaresElicitation(raw)
}

// declaresElicitation decodes client capabilities (as the SDK left them in _meta) and reports
// form elicitation.
func DeclaresElicitation(raw any) bool {
	b, err := json.Marshal(raw)
	if err != nil {
		return false
	}
	var caps struct {
		Elicitation *struct {
			Form *json.RawMessage `json:"form"`
			URL  *json.RawMessage `json:"url"`
		} `json:"elicitation"`
	}
	if json.Unmarshal(b, &caps) != nil || caps.Elicitation == nil {
		return false
	}
	// An empty elicitation object means form mode (the spec's default).
	return caps.Elicitation.Form != nil || caps.Elicitation.URL == nil
}

// hasFoldedKey: m has a key equal to name under encoding/json's case-insensitive field
// matching (Unicode case folding, as strings.EqualFold).
func hasFoldedKey(m map[string]any, name string) bool {
	for k := range m {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// carriesAnswer: the call is an MRTR retry.
func carriesAnswer(req *mcp.CallToolRequest) bool {
	return req != nil && req.Params != nil && (req.Params.RequestState != "" || len(req.Params.InputResponses) > 0)
}

// argsDigest fingerprints a call's arguments (canonical JSON), binding a requestState to them.
func argsDigest(raw json.RawMessage) string {
	var v any
	if len(raw) > 0 && json.Unmarshal(raw, &v) == nil {
		raw, _ = json.Marshal(v) // sorted keys, no insignificant space
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:16])
}

// approvalElicitation renders an open input request as one form-mode elicitation: the prompt,
// what is being approved, and the answer schema (decision + optional comment).
func approvalElicitation(ni *workflows.NeedsInput) *mcp.ElicitParams {
	var b strings.Builder
	b.WriteString(ni.Prompt)
	if len(ni.Scope) > 0 {
		keys := make([]string, 0, len(ni.Scope))
		for k := range ni.Scope {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("\n\nWhat is being approved:")
		for _, k := range keys {
			v := ni.Scope[k]
			if l, ok := v.([]any); ok {
				parts := make([]string, len(l))
				for i, x := range l {
					parts[i] = fmt.Sprint(x)
				}
				v = strings.Join(parts, ", ")
			}
			fmt.Fprintf(&b, "\n- %s: %v", k, v)
		}
	}
	if ni.RequestedBy != "" {
		fmt.Fprintf(&b, "\n\nRequested by %s; expires %s.", ni.RequestedBy, ni.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return &mcp.ElicitParams{
		Mode:    "form",
		Message: b.String(),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"decision": map[string]any{"type": "string", "title": "Decision", "enum": []string{workflows.DecisionApprove, workflows.DecisionReject},
					"description": "approve lets the job go on; reject cancels it"},
				"comment": map[string]any{"type": "string", "title": "Comment", "maxLength": CommentMax,
					"description": "optional note recorded with the decision"},
			},
			"required": []string{"decision"},
		},
	}
}

// elicitAnswer reads the approval elicitation's response: answered is false when the person
// declined or dismissed it (the job then keeps waiting).
func elicitAnswer(resp mcp.InputResponse) (decision, comment string, answered bool, err error) {
	r, ok := resp.(*mcp.ElicitResult)
	if !ok || r == nil {
		return "", "", false, invalidArg("inputResponses", "%s must be an elicitation result", InputKeyApproval)
	}
	switch r.Action {
	case "decline", "cancel":
		return "", "", false, nil
	case "accept":
	default:
		return "", "", false, invalidArg("inputResponses", "%s.action must be accept, decline or cancel", InputKeyApproval)
	}
	decision, _ = r.Content["decision"].(string)
	if decision != workflows.DecisionApprove && decision != workflows.DecisionReject {
		return "", "", false, invalidArg("inputResponses", "%s.content.decision must be approve or reject", InputKeyApproval)
	}
	if c, ok := r.Content["comment"]; ok {
		if comment, ok = c.(string); !ok {
			return "", "", false, invalidArg("inputResponses", "%s.content.comment must be a string", InputKeyApproval)
		}
		if utf8.RuneCountInString(comment) > CommentMax {
			return "", "", false, invalidArg("inputResponses", "%s.content.comment: at most %d characters", InputKeyApproval, CommentMax)
		}
	}
	return decision, comment, true, nil
}

// How a kind's open input request reads on the Tasks surface: the
// inputRequests of tasks/get and the answer tasks/update's inputResponses make of it.

// taskInput is how a kind's open input request (workflows.NeedsInput) reads on the Tasks
// surface. requests are the elicitations tasks/get shows, by key: every key outstanding until
// an answer changes the request. answer reads tasks/update's responses to outstanding keys
// (decoded as elicitation results) into one resume of the open request, the same resume
// resume_* makes; answered is false when nothing in them answers (declined, dismissed), and
// the job keeps waiting. An error is a tool error of the job core (invalid_argument).
type taskInput interface {
	Requests(ni *workflows.NeedsInput) mcp.InputRequestMap
	Answer(ni *workflows.NeedsInput, resps map[string]*mcp.ElicitResult) (in ResumeIn, answered bool, err error)
}

// approvalInput is every job kind's request as an approval: one form elicitation (decision,
// comment) under a key bound to the request's input_id and scope_digest (taskInputKey).
type approvalInput struct{}

func (approvalInput) Requests(ni *workflows.NeedsInput) mcp.InputRequestMap {
	return mcp.InputRequestMap{TaskInputKey(ni): approvalElicitation(ni)}
}

func (approvalInput) Answer(ni *workflows.NeedsInput, resps map[string]*mcp.ElicitResult) (ResumeIn, bool, error) {
	resp, ok := resps[TaskInputKey(ni)]
	if !ok {
		return ResumeIn{}, false, nil
	}
	decision, comment, accepted, err := elicitAnswer(resp)
	if err != nil || !accepted { // elicitAnswer bounds the comment as resume_* does
		return ResumeIn{}, false, err
	}
	return ResumeIn{InputID: ni.InputID, ScopeDigest: ni.ScopeDigest, Decision: decision, Comment: comment}, true, nil
}

// taskInputOf is kind's taskInput (approvalInput unless the kind has its own).
func (f *Core) TaskInputOf(kind string) taskInput {
	for _, k := range f.Kinds {
		if k.Name == kind && k.taskInput != nil {
			return k.taskInput
		}
	}
	return approvalInput{}
}

// taskInputKey names an open input request in inputRequests/inputResponses. It is unique over
// the task's lifetime (a re-asked request with another scope gets another key) and binds an
// answer to exactly the input_id and scope_digest that were shown.
func TaskInputKey(ni *workflows.NeedsInput) string {
	sum := sha256.Sum256([]byte(ni.ScopeDigest))
	return InputKeyApproval + "." + ni.InputID + "." + hex.EncodeToString(sum[:8])
}

// askFor returns the MRTR input request for job j to caller p, or nil when the caller may not
// answer, the client cannot take one, or the job waits for nothing.
func (f *Core) askFor(ctx context.Context, p authz.Principal, j *jobstore.Job) error {
	req := callRequest(ctx)
	if !WantsElicitation(req) || j.NeedsInput == nil || j.Status() != workflows.StatusAwaitingInput ||
		authz.Decide(p, authz.ActionResume, j.PolicyJob()) != authz.Allow {
		return nil
	}
	if callDeclaresApps(ctx) || f.checkSurface(j, workflows.SurfaceMRTR) != nil {
		// A host that renders apps gets the approval card instead; a request that must be
		// answered on a human surface is not put to a bearer client at all.
		return nil
	}
	ni := j.NeedsInput
	r, exp := f.sealableRequest(p, j, StateTTLDefault)
	state := f.Opts.Keys.SealState(handle.State{Request: r, Tool: req.Params.Name, ArgsDigest: argsDigest(req.Params.Arguments),
		Expiry: exp})
	if state == "" {
		return nil // cannot be sealed (e.g. an already expired request): the plain view says it all
	}
	return &InputRequired{Res: &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{InputKeyApproval: approvalElicitation(ni)},
		RequestState:  state,
	}}
}

// sealableRequest is job j's open request as put to p, and the expiry of a seal that binds it
// (an MRTR request state, an app nonce): ttl from now, never past the request's own expiry,
// in whole seconds.
func (f *Core) sealableRequest(p authz.Principal, j *jobstore.Job, ttl time.Duration) (handle.Request, time.Time) {
	ni := j.NeedsInput
	exp := f.Opts.Now().Add(ttl)
	if ni.ExpiresAt.Before(exp) {
		exp = ni.ExpiresAt
	}
	return handle.Request{Tenant: p.Tenant, Subject: p.Subject, WorkflowID: j.ID, InputID: ni.InputID,
		ScopeDigest: ni.ScopeDigest}, exp.Truncate(time.Second)
}

// answerFrom applies an MRTR retry's answer to job j (already resolved for p) as the same
// resume resume_* makes, and returns the job afterwards and a note for the caller. Tampered
// state, state of another call, principal or job, or a stale request: the contract's errors,
// and nothing reaches the job.
func (f *Core) answerFrom(ctx context.Context, p authz.Principal, j *jobstore.Job) (*jobstore.Job, string, error) {
	req := callRequest(ctx)
	st, err := f.Opts.Keys.OpenState(req.Params.RequestState, f.Opts.Now())
	switch {
	case err != nil && !errors.Is(err, handle.ErrExpired):
		return nil, "", invalidArg("requestState", "malformed or not issued by this service; call again without inputResponses to be asked anew")
	case !st.PutTo(p.Tenant, p.Subject, j.ID):
		return nil, "", ErrNotFound()
	case err != nil:
		return nil, "", ToolErr(CodeInputNotExpected, "the elicitation expired; call again without inputResponses to be asked anew")
	case st.Tool != req.Params.Name || st.ArgsDigest != argsDigest(req.Params.Arguments):
		return nil, "", invalidArg("requestState", "belongs to another call; retry the exact call that asked, with its arguments")
	}
	resp, ok := req.Params.InputResponses[InputKeyApproval]
	if !ok {
		return nil, "", invalidArg("inputResponses", "must answer %q", InputKeyApproval)
	}
	decision, comment, answered, err := elicitAnswer(resp)
	if err != nil {
		return nil, "", err
	}
	if !answered {
		return j, "the elicitation was declined or dismissed: nothing changed, the job keeps waiting for input", nil
	}
	j2, err := f.ResumeJob(ctx, p, j, ResumeIn{InputID: st.InputID, ScopeDigest: st.ScopeDigest, Decision: decision, Comment: comment},
		TokenAnswerer(ctx, workflows.SurfaceMRTR), ShownPrompt(j, st.InputID))
	if err != nil {
		return nil, "", err
	}
	return j2, "your answer (" + decision + ") was recorded", nil
}

// inputRound runs the MRTR part of a get_* or start_* call on job j: an answer the call carries
// is applied; otherwise the caller may be asked. It returns the job to render and a note.
func (f *Core) inputRound(ctx context.Context, p authz.Principal, j *jobstore.Job) (*jobstore.Job, string, error) {
	if carriesAnswer(callRequest(ctx)) {
		return f.answerFrom(ctx, p, j)
	}
	return j, "", f.askFor(ctx, p, j)
}

// startJob starts st in the store within TemporalTimeout; a start that awaits the job's first
// state waits at most ownerInputWait for it (the job is started all the same).
func (f *Core) startJob(ctx context.Context, st jobstore.StartRequest) (string, error) {
	d := f.Opts.TemporalTimeout
	if st.AwaitFirst {
		d = min(d, ownerInputWait)
	}
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f.Store.Start(tctx, st)
}

// awaitFirstState returns job j, found by a retried start, once it is past queued: the same
// first-state update the start sent (deduplicated by its ID), waited for at most ownerInputWait.
// When it does not come (no worker, a run that predates the update) or reading fails, it
// returns j as it was read.
func (f *Core) awaitFirstState(ctx context.Context, j *jobstore.Job) *jobstore.Job {
	if j.Status() != workflows.StatusQueued {
		return j
	}
	tctx, cancel := context.WithTimeout(ctx, ownerInputWait)
	defer cancel()
	if err := f.Store.FirstState(tctx, j.ID, j.RunID); err != nil {
		return j
	}
	if j2, err := f.Describe(ctx, j.ID); err == nil {
		return j2
	}
	return j
}
