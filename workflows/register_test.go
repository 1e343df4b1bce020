package workflows

import (
	"reflect"
	"slices"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities"
)

type recordingRegistry struct{ workflows, activities []string }

func (r *recordingRegistry) RegisterWorkflowWithOptions(_ any, o workflow.RegisterOptions) {
	r.workflows = append(r.workflows, o.Name)
}

func (r *recordingRegistry) RegisterActivityWithOptions(_ any, o activity.RegisterOptions) {
	r.activities = append(r.activities, o.Name)
}

// TestKindsClaimEveryActivity: every activity method belongs to exactly one kind, so a worker
// serving some kinds (jobgate worker --kinds) registers every activity their workflows execute
// and none of the others'. A new activity method fails here until a kind lists it.
func TestKindsClaimEveryActivity(t *testing.T) {
	owner := map[string]string{}
	for _, k := range Kinds() {
		r := &recordingRegistry{}
		wfs, acts, err := k.Register(r, &Workflows{}, &activities.Activities{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(wfs, r.workflows) || !slices.Equal(acts, r.activities) {
			t.Fatalf("kind %s: reported %v %v, registered %v %v", k.Name, wfs, acts, r.workflows, r.activities)
		}
		if !slices.Contains(wfs, k.WorkflowName) {
			t.Errorf("kind %s does not register its workflow %s", k.Name, k.WorkflowName)
		}
		for _, a := range acts {
			if prev, ok := owner[a]; ok {
				t.Errorf("activity %s is claimed by kinds %s and %s", a, prev, k.Name)
			}
			owner[a] = k.Name
		}
	}
	typ := reflect.TypeOf(&activities.Activities{})
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		// Activities are the methods taking a context first, as the SDK registers them.
		if m.Type.NumIn() < 2 || m.Type.In(1).String() != "context.Context" {
			continue
		}
		if _, ok := owner[m.Name]; !ok {
			t.Errorf("activity method %s belongs to no kind: list it in its kind's Activities", m.Name)
		}
	}
	if owner["RunEpisode"] != KindEval {
		t.Errorf("RunEpisode belongs to %q, want eval", owner["RunEpisode"])
	}
	if len(owner) < 2 {
		t.Fatalf("only %d activities claimed", len(owner))
	}
}

// TestKindsAreFreshValues: the registry is no shared mutable state: what one caller changes in
// the kinds it got, the next caller does not see.
func TestKindsAreFreshValues(t *testing.T) {
	names := DefaultKindNames()
	if len(names) < 2 || names[0] != KindEval || names[1] != KindExport {
		t.Fatalf("DefaultKindNames() = %v: eval and export first, in that order", names)
	}
	got := Kinds()
	got[0].Name = "changed"
	got[1].Activities[0] = "Changed"
	got[1].Auxiliary["jobgate.Changed"] = nil
	again := Kinds()
	if !slices.Equal(DefaultKindNames(), names) || again[0].Name != KindEval {
		t.Fatalf("kinds after a caller's change: %v", DefaultKindNames())
	}
	if again[1].Activities[0] != "PlanExport" || len(again[1].Auxiliary) != 1 {
		t.Fatalf("export kind after a caller's change: %v %v", again[1].Activities, again[1].Auxiliary)
	}
	if k, ok := LookupKind(KindExport); !ok || k.Unit != "rows" || k.WorkflowName != ExportWorkflowName {
		t.Fatalf("LookupKind(export) = %+v, %v", k, ok)
	}
	if _, ok := LookupKind("changed"); ok {
		t.Fatal("LookupKind found a kind a caller renamed")
	}
}

// TestSearchAttributeNames: the names to register are the keys' names, each once.
func TestSearchAttributeNames(t *testing.T) {
	want := []string{"JobTenant", "JobOwner", "JobKind", "JobStatus", "JobAnswerer"}
	if got := SearchAttributeNames(); !slices.Equal(got, want) {
		t.Fatalf("SearchAttributeNames() = %v, want %v", got, want)
	}
	SearchAttributeNames()[0] = "Changed"
	if SearchAttributeNames()[0] != "JobTenant" {
		t.Fatal("a caller's change reached the next caller")
	}
}
