package temporalstore

import (
	"testing"

	"github.com/jobgate/jobgate/workflows"
)

// TestActionsHandCounted: the actions counted on recorded histories equal a count by hand of
// their events (tallied per event type and read against the rules in actions.go).
//
// eval_budget.json (73 events): 1 WorkflowExecutionStarted, 2 TimerStarted (the two budget
// requests' waits), 5 UpsertWorkflowSearchAttributes of JobStatus/JobAnswerer (+5 of
// TemporalChangeVersion alone: exempt), 2 WorkflowExecutionUpdateAccepted, 4 MarkerRecorded
// SideEffect (+5 Version markers: not actions), 6 ActivityTaskStarted at attempt 1 (5 episodes
// and the episode log's write); 7 WorkflowPropertiesModified (memo) and the workflow and
// activity task events are not actions: 1+2+5+2+4+6 = 20.
//
// eval_approved_v2.json (53 events): 1 start, 1 timer (the approval's wait), 3 JobStatus
// upserts (+3 TemporalChangeVersion), 1 update, 2 side effects (+3 Version markers), 6
// activity attempts: 14.
func TestActionsHandCounted(t *testing.T) {
	for file, want := range map[string]int{"eval_budget.json": 20, "eval_approved_v2.json": 14} {
		if got := narrate(t, workflows.KindEval, false, "", file).Actions; got != want {
			t.Errorf("%s: %d actions, hand count %d", file, got, want)
		}
	}
	// Retries: an activity's started event carries its attempt, and each attempt is an action.
	// The continue-as-new pair counts each run's start once.
	a := narrate(t, workflows.KindEval, false, "", "eval_can_run1.json", "eval_can_run2.json")
	b1 := narrate(t, workflows.KindEval, false, "", "eval_can_run1.json")
	b2 := narrate(t, workflows.KindEval, false, "", "eval_can_run2.json")
	if a.Actions != b1.Actions+b2.Actions || a.Actions == 0 {
		t.Errorf("two runs: %d actions, their sum %d", a.Actions, b1.Actions+b2.Actions)
	}
}
