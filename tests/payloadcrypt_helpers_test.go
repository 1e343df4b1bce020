package tests

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/cmd/devtemporal"
	"github.com/jobgate/jobgate/workflows"
)

// A bundle's payload encryption (setup): what its processes, spawned ones and the test's own
// readers of Temporal need to seal and open its payloads.

// sealPayloads gives the bundle payload keys: a new key-encryption key, its data keys in
// store, and the converter (dc) its own clients read and write Temporal with.
func (b *testBundle) sealPayloads(t testing.TB, store string) {
	t.Helper()
	b.kek, b.payloadStore = payloadcrypt.NewLocalKEK(), store
	keys, err := payloadcrypt.Open(context.Background(), b.kek, store, payloadcrypt.Options{})
	must(t, err)
	t.Cleanup(func() { _ = keys.Close() })
	b.dc = payloadcrypt.NewDataConverter(keys.Store)
}

// testPayloadKEK is a payload encryption config of its own (a fresh key-encryption key and key
// store) for a process started outside a bundle: serve and worker refuse to start without one.
func testPayloadKEK(t testing.TB) payloadcrypt.Config {
	return payloadcrypt.Config{KEK: payloadcrypt.NewLocalKEK(), StoreURL: "file://" + t.TempDir()}
}

// payloads is the bundle's payload encryption config (none with setupOpts.clearPayloads).
func (b *testBundle) payloads() payloadcrypt.Config {
	if b.dc == nil {
		return payloadcrypt.Config{}
	}
	return payloadcrypt.Config{KEK: b.kek, StoreURL: b.payloadStore}
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
// (the data keys are in its payload store).
func (b *testBundle) payloadEnv() []string {
	if b.dc == nil {
		return nil
	}
	return []string{"JOBGATE_PAYLOAD_KEK=" + b.kek, "JOBGATE_PAYLOAD_KEY_STORE=" + b.payloadStore}
}

// clientOptions are the options of a client of the bundle's Temporal at addr in namespace ns
// that seals and opens payloads with the bundle's keys.
func (b *testBundle) clientOptions(addr, ns string) client.Options {
	o := client.Options{HostPort: addr, Namespace: ns}
	if b.dc != nil {
		o.DataConverter, o.FailureConverter = b.dc, payloadcrypt.NewFailureConverter(b.dc)
	}
	return o
}

// fileTemporal starts a dev Temporal server of t's own whose SQLite database is a file in dir,
// so a test can read what Temporal stored, as an operator (or a backup) holds it.
func fileTemporal(t *testing.T) (srv *devtemporal.Server, dir string) {
	t.Helper()
	dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devtemporal.Start(ctx, devtemporal.Options{DataDir: dir, UIPort: -1, SearchAttributes: workflows.SearchAttributeTypes()})
	must(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	return srv, dir
}

// dirBytes is every file under dir, concatenated (stop the server first: the WAL too).
func dirBytes(t *testing.T, dir string) []byte {
	t.Helper()
	var all []byte
	must(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		bs, err := os.ReadFile(path)
		all = append(all, bs...)
		return err
	}))
	return all
}
