// tasks_input.go holds how a kind's open input request reads on the Tasks surface: the
// inputRequests of tasks/get and the answer tasks/update's inputResponses make of it.

package frontend

import (
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/workflows"
)

// taskInput is how a kind's open input request (workflows.NeedsInput) reads on the Tasks
// surface. requests are the elicitations tasks/get shows, by key: every key outstanding until
// an answer changes the request. answer reads tasks/update's responses to outstanding keys
// (decoded as elicitation results) into one resume of the open request, the same resume
// resume_* makes; answered is false when nothing in them answers (declined, dismissed), and
// the job keeps waiting. An error is a tool error of the job core (invalid_argument).
type taskInput interface {
	requests(ni *workflows.NeedsInput) mcp.InputRequestMap
	answer(ni *workflows.NeedsInput, resps map[string]*mcp.ElicitResult) (in ResumeIn, answered bool, err error)
}

// approvalInput is every job kind's request as an approval: one form elicitation (decision,
// comment) under a key bound to the request's input_id and scope_digest (taskInputKey).
type approvalInput struct{}

func (approvalInput) requests(ni *workflows.NeedsInput) mcp.InputRequestMap {
	return mcp.InputRequestMap{taskInputKey(ni): approvalElicitation(ni)}
}

func (approvalInput) answer(ni *workflows.NeedsInput, resps map[string]*mcp.ElicitResult) (ResumeIn, bool, error) {
	resp, ok := resps[taskInputKey(ni)]
	if !ok {
		return ResumeIn{}, false, nil
	}
	decision, comment, accepted, err := elicitAnswer(resp)
	if err != nil || !accepted {
		return ResumeIn{}, false, err
	}
	if utf8.RuneCountInString(comment) > commentMax { // as resume_* checks it
		return ResumeIn{}, false, invalidArg("inputResponses", "content.comment: at most %d characters", commentMax)
	}
	return ResumeIn{InputID: ni.InputID, ScopeDigest: ni.ScopeDigest, Decision: decision, Comment: comment}, true, nil
}

// taskInputOf is kind's taskInput (approvalInput unless the kind has its own).
func (f *Frontend) taskInputOf(kind string) taskInput {
	for _, k := range f.kinds {
		if k.name == kind && k.taskInput != nil {
			return k.taskInput
		}
	}
	return approvalInput{}
}
