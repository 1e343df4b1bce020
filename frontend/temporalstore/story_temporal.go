package temporalstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// Story reads the job's history, first run to current (following continue-as-new), one
// server page at a time, and narrates it with the kind's words (workflows.Kind.Story).
func (s *Store) Story(ctx context.Context, kind workflows.Kind, req jobstore.StoryRequest) (*jobstore.StoryResult, error) {
	resp, err := s.c.DescribeWorkflowExecution(ctx, req.ID, "")
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil, jobstore.ErrJobNotFound
		}
		return nil, storeErr("describe "+req.ID, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	runID := info.GetFirstRunId()
	if runID == "" {
		runID = info.GetExecution().GetRunId()
	}
	n := newNarrator(kind.Story, s.dc, req)
	for runID != "" {
		n.res.Runs++
		it := s.c.GetWorkflowHistory(ctx, req.ID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		next := ""
		for it.HasNext() {
			if n.res.Events >= storyMaxEvents {
				n.budgetCut = true
				break
			}
			ev, err := it.Next()
			if err != nil {
				return nil, storeErr("history of "+req.ID, err)
			}
			n.res.Events++
			if nr := n.event(ev); nr != "" {
				next = nr
			}
		}
		if n.budgetCut {
			break
		}
		runID = next
	}
	return n.finish(), nil
}

// narrator turns history events into timeline lines. Runs of similar events (completed
// activities of one type, retries of one type with the same error) become one line.
type narrator struct {
	story workflows.Story
	dc    converter.DataConverter
	req   jobstore.StoryRequest
	buf   storyBuf
	res   jobstore.StoryResult
	// per run: scheduled event ID → activity type
	sched map[int64]string
	// completed activities per type, across runs (ordinals in "parts 1–40 succeeded")
	done  map[string]int
	asked map[string]bool // input IDs whose request was told
	group *storyGroup
	// budgetCut: storyMaxEvents was reached before the history's end.
	budgetCut bool
	// actions counts the events' Temporal actions (actions.go).
	actions actionCounter
}

// storyGroup is a run of similar events not yet written out.
type storyGroup struct {
	key      string
	at       time.Time
	from, to int // ordinals for completions
	n        int
	text     func(g *storyGroup) string
}

func newNarrator(story workflows.Story, dc converter.DataConverter, req jobstore.StoryRequest) *narrator {
	return &narrator{story: story, dc: dc, req: req, buf: storyBuf{max: req.MaxLines},
		sched: map[int64]string{}, done: map[string]int{}, asked: map[string]bool{}}
}

func (n *narrator) line(at time.Time, format string, args ...any) {
	n.flush()
	n.buf.add(wire.StoryLine{At: at.UTC(), Text: fmt.Sprintf(format, args...)})
}

func (n *narrator) flush() {
	if g := n.group; g != nil {
		n.group = nil
		n.buf.add(wire.StoryLine{At: g.at.UTC(), Text: g.text(g)})
	}
}

// grouped adds one event to the current group when it has the same key, else starts one.
func (n *narrator) grouped(key string, at time.Time, ord int, text func(g *storyGroup) string) {
	if g := n.group; g != nil && g.key == key {
		g.n++
		g.to = ord
		return
	}
	n.flush()
	n.group = &storyGroup{key: key, at: at, from: ord, to: ord, n: 1, text: text}
}

// event narrates one event; it returns the next run's ID when the run continued as new.
func (n *narrator) event(ev *historypb.HistoryEvent) (nextRun string) {
	n.actions.add(ev)
	n.res.Actions = n.actions.n
	at := ev.GetEventTime().AsTime()
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
		n.started(at, ev.GetWorkflowExecutionStartedEventAttributes())
	case enumspb.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
		n.memo(at, ev.GetWorkflowPropertiesModifiedEventAttributes().GetUpsertedMemo().GetFields()[workflows.MemoNeedsInput])
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
		n.updateAccepted(at, ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput())
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
		if f := ev.GetWorkflowExecutionUpdateCompletedEventAttributes().GetOutcome().GetFailure(); f != nil {
			n.line(at, "the answer was refused by the job: %s", n.failure(f))
		}
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
		n.sched[ev.GetEventId()] = ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
		n.activityStarted(at, ev.GetActivityTaskStartedEventAttributes())
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
		step := n.sched[ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]
		n.done[step]++
		n.grouped("ok\x00"+step, at, n.done[step], func(g *storyGroup) string {
			if g.n == 1 {
				return fmt.Sprintf("%s %d succeeded", n.story.StepNoun(step, 1), g.from)
			}
			return fmt.Sprintf("%s %d–%d succeeded", n.story.StepNoun(step, g.n), g.from, g.to)
		})
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
		a := ev.GetActivityTaskFailedEventAttributes()
		step := n.sched[a.GetScheduledEventId()]
		n.line(at, "%s failed (no retries left): %s", n.story.StepNoun(step, 1), n.failure(a.GetFailure()))
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
		a := ev.GetActivityTaskTimedOutEventAttributes()
		n.line(at, "%s timed out (no retries left): %s", n.story.StepNoun(n.sched[a.GetScheduledEventId()], 1), n.failure(a.GetFailure()))
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
		a := ev.GetActivityTaskCanceledEventAttributes()
		step := n.sched[a.GetScheduledEventId()]
		n.grouped("cancelled\x00"+step, at, 0, func(g *storyGroup) string {
			return fmt.Sprintf("%d %s cancelled", g.n, n.story.StepNoun(step, g.n))
		})
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
		if c := oneLineText(ev.GetWorkflowExecutionCancelRequestedEventAttributes().GetCause()); c != "" {
			n.line(at, "cancel requested: %s", c)
		} else {
			n.line(at, "cancel requested")
		}
	case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
		n.line(at, "started child workflow %s", ev.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowType().GetName())
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
		n.line(at, "run %d continued as new", n.res.Runs)
		return ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
		n.end(at, "succeeded", nil)
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
		n.end(at, "failed", ev.GetWorkflowExecutionFailedEventAttributes().GetFailure())
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
		n.end(at, "cancelled", nil)
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
		n.end(at, "terminated by an operator", nil)
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
		n.end(at, "timed out", nil)
	}
	return ""
}

// started tells a run's start: who started the job and with what arguments, or that a run
// continued as new.
func (n *narrator) started(at time.Time, a *historypb.WorkflowExecutionStartedEventAttributes) {
	n.sched = map[int64]string{}
	var args string
	if ps := a.GetInput().GetPayloads(); len(ps) > 0 {
		var raw json.RawMessage
		if n.dc.FromPayload(ps[0], &raw) == nil {
			args = n.story.ArgsLine(raw)
		}
	}
	if args != "" {
		args = ": " + args
	}
	if n.res.Runs <= 1 {
		n.res.Started = at
		n.line(at, "started by %s%s", n.owner(a), args)
	} else {
		n.line(at, "run %d began (continue-as-new)%s", n.res.Runs, args)
	}
}

// updateAccepted tells an accepted answer to an input request (the resume update); other
// updates are not told.
func (n *narrator) updateAccepted(at time.Time, in *updatepb.Input) {
	if in.GetName() != workflows.UpdateResume || len(in.GetArgs().GetPayloads()) == 0 {
		return
	}
	var r workflows.ResumeRequest
	if n.dc.FromPayload(in.GetArgs().GetPayloads()[0], &r) != nil {
		n.line(at, "an answer to the input request was accepted (unreadable record)")
		return
	}
	n.line(at, "%s", answerText(r))
}

// activityStarted tells a retry (an attempt after the first), grouped by step and error.
func (n *narrator) activityStarted(at time.Time, a *historypb.ActivityTaskStartedEventAttributes) {
	if a.GetAttempt() <= 1 {
		return
	}
	step := n.sched[a.GetScheduledEventId()]
	errText := n.failure(a.GetLastFailure())
	n.grouped("retry\x00"+step+"\x00"+errText, at, 0, func(g *storyGroup) string {
		if g.n == 1 {
			return fmt.Sprintf("%s retried: attempt %d started after attempt %d failed: %s",
				n.story.StepNoun(step, 1), a.GetAttempt(), a.GetAttempt()-1, errText)
		}
		return fmt.Sprintf("%d %s retries after: %s", g.n, n.story.StepNoun(step, 1), errText)
	})
}

// owner is who started the job: the owner recorded in its input (every kind's input has one).
func (n *narrator) owner(a *historypb.WorkflowExecutionStartedEventAttributes) string {
	if ps := a.GetInput().GetPayloads(); len(ps) > 0 {
		var in struct {
			Owner string `json:"owner"`
		}
		if n.dc.FromPayload(ps[0], &in) == nil && in.Owner != "" {
			return in.Owner
		}
	}
	return "(unknown)"
}

// memo tells a newly opened input request (the needs_input memo field): its prompt (the
// meaning an answer is sealed to), who may answer and until when.
func (n *narrator) memo(at time.Time, p *commonpb.Payload) {
	if p == nil {
		return
	}
	var ni *workflows.NeedsInput
	if fromPayload(n.dc, p, &ni) != nil || ni == nil || n.asked[ni.InputID] {
		return
	}
	n.asked[ni.InputID] = true
	n.line(at, "waiting for approval (approver: %s; input %s; until %s): %s", ni.Approver, ni.InputID,
		ni.ExpiresAt.UTC().Format(time.RFC3339), oneLineText(ni.Prompt))
}

// end is the job's last line: its status, the job's error code and message as its view shows
// them, and (full detail) the failure as recorded.
func (n *narrator) end(at time.Time, what string, f *failurepb.Failure) {
	n.res.Ended = at
	s := what
	if n.req.JobErrCode != "" {
		s += " (" + n.req.JobErrCode
		if n.req.JobErrMsg != "" {
			s += ": " + oneLineText(n.req.JobErrMsg)
		}
		s += ")"
	}
	if f != nil && n.req.Full {
		s += "; recorded failure: " + n.failure(f)
	}
	n.line(at, "%s", s)
}

// failure renders an activity's or workflow's failure: its type always; its message (and its
// cause's) only with full detail, since a driver's error names host, user and database.
func (n *narrator) failure(f *failurepb.Failure) string {
	if f == nil {
		return "no error recorded"
	}
	typ := failureType(f)
	if !n.req.Full {
		return typ
	}
	// Sealed messages (a codec's encoded attributes) are opened on a copy: the history is
	// the caller's. One recorded before encryption reads as it was.
	f = proto.Clone(f).(*failurepb.Failure)
	for x := f; x != nil; x = x.GetCause() {
		converter.DecodeCommonFailureAttributes(n.dc, x)
	}
	msg := oneLineText(f.GetMessage())
	if c := f.GetCause(); c != nil {
		msg += " ← " + failureType(c) + ": " + oneLineText(c.GetMessage())
	}
	return typ + ": " + msg
}

func failureType(f *failurepb.Failure) string {
	switch {
	case f.GetApplicationFailureInfo() != nil:
		if t := f.GetApplicationFailureInfo().GetType(); t != "" {
			return t
		}
		return "ApplicationError"
	case f.GetTimeoutFailureInfo() != nil:
		return "timeout (" + strings.ToLower(strings.TrimPrefix(f.GetTimeoutFailureInfo().GetTimeoutType().String(), "TIMEOUT_TYPE_")) + ")"
	case f.GetCanceledFailureInfo() != nil:
		return "cancelled"
	case f.GetTerminatedFailureInfo() != nil:
		return "terminated"
	case f.GetServerFailureInfo() != nil:
		return "server error"
	}
	return "error"
}

// answerText tells an accepted answer to an input request: decision, who, on which surface.
func answerText(r workflows.ResumeRequest) string {
	verb := map[string]string{workflows.DecisionApprove: "approved", workflows.DecisionReject: "rejected"}[r.Decision]
	if verb == "" {
		verb = "answered (" + r.Decision + ")"
	}
	s := verb + " by " + r.Principal.Subject
	if r.Surface != "" {
		s += " on " + r.Surface
	}
	if r.SignedInWith != "" {
		s += " (signed in with " + r.SignedInWith + ")"
	}
	if r.Comment != "" {
		s += ": " + fmt.Sprintf("%q", oneLineText(r.Comment))
	}
	return s
}

// oneLineText folds a message onto one line and bounds it.
func oneLineText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}

func (n *narrator) finish() *jobstore.StoryResult {
	n.flush()
	n.res.Lines, n.res.Cut = n.buf.lines()
	if n.budgetCut {
		more := fmt.Sprintf("history read up to its first %d events; the rest is not told", storyMaxEvents)
		if n.res.Cut != "" {
			n.res.Cut += "; " + more
		} else {
			n.res.Cut = more
		}
	}
	return &n.res
}
