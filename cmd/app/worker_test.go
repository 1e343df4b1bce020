package app

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/workflows"
)

// TestWorkerKindsFlag: --kinds takes known kinds, each once; errors and the help default list
// every kind the workflows layer registers.
func TestWorkerKindsFlag(t *testing.T) {
	all := workflows.DefaultKindNames()
	for _, c := range []struct {
		arg     string
		want    []string
		wantErr string
	}{
		{"eval", []string{"eval"}, ""},
		{"export", []string{"export"}, ""},
		{"eval,export", []string{"eval", "export"}, ""},
		{" export , eval ", []string{"export", "eval"}, ""},
		{"evals", nil, `unknown kind "evals" (known: ` + strings.Join(all, ", ") + `)`},
		{"eval,exprot", nil, `unknown kind "exprot"`},
		{"", nil, "empty kind name"},
		{"eval,", nil, "empty kind name"},
		{"eval,eval", nil, `kind "eval" named twice`},
	} {
		var wc WorkerConfig
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		wc.Flags(fs)
		err := fs.Parse([]string{"--kinds", c.arg})
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("--kinds %q: error %v, want %q", c.arg, err, c.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(wc.Kinds, c.want) {
			t.Errorf("--kinds %q: %v, %v; want %v", c.arg, wc.Kinds, err, c.want)
		}
	}

	// Unset: nil, every kind; the help shows that default. The env variable is bound too.
	var wc WorkerConfig
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	wc.Flags(fs)
	if wc.Kinds != nil || fs.Lookup("kinds").DefValue != strings.Join(all, ",") {
		t.Fatalf("default kinds %v, help default %q", wc.Kinds, fs.Lookup("kinds").DefValue)
	}
	t.Setenv("JOBGATE_KINDS", "nope")
	if err := BindEnv(fs); err == nil || !strings.Contains(err.Error(), `JOBGATE_KINDS="nope": kinds "nope": unknown kind "nope"`) {
		t.Fatalf("JOBGATE_KINDS=nope: %v", err)
	}
}

// TestWorkerWithoutExportsRefusesCredentials: a worker not serving exports is the one meant to
// run command episodes without dataset or artifact credentials, so it refuses them at start,
// before dialing Temporal.
func TestWorkerWithoutExportsRefusesCredentials(t *testing.T) {
	for _, c := range []WorkerConfig{
		{Kinds: []string{"eval"}, DatasetsFile: "/etc/jobgate/datasets.json"},
		{Kinds: []string{"eval"}, ArtifactsURL: "file:///tmp/artifacts"},
	} {
		m := &WorkerMain{Config: c}
		err := m.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "--kinds eval") || !strings.Contains(err.Error(), "no dataset or artifact credentials") {
			t.Errorf("%+v: %v", c, err)
		}
		_ = m.Close()
	}
	m := &WorkerMain{Config: WorkerConfig{Kinds: []string{}}}
	if err := m.Run(context.Background()); err == nil || !strings.HasSuffix(err.Error(), "at least one of "+strings.Join(workflows.DefaultKindNames(), ", ")) {
		t.Errorf("no kinds: %v", err)
	}
	m = &WorkerMain{Config: WorkerConfig{Kinds: []string{"eval", "eval"}}}
	if err := m.Run(context.Background()); err == nil || !strings.Contains(err.Error(), `kind "eval" named twice`) {
		t.Errorf("repeated kind: %v", err)
	}
}

// TestWorkerNotifyNeedsPublicURL: a worker with notification endpoints refuses to start
// without an absolute http(s) --public-url, before dialing Temporal (review finding 9);
// without endpoints none is needed.
func TestWorkerNotifyNeedsPublicURL(t *testing.T) {
	dir := t.TempDir()
	tenants := filepath.Join(dir, "tenants.json")
	if err := os.WriteFile(filepath.Join(dir, "s"), []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tenants, []byte(`{"defaults":{},"notify":{"acme":[{"url":"https://hooks.example/x","secret_file":"s"}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, public := range []string{"", "jobgate.example", "/approvals", "ftp://jobgate.example", "https://", "https://u:p@jobgate.example"} {
		m := &WorkerMain{Config: WorkerConfig{Kinds: []string{"eval"}, TenantsFile: tenants, PublicURL: public,
			Temporal: TemporalConfig{Address: "127.0.0.1:1"}}}
		err := m.Run(context.Background())
		if err == nil || !strings.HasPrefix(err.Error(), "--public-url: ") || strings.Contains(err.Error(), "u:p") {
			t.Errorf("public url %q: %v, want a --public-url error", public, err)
		}
		_ = m.Close()
	}
}
