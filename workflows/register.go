package workflows

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"
)

// Registry is what a kind registers its workflows and activities with: a Temporal worker
// (worker.Worker) or a test environment.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Register registers the kind's workflow (bound to w's injected behaviour), its auxiliary
// workflows and its activities (methods of a, an *activities.Activities, under the names
// workflows execute them by) with r: a worker, or a test environment. It returns the
// registered names. a is any, found by reflection, so this package never imports activities
// (and the SQL drivers it links): workflows need only activities/contract.
func (k Kind) Register(r Registry, w *Workflows, a any) (workflowNames, activityNames []string, err error) {
	r.RegisterWorkflowWithOptions(k.Workflow(w), workflow.RegisterOptions{Name: k.WorkflowName, VersioningBehavior: k.Versioning})
	workflowNames = append(workflowNames, k.WorkflowName)
	for _, name := range slices.Sorted(maps.Keys(k.Auxiliary)) {
		r.RegisterWorkflowWithOptions(k.Auxiliary[name], workflow.RegisterOptions{Name: name, VersioningBehavior: k.AuxiliaryVersioning[name]})
		workflowNames = append(workflowNames, name)
	}
	v := reflect.ValueOf(a)
	for _, name := range k.Activities {
		if !v.IsValid() { // a is nil: reflection would panic
			return nil, nil, fmt.Errorf("kind %s: no activities to register %s from", k.Name, name)
		}
		m := v.MethodByName(name)
		if !m.IsValid() {
			return nil, nil, fmt.Errorf("kind %s: activity %s is not a method of %T", k.Name, name, a)
		}
		// Workflows execute it by this name (contract.*ActivityName, the method's name).
		r.RegisterActivityWithOptions(m.Interface(), activity.RegisterOptions{Name: name})
		activityNames = append(activityNames, name)
	}
	return workflowNames, activityNames, nil
}
