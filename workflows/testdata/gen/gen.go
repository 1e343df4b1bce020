package gen

import (
	"context"
	"os"
	"path/filepath"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/cmd/devtemporal"
	"github.com/jobgate/jobgate/workflows"
)

// Env is a running embedded server, a client of it and a worker polling TaskQueue.
type Env struct {
	Client    client.Client
	TaskQueue string
	srv       *devtemporal.Server
	worker    worker.Worker
}

// Start starts the server and a worker on taskQueue serving kind: its workflows bound to wfs,
// its activities as methods of acts, registered as jobgate's worker registers them.
func Start(ctx context.Context, taskQueue, kind string, wfs *workflows.Workflows, acts *activities.Activities) (*Env, error) {
	return StartWith(ctx, taskQueue, kind, wfs, acts, nil)
}

// StartWith is Start that also registers what extra registers (e.g. workflows.RegisterNotify
// with a notifier) before the worker starts; nil registers nothing more.
func StartWith(ctx context.Context, taskQueue, kind string, wfs *workflows.Workflows, acts *activities.Activities,
	extra func(workflows.Registry)) (*Env, error) {
	sas := workflows.SearchAttributeTypes()
	srv, err := devtemporal.Start(ctx, devtemporal.Options{UIPort: devtemporal.UIDisabled, SearchAttributes: sas})
	if err != nil {
		return nil, err
	}
	e := &Env{TaskQueue: taskQueue, srv: srv}
	e.Client, err = client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Namespace: srv.Namespace()})
	if err != nil {
		e.Stop()
		return nil, err
	}
	e.worker = worker.New(e.Client, taskQueue, worker.Options{})
	k, _ := workflows.LookupKind(kind)
	if _, _, err := k.Register(e.worker, wfs, acts); err != nil {
		e.Stop()
		return nil, err
	}
	if extra != nil {
		extra(e.worker)
	}
	if err := e.worker.Start(); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// Stop stops the worker, the client and the server.
func (e *Env) Stop() {
	if e.worker != nil {
		e.worker.Stop()
	}
	if e.Client != nil {
		e.Client.Close()
	}
	_ = e.srv.Stop()
}

// StartJob starts job id of kind with input in and the search attributes a frontend sets.
func (e *Env) StartJob(ctx context.Context, id, kind, tenant, owner string, in any) (client.WorkflowRun, error) {
	k, _ := workflows.LookupKind(kind)
	return e.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: e.TaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.SAJobTenant.ValueSet(tenant), workflows.SAJobOwner.ValueSet(owner),
			workflows.SAJobKind.ValueSet(kind), workflows.SAJobStatus.ValueSet(string(workflows.StatusQueued))),
	}, k.WorkflowName, in)
}

// Save writes the history of run runID of id to dir/name and returns its number of events.
func (e *Env) Save(ctx context.Context, dir, name, id, runID string) (int, error) {
	it := e.Client.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return 0, err
		}
		h.Events = append(h.Events, ev)
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		return 0, err
	}
	return len(h.Events), os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}
