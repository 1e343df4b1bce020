package frontend

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// fixtureRequest is a fixture job's open request as get_* decodes it from the memo (JSON:
// the pending keys come back as []any).
func fixtureRequest(t *testing.T, pending ...string) *workflows.NeedsInput {
	t.Helper()
	props := map[string]any{}
	for _, k := range pending {
		props[k] = map[string]any{"type": "object", "title": "question " + k,
			"properties": map[string]any{"name": map[string]any{"type": "string"}}}
	}
	ni := &workflows.NeedsInput{InputID: "form-1-abc", ScopeDigest: "sha256:x", Prompt: "p",
		AnswerSchema: map[string]any{"type": "object", "properties": props}, Scope: map[string]any{"pending": pending}}
	b, err := json.Marshal(ni)
	if err != nil {
		t.Fatal(err)
	}
	var out workflows.NeedsInput
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestFixtureInput: each pending question is its own elicitation under its own key; an answer
// to some of them is one approve carrying exactly those contents; declined answers and other
// keys change nothing; a request that is not a fixture's form reads as the approval.
func TestFixtureInput(t *testing.T) {
	var in jobcore.FixtureInput
	ni := fixtureRequest(t, "first", "second")
	reqs := in.Requests(ni)
	keys := make([]string, 0, len(reqs))
	for k, r := range reqs {
		keys = append(keys, k)
		if e, ok := r.(*mcp.ElicitParams); !ok || e.Message != "question "+k || e.Mode != "form" {
			t.Errorf("request %s: %#v", k, r)
		}
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"first", "second"}) {
		t.Fatalf("keys %v", keys)
	}
	got, ok, err := in.Answer(ni, map[string]*mcp.ElicitResult{
		"first": {Action: "accept", Content: map[string]any{"name": "a"}},
		"other": {Action: "accept", Content: map[string]any{"name": "b"}},
	})
	if err != nil || !ok {
		t.Fatalf("answer: %v %v", ok, err)
	}
	if got.InputID != ni.InputID || got.ScopeDigest != ni.ScopeDigest || got.Decision != workflows.DecisionApprove ||
		got.Comment != `{"answers":{"first":{"name":"a"}}}` {
		t.Errorf("resume %+v", got)
	}
	if _, ok, err := in.Answer(ni, map[string]*mcp.ElicitResult{"first": {Action: "decline"}}); ok || err != nil {
		t.Errorf("a declined answer answered: %v %v", ok, err)
	}
	big := strings.Repeat("x", jobcore.CommentMax)
	if _, _, err := in.Answer(ni, map[string]*mcp.ElicitResult{"first": {Action: "accept", Content: map[string]any{"name": big}}}); err == nil {
		t.Error("an oversized answer was accepted")
	}

	// Not a fixture's form: the approval elicitation, answered with a decision.
	plain := &workflows.NeedsInput{InputID: "approve-1", ScopeDigest: "sha256:y", Prompt: "approve?"}
	if _, ok := in.Requests(plain)[jobcore.TaskInputKey(plain)]; !ok {
		t.Errorf("plain request: %v", in.Requests(plain))
	}
	got, ok, err = in.Answer(plain, map[string]*mcp.ElicitResult{jobcore.TaskInputKey(plain): {Action: "accept", Content: map[string]any{"decision": "reject"}}})
	if err != nil || !ok || got.Decision != workflows.DecisionReject {
		t.Errorf("plain answer: %+v %v %v", got, ok, err)
	}
}

// TestFixtureToolsOnlyWithTheKind: the default kinds serve no fixture tool; with the fixture
// kind, every tool the conformance suite calls is served, with its task support.
func TestFixtureToolsOnlyWithTheKind(t *testing.T) {
	fixtures := map[string]jobcore.TaskSupport{
		workflows.FixtureGreet: jobcore.TaskForbidden, workflows.FixtureSlowCompute: jobcore.TaskOptional,
		workflows.FixtureFailingJob: jobcore.TaskRequired, workflows.FixtureProtocolError: jobcore.TaskRequired,
		workflows.FixtureConfirmDelete: jobcore.TaskRequired, workflows.FixtureMultiInput: jobcore.TaskRequired,
		workflows.FixtureToolWithTask: jobcore.TaskRequired,
	}
	f := newTestFrontend(t)
	for _, name := range servedToolNames(f) {
		if _, ok := fixtures[name]; ok || strings.HasSuffix(name, "_fixture") {
			t.Errorf("the default kinds serve %s", name)
		}
	}
	f, err := kindsFrontend(t, jobcore.DefaultKinds(jobcore.FixtureKind())...)
	if err != nil {
		t.Fatal(err)
	}
	names := servedToolNames(f)
	for name, want := range fixtures {
		if !slices.Contains(names, name) {
			t.Errorf("%s not served", name)
		}
		if got := f.taskSupport[name]; got != want {
			t.Errorf("%s: task support %d, want %d", name, got, want)
		}
	}
	if f.taskSupport["start_eval"] != jobcore.TaskOptional {
		t.Errorf("start_eval: task support %d", f.taskSupport["start_eval"])
	}
	if text, ok := (&jobcore.KindView[jobcore.FixtureResultView]{Result: &jobcore.FixtureResultView{Text: "Hello, W!"}}).ToolText(); !ok || text != "Hello, W!" {
		t.Errorf("fixture text %q %v", text, ok)
	}
	if _, ok := (&jobcore.KindView[jobcore.FixtureResultView]{}).ToolText(); ok {
		t.Error("a view without a result has words of its own")
	}
}

// FuzzFixtureInput: whatever a fixture's open request (as decoded from a memo) and a client's
// inputResponses hold, requests and answer never panic, and an answer resumes exactly the open
// request with a bounded comment that answers only outstanding keys.
func FuzzFixtureInput(f *testing.F) {
	f.Add([]byte(`{"input_id":"form-1-a","scope_digest":"sha256:x","answer_schema":{"properties":{"first":{"title":"q","properties":{}}}},"scope":{"pending":["first"]}}`),
		[]byte(`{"first":{"action":"accept","content":{"name":"a"}}}`))
	f.Add([]byte(`{"input_id":"i","scope":{"pending":[1,null,"x"]},"answer_schema":{"properties":{"x":7}}}`), []byte(`{"x":{"action":"decline"}}`))
	f.Add([]byte(`{"input_id":"approve-1","scope_digest":"d"}`), []byte(`{"approval.approve-1.0":{"action":"accept","content":{"decision":"approve"}}}`))
	f.Add([]byte(`{"scope":{"pending":"first"},"answer_schema":{"properties":[]}}`), []byte(`{"":null}`))
	f.Fuzz(func(t *testing.T, niJSON, respJSON []byte) {
		var ni workflows.NeedsInput
		var resps map[string]*mcp.ElicitResult
		if json.Unmarshal(niJSON, &ni) != nil || json.Unmarshal(respJSON, &resps) != nil {
			return
		}
		for k, v := range resps {
			if v == nil {
				delete(resps, k) // tasks/update decodes each answer into a value
			}
		}
		var in jobcore.FixtureInput
		reqs := in.Requests(&ni)
		if len(reqs) == 0 {
			t.Fatal("an open request with nothing to answer")
		}
		got, ok, err := in.Answer(&ni, resps)
		if !ok || err != nil {
			return
		}
		if got.InputID != ni.InputID || got.ScopeDigest != ni.ScopeDigest {
			t.Fatalf("answer for another request: %+v", got)
		}
		var form struct {
			Answers map[string]any `json:"answers"`
		}
		if json.Unmarshal([]byte(got.Comment), &form) == nil && form.Answers != nil {
			if len(got.Comment) > jobcore.CommentMax {
				t.Fatalf("comment of %d bytes", len(got.Comment))
			}
			for k := range form.Answers {
				if _, ok := reqs[k]; !ok {
					t.Fatalf("answered %q, which is not outstanding (%v)", k, reqs)
				}
			}
		}
	})
}

// TestFixtureUserName: test_tool_with_task's MRTR round asks for user_name until a retry
// carries an accepted, usable name; only then does the tool start its job.
func TestFixtureUserName(t *testing.T) {
	call := func(resps mcp.InputResponseMap) *mcp.CallToolRequest {
		return &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: workflows.FixtureToolWithTask, InputResponses: resps}}
	}
	asks := func(name string, err error) bool {
		var ir *jobcore.InputRequired
		if name != "" || !errors.As(err, &ir) {
			return false
		}
		_, ok := ir.Res.InputRequests[jobcore.FixtureInputKey]
		return ok && ir.Res.RequestState == ""
	}
	for what, req := range map[string]*mcp.CallToolRequest{
		"no call":     nil,
		"first round": call(nil),
		"declined":    call(mcp.InputResponseMap{jobcore.FixtureInputKey: &mcp.ElicitResult{Action: "decline"}}),
		"no name":     call(mcp.InputResponseMap{jobcore.FixtureInputKey: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": 7}}}),
		"too long":    call(mcp.InputResponseMap{jobcore.FixtureInputKey: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": strings.Repeat("é", 201)}}}),
		"other key":   call(mcp.InputResponseMap{"approval": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Alice"}}}),
	} {
		if name, err := jobcore.UserName(req); !asks(name, err) {
			t.Errorf("%s: %q %v, want the user_name question", what, name, err)
		}
	}
	name, err := jobcore.UserName(call(mcp.InputResponseMap{jobcore.FixtureInputKey: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Alice"}}}))
	if name != "Alice" || err != nil {
		t.Errorf("answered: %q %v", name, err)
	}
}
