package workflows

import (
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities"
)

type behaviourRegistry map[string]workflow.VersioningBehavior

func (r behaviourRegistry) RegisterWorkflowWithOptions(_ any, o workflow.RegisterOptions) {
	r[o.Name] = o.VersioningBehavior
}

func (r behaviourRegistry) RegisterActivityWithOptions(any, activity.RegisterOptions) {}

// TestVersioningBehaviours: every workflow a versioned worker registers declares a behaviour (the
// SDK panics at registration otherwise), jobs are pinned (a running job finishes on the build it
// started on) and the long sleepers that only run one activity auto-upgrade, as do the
// conformance fixtures (registered on request; they live seconds).
func TestVersioningBehaviours(t *testing.T) {
	r := behaviourRegistry{}
	for _, k := range Kinds() {
		if _, _, err := k.Register(r, &Workflows{}, &activities.Activities{}); err != nil {
			t.Fatal(err)
		}
	}
	RegisterNotify(r, &activities.Notifier{})
	want := map[string]workflow.VersioningBehavior{
		EvalWorkflowName:      workflow.VersioningBehaviorPinned,
		ExportWorkflowName:    workflow.VersioningBehaviorPinned,
		RetentionWorkflowName: workflow.VersioningBehaviorAutoUpgrade,
		// The episode log's retention child: one timer, one activity.
		EpisodeRetentionWorkflowName: workflow.VersioningBehaviorAutoUpgrade,
		NotifyWorkflowName:           workflow.VersioningBehaviorAutoUpgrade,
		NotifyProgressWorkflowName:   workflow.VersioningBehaviorAutoUpgrade,
		FixtureWorkflowName:          workflow.VersioningBehaviorAutoUpgrade, // a fixture job lives seconds
	}
	if len(r) != len(want) {
		t.Errorf("registered workflows %v, want those of %v", r, want)
	}
	for name, b := range r {
		if b == workflow.VersioningBehaviorUnspecified {
			t.Errorf("workflow %s declares no versioning behaviour", name)
		} else if b != want[name] {
			t.Errorf("workflow %s: versioning behaviour %v, want %v", name, b, want[name])
		}
	}
}
