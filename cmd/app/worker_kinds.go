package app

import (
	"context"

	"github.com/jobgate/jobgate/activities"
)

// workerKind is what a worker does for one kind beyond registering its workflows and
// activities (workflows.Kind.Register): the kind's own resources and task queues. A kind's own
// file declares it and workerKinds lists it; Run loops over them and never tests a kind by
// name. A kind with nothing of its own needs no entry.
type workerKind struct {
	name string
	// prepare opens the kind's resources into acts before anything registers; serving says
	// whether this worker serves the kind (one that does not holds none of its resources, and
	// refuses configuration for them); nil for nothing to open.
	prepare func(ctx context.Context, m *WorkerMain, acts *activities.Activities, serving bool) error
	// queues are further task queues the kind is served on (besides tq); nil for none.
	queues func(m *WorkerMain, acts *activities.Activities, tq string) []string
	// polling runs once the workers poll, for a served kind (warnings); nil for nothing.
	polling func(ctx context.Context, m *WorkerMain, acts *activities.Activities, tq string)
}

// workerKinds are the kinds with worker resources of their own.
func workerKinds() []workerKind { return []workerKind{evalWorker(), exportWorker()} }
