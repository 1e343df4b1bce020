package replay

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// The SDK's non-determinism errors do not say which event of the history diverged. Two ways
// find it: most divergences panic while the SDK applies one history event to the replayed
// code's commands, and the SDK's verbose logging names each event it applies (ProcessEvent,
// EventID) just before; the others are found when the commands of a whole workflow task are
// compared with the events after it ("nondeterministic workflow: …"), and replaying growing
// prefixes of the history (each cut just after a WorkflowTaskStarted, which the replayer
// treats as an open execution's history) finds that task.

var verboseOnce sync.Once

// eventTracker is the replay logger: it keeps the last event the SDK applied and drops the
// rest (the SDK logs the failure itself at error level; the caller reports it).
type eventTracker struct{ last int64 }

func (t *eventTracker) Debug(msg string, kv ...any) {
	if msg != "ProcessEvent" {
		return
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, _ := kv[i].(string); k == "EventID" {
			if id, ok := kv[i+1].(int64); ok {
				t.last = id
			}
		}
	}
}
func (t *eventTracker) Info(string, ...any)  {}
func (t *eventTracker) Warn(string, ...any)  {}
func (t *eventTracker) Error(string, ...any) {}

var _ sdklog.Logger = (*eventTracker)(nil)

// replayMu serializes replays: verbose logging is process-wide, and one replay at a time
// keeps each tracker's "last event" its own.
var replayMu sync.Mutex

func replayOnce(r worker.WorkflowReplayer, hist *historypb.History, id, runID string) (int64, error) {
	replayMu.Lock()
	defer replayMu.Unlock()
	verboseOnce.Do(func() { worker.EnableVerboseLogging(true) })
	t := &eventTracker{}
	err := r.ReplayWorkflowHistoryWithOptions(t, hist,
		worker.ReplayWorkflowHistoryOptions{OriginalExecution: workflow.Execution{ID: id, RunID: runID}})
	return t.last, err
}

// taskMismatch is the SDK's message for a workflow task whose commands differ from the
// events after it; the event type it names, if any, is captured.
var taskMismatch = regexp.MustCompile(`nondeterministic workflow: (?:history event is|missing replay command for) (\w+)`)

// replayLocated replays hist and, when it does not replay, locates the event that diverged:
// its ID and type (0, "" when none could be told).
func replayLocated(r worker.WorkflowReplayer, hist *historypb.History, id, runID string) (int64, string, error) {
	last, err := replayOnce(r, hist, id, runID)
	if err == nil {
		return 0, "", nil
	}
	events := hist.GetEvents()
	if !strings.Contains(err.Error(), "nondeterministic workflow:") {
		if last > 0 {
			return last, eventTypeOf(events, last), err
		}
		return 0, "", err
	}
	// A task's commands did not match: find the first prefix that fails.
	var cuts []int
	for i, ev := range events {
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED && i+1 < len(events) {
			cuts = append(cuts, i+1)
		}
	}
	from, to := 0, len(events) // the failing task's events lie in events[from:to]
	for _, n := range cuts {
		if _, perr := replayOnce(r, &historypb.History{Events: events[:n]}, id, runID); perr != nil {
			to = n
			break
		}
		from = n
	}
	want := ""
	if m := taskMismatch.FindStringSubmatch(err.Error()); m != nil {
		want = m[1]
	}
	var firstCommand *historypb.HistoryEvent
	for _, ev := range events[from:to] {
		if !isCommandEvent(ev.GetEventType()) {
			continue
		}
		if firstCommand == nil {
			firstCommand = ev
		}
		if want != "" && ev.GetEventType().String() == want {
			return ev.GetEventId(), want, err
		}
	}
	if firstCommand != nil {
		return firstCommand.GetEventId(), firstCommand.GetEventType().String(), err
	}
	if to > 0 && to <= len(events) {
		ev := events[to-1]
		return ev.GetEventId(), ev.GetEventType().String(), err
	}
	return 0, "", err
}

func eventTypeOf(events []*historypb.HistoryEvent, id int64) string {
	for _, ev := range events {
		if ev.GetEventId() == id {
			return ev.GetEventType().String()
		}
	}
	return fmt.Sprint("event ", id)
}

// isCommandEvent: the events a workflow task's commands leave (the SDK's own list, which it
// does not export).
func isCommandEvent(t enumspb.EventType) bool {
	switch t {
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED,
		enumspb.EVENT_TYPE_TIMER_STARTED, enumspb.EVENT_TYPE_TIMER_CANCELED, enumspb.EVENT_TYPE_MARKER_RECORDED,
		enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
		enumspb.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
		enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
		enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, enumspb.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
		enumspb.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED, enumspb.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED:
		return true
	}
	return false
}
