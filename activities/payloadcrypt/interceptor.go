package payloadcrypt

import (
	"errors"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// WorkerInterceptor goes on every worker that seals payloads. The SDK encodes a cancelled
// workflow's details (temporal.NewCanceledError's arguments, or the error a cancelled timer
// or wait returns) with the worker's data converter and no serialization context: the codec
// cannot know their tenant and refuses, which would fail the workflow task of every
// cancellation. So the details are dropped before the SDK sees them; a job's reason for
// ending is its error in the memo, sealed like every memo.
func WorkerInterceptor() interceptor.WorkerInterceptor { return &workerInterceptor{} }

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (*workerInterceptor) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &cancelDetails{interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type cancelDetails struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (c *cancelDetails) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	res, err := c.Next.ExecuteWorkflow(ctx, in)
	var ce *temporal.CanceledError
	if errors.As(err, &ce) && ce.HasDetails() {
		err = temporal.NewCanceledError()
	}
	return res, err
}
