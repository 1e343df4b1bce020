package workflows

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/authz"
)

// The workflow test harness every kind's tests share: one job workflow in the SDK's test
// environment, and a record of what the run makes visible.

// testRunID is the run ID the SDK's test environment gives every workflow (it sets no first
// run ID, so FirstRunID falls back to it).
const testRunID = "default-test-run-id"

var (
	owner   = authz.Principal{Tenant: "acme", Subject: "ann", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	bo      = authz.Principal{Tenant: "acme", Subject: "bo", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
	steward = authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove}}
	// A principal of another tenant that happens to share the owner's subject and holds every scope.
	stranger = authz.Principal{Tenant: "globex", Subject: "ann", Scopes: authz.AllScopes()}
)

// jobHarness runs one job workflow and records what it makes visible: JobStatus upserts, memo
// upserts, every input request it publishes and every activity attempt it starts. A kind's
// harness (harness for evals, exportHarness) embeds it and adds its activities' mocks.
type jobHarness struct {
	t            *testing.T
	env          *testsuite.TestWorkflowEnvironment
	jobID        string
	workflowName string

	mu       sync.Mutex
	statuses []Status
	memos    []map[string]any
	asked    []*NeedsInput // every input request published, in order
	started  []string      // the activity type of every started attempt, in order
	// onStarted, if set, also sees every started attempt's type and arguments (called with mu held).
	onStarted func(activityType string, args converter.EncodedValues)
}

// newJobHarness registers the kind named kind as a worker does (Kind.Register: its workflow
// bound to w, its auxiliary workflows, its activities as methods of acts), then what register
// adds (nil: nothing; the SDK refuses registrations after the first mock), and starts
// recording. The job's workflow ID is jobID.
func newJobHarness(t *testing.T, kind, jobID string, w *Workflows, acts *activities.Activities,
	register func(*testsuite.TestWorkflowEnvironment)) *jobHarness {
	t.Helper()
	k, ok := LookupKind(kind)
	require.True(t, ok, "kind %q", kind)
	var ts testsuite.WorkflowTestSuite
	h := &jobHarness{t: t, env: ts.NewTestWorkflowEnvironment(), jobID: jobID, workflowName: k.WorkflowName}
	h.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: jobID})
	_, _, err := k.Register(h.env, w, acts)
	require.NoError(t, err)
	if register != nil {
		register(h.env)
	}
	h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		v, ok := sa.GetKeyword(SAJobStatus)
		require.True(t, ok, "every search attribute upsert sets JobStatus")
		h.mu.Lock()
		h.statuses = append(h.statuses, Status(v))
		h.mu.Unlock()
	}).Return(nil)
	h.env.OnUpsertMemo(mock.Anything).Run(func(args mock.Arguments) {
		m := args.Get(0).(map[string]any)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.memos = append(h.memos, m)
		if n, _ := m[MemoNeedsInput].(*NeedsInput); n != nil {
			h.asked = append(h.asked, n)
		}
	}).Return(nil)
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.started = append(h.started, info.ActivityType.Name)
		if h.onStarted != nil {
			h.onStarted(info.ActivityType.Name, args)
		}
	})
	return h
}

// execute runs the workflow with input in to its end (or the test environment's timeout).
func (h *jobHarness) execute(in any) { h.env.ExecuteWorkflow(h.workflowName, in) }

// resultInto requires the workflow completed without error and decodes its result into res.
func (h *jobHarness) resultInto(res any) {
	h.t.Helper()
	require.True(h.t, h.env.IsWorkflowCompleted())
	require.NoError(h.t, h.env.GetWorkflowError())
	require.NoError(h.t, h.env.GetWorkflowResult(res))
}

// count returns how many attempts of the activity type started ("" counts every activity).
func (h *jobHarness) count(activityType string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.started {
		if activityType == "" || s == activityType {
			n++
		}
	}
	return n
}

func (h *jobHarness) statusSeq() []Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Status(nil), h.statuses...)
}

// openInput is the input request published last.
func (h *jobHarness) openInput() *NeedsInput {
	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(h.t, h.asked, "the workflow published no needs_input in its memo")
	return h.asked[len(h.asked)-1]
}

func (h *jobHarness) askedInputs() []*NeedsInput {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*NeedsInput(nil), h.asked...)
}

// lastMemo returns the value of key in the last memo upsert that set it.
func (h *jobHarness) lastMemo(key string) (any, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.memos) - 1; i >= 0; i-- {
		if v, ok := h.memos[i][key]; ok {
			return v, true
		}
	}
	return nil, false
}

func (h *jobHarness) lastProgress() Progress {
	v, ok := h.lastMemo(MemoProgress)
	require.True(h.t, ok, "no progress memo")
	return v.(Progress)
}

func (h *jobHarness) lastJobError() *JobError {
	v, ok := h.lastMemo(MemoError)
	if !ok {
		return nil
	}
	return v.(*JobError)
}

// resumeOutcome is what happened to one resume update.
type resumeOutcome struct {
	accepted  bool
	rejectErr error
	completed bool
	result    ResumeResult
	// activity attempts (all types, ExportPart alone, PlanExport alone) started when the update
	// was accepted or rejected
	startedAtDecision, partsAtDecision, plansAtDecision int
}

// resumeAt sends, d into the run, a sealed UpdateResume with ID id carrying req().
func (h *jobHarness) resumeAt(d time.Duration, id string, req func() ResumeRequest) *resumeOutcome {
	out := &resumeOutcome{}
	decided := func() {
		out.startedAtDecision = h.count("")
		out.partsAtDecision = h.count("ExportPart")
		out.plansAtDecision = h.count("PlanExport")
	}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(UpdateResume, id, &testsuite.TestUpdateCallback{
			OnReject: func(err error) {
				out.rejectErr = err
				decided()
			},
			OnAccept: func() {
				out.accepted = true
				decided()
			},
			OnComplete: func(v any, err error) {
				require.NoError(h.t, err)
				out.completed = true
				out.result = v.(ResumeResult)
			},
		}, sealed(h.jobID, req()))
	}, d)
	return out
}

// answer builds a resume answering the open input request as published in the memo.
func (h *jobHarness) answer(p authz.Principal, decision string) func() ResumeRequest {
	return func() ResumeRequest {
		n := h.openInput()
		return ResumeRequest{Principal: p, InputID: n.InputID, ScopeDigest: n.ScopeDigest, Decision: decision}
	}
}

// editedAnswer is p's approval of the open request, changed by edit (the resume validation tables).
func editedAnswer(p authz.Principal, edit func(*ResumeRequest)) func(h *jobHarness) func() ResumeRequest {
	return func(h *jobHarness) func() ResumeRequest {
		return func() ResumeRequest {
			r := h.answer(p, DecisionApprove)()
			if edit != nil {
				edit(&r)
			}
			return r
		}
	}
}

// requireRejected checks that the job ended on got, a rejection by `by` with comment: the
// update completed, the workflow was cancelled with "rejected by <by>: <comment>", that is the
// job error (code rejected), the status went awaiting_input → cancelled and needs_input is
// cleared.
func (h *jobHarness) requireRejected(got *resumeOutcome, by, comment string) {
	t := h.t
	t.Helper()
	require.True(t, got.accepted, "rejected: %v", got.rejectErr)
	assert.Equal(t, ResumeResult{Decision: DecisionReject, By: by}, got.result)
	canceled := requireCanceled(t, h.env.GetWorkflowError())
	var msg string
	require.NoError(t, canceled.Details(&msg))
	assert.Equal(t, "rejected by "+by+": "+comment, msg)
	assert.Equal(t, []Status{StatusAwaitingInput, StatusCancelled}, h.statusSeq())
	if je := h.lastJobError(); assert.NotNil(t, je) {
		assert.Equal(t, ErrCodeRejected, je.Code)
		assert.Equal(t, msg, je.Message)
	}
	v, ok := h.lastMemo(MemoNeedsInput)
	require.True(t, ok)
	assert.Nil(t, v)
}

// requireRefusedThenFixed checks that the validator refused got with an error of wantType
// before anything ran (no accept, no completion: nothing in history), and that fix, a valid
// answer sent after it, was accepted, also before anything ran. It returns the refusal.
func requireRefusedThenFixed(t *testing.T, got, fix *resumeOutcome, wantType string) *temporal.ApplicationError {
	t.Helper()
	assert.False(t, got.accepted, "OnAccept must not be called")
	assert.False(t, got.completed)
	appErr := requireAppErrType(t, got.rejectErr, wantType)
	assert.Zero(t, got.startedAtDecision, "nothing ran before the rejected answer")
	require.True(t, fix.accepted, "valid answer after a rejection: %v", fix.rejectErr)
	assert.Zero(t, fix.startedAtDecision, "nothing ran before the accepted answer")
	return appErr
}

// loadHistory reads a recorded history from testdata.
func loadHistory(t *testing.T, file string) *historypb.History {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", file))
	require.NoError(t, err)
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	require.NoError(t, err)
	return hist
}

// replay replays the recorded history file of workflow ID id with wf registered under name.
func replay(t *testing.T, file, id, name string, wf any) {
	t.Helper()
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: name})
	require.NoError(t, r.ReplayWorkflowHistoryWithOptions(nil, loadHistory(t, file),
		worker.ReplayWorkflowHistoryOptions{OriginalExecution: workflow.Execution{ID: id}}))
}

func requireAppErrType(t *testing.T, err error, typ string) *temporal.ApplicationError {
	t.Helper()
	require.Error(t, err)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "want an ApplicationError of type %q, got %v", typ, err)
	require.Equal(t, typ, appErr.Type(), "error: %v", err)
	return appErr
}

func requireCanceled(t *testing.T, err error) *temporal.CanceledError {
	t.Helper()
	require.Error(t, err)
	var canceled *temporal.CanceledError
	require.True(t, errors.As(err, &canceled), "want a CanceledError, got %v", err)
	return canceled
}
