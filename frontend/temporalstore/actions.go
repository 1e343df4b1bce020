package temporalstore

import (
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
)

// Temporal actions: the unit Temporal Cloud bills by, counted from a job's own history by the
// rules of https://docs.temporal.io/cloud/actions (read 2026-12). What a history shows:
//
//   - a run's start (client start, Signal-With-Start, continue-as-new), and a child workflow's start: 1;
//   - a timer started (also the implicit ones of AwaitWithTimeout): 1;
//   - an UpsertSearchAttributes command: 1, however many attributes it sets, except one that
//     sets only TemporalChangeVersion (versioning, exempt);
//   - a signal received, or sent to another workflow: 1;
//   - an update accepted: 1;
//   - a side effect recorded (SideEffect, a MutableSideEffect whose value changed: the SDK records
//     a marker only then): 1; version markers (GetVersion) are not side effects: 0;
//   - local activities: 1 per workflow task that recorded any;
//   - an activity started or retried: 1 per attempt (the started event carries the attempt).
//
// What no history shows is left out, so the count is a lower bound of what Cloud bills: queries,
// rejected updates, heartbeats the server recorded, and actions of other workflows (a child's
// own timers and activities). A memo upsert is not an action.
type actionCounter struct {
	n int
	// localTasks are the workflow tasks (their completed event IDs) whose local activities were counted.
	localTasks map[int64]bool
}

// add counts ev's actions.
func (c *actionCounter) add(ev *historypb.HistoryEvent) {
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED,
		enumspb.EVENT_TYPE_TIMER_STARTED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
		enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
		c.n++
	case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
		fields := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
		if _, version := fields["TemporalChangeVersion"]; !(version && len(fields) == 1) {
			c.n++
		}
	case enumspb.EVENT_TYPE_MARKER_RECORDED:
		a := ev.GetMarkerRecordedEventAttributes()
		switch a.GetMarkerName() {
		case "SideEffect", "MutableSideEffect":
			c.n++
		case "LocalActivity":
			if c.localTasks == nil {
				c.localTasks = map[int64]bool{}
			}
			if t := a.GetWorkflowTaskCompletedEventId(); !c.localTasks[t] {
				c.localTasks[t] = true
				c.n++
			}
		}
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
		c.n += int(max(1, ev.GetActivityTaskStartedEventAttributes().GetAttempt()))
	}
}
