package tests

import (
	"testing"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
)

// A bundle's payload encryption (setup): what its processes, spawned ones and the test's own
// readers of Temporal need to seal and open its payloads.

// payloads is the bundle's payload encryption config (none with setupOpts.clearPayloads).
func (b *testBundle) payloads() payloadcrypt.Config {
	if b.dc == nil {
		return payloadcrypt.Config{}
	}
	return payloadcrypt.Config{KEK: b.kek, StoreURL: b.artifacts}
}

// converter decodes what the bundle's processes wrote to Temporal (sealed or clear).
func (b *testBundle) converter() converter.DataConverter {
	if b.dc == nil {
		return converter.GetDefaultDataConverter()
	}
	return b.dc
}

// replayer replays histories the bundle's processes wrote (decoding with its payload keys).
func (b *testBundle) replayer(t testing.TB) worker.WorkflowReplayer {
	t.Helper()
	o := worker.WorkflowReplayerOptions{}
	if b.dc != nil {
		o.DataConverter, o.FailureConverter = b.dc, payloadcrypt.NewFailureConverter(b.dc)
		o.Interceptors = []interceptor.WorkerInterceptor{payloadcrypt.WorkerInterceptor()} // as the workers have it
	}
	r, err := worker.NewWorkflowReplayerWithOptions(o)
	must(t, err)
	return r
}

// payloadEnv is the environment giving a spawned serve or worker the bundle's payload keys
// (the data keys are in the artifact store, JOBGATE_ARTIFACTS).
func (b *testBundle) payloadEnv() []string {
	if b.dc == nil {
		return nil
	}
	return []string{"JOBGATE_PAYLOAD_KEK=" + b.kek, "JOBGATE_PAYLOAD_KEY_STORE=" + b.artifacts}
}
