package app

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// TestServeKinds: every kind serve has options for is a workflows kind, listed once, and its
// flags land in ServeConfig (and dev's in DevConfig).
func TestServeKinds(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range serveKinds() {
		if _, ok := workflows.LookupKind(k.name); !ok || seen[k.name] {
			t.Errorf("serveKinds: %q is not a workflows kind, or is listed twice", k.name)
		}
		seen[k.name] = true
	}
	var c ServeConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Flags(fs)
	if err := fs.Parse([]string{"--suites", "s.json", "--datasets", "d.json", "--artifacts", "file:///a", "--download-ttl", "1m"}); err != nil {
		t.Fatal(err)
	}
	if c.SuitesFile != "s.json" || c.DatasetsFile != "d.json" || c.ArtifactsURL != "file:///a" || c.DownloadTTL != time.Minute {
		t.Errorf("serve kind flags: %+v", c)
	}
	if len(c.kinds) != len(serveKinds()) {
		t.Errorf("Flags kept %d serve kinds for build, want %d", len(c.kinds), len(serveKinds()))
	}
	var d DevConfig
	fs = flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	d.Flags(fs)
	if err := fs.Parse([]string{"--suites", "s.json", "--datasets", "d.json", "--artifacts", "file:///a"}); err != nil {
		t.Fatal(err)
	}
	if d.SuitesFile != "s.json" || d.DatasetsFile != "d.json" || d.ArtifactsURL != "file:///a" {
		t.Errorf("dev kind flags: %+v", d)
	}
}

// TestServeKindSpecs: serve builds each kind from its fields, serves every other kind with
// its defaults, lets KindSpecs replace a kind, and releases what a kind opened.
func TestServeKindSpecs(t *testing.T) {
	ctx := context.Background()
	m := &ServeMain{Config: ServeConfig{SuitesFile: "/nonexistent/suites.json"}}
	if _, err := m.kindSpecs(ctx); err == nil || !strings.Contains(err.Error(), "/nonexistent/suites.json") {
		t.Fatalf("a broken --suites: %v", err)
	}

	mine := jobcore.EvalKind(jobcore.EvalOptions{Suites: contract.DefaultCatalog()})
	m = &ServeMain{Config: ServeConfig{ArtifactsURL: "file://" + t.TempDir(), KindSpecs: []jobcore.KindSpec{mine}}}
	specs, err := m.kindSpecs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name())
	}
	if !slices.Equal(names, workflows.DefaultKindNames()) {
		t.Errorf("kinds %v, want every kind once: %v", names, workflows.DefaultKindNames())
	}
	if i := slices.Index(names, workflows.KindEval); i < 0 || specs[i] != mine {
		t.Errorf("KindSpecs did not replace the eval kind built from the flags")
	}
	if len(m.closers) != 1 {
		t.Fatalf("the export kind opened its artifact store: %d closers, want 1", len(m.closers))
	}
	if err := m.Close(); err != nil || m.closers != nil {
		t.Errorf("Close: %v, closers left %d", err, len(m.closers))
	}

	// build reads the kinds Flags bound, whose options may live in the kind's own variables.
	m = &ServeMain{Config: ServeConfig{kinds: []serveKind{{name: workflows.KindEval,
		spec: func(context.Context, *ServeMain) (jobcore.KindSpec, error) { return mine, nil }}}}}
	if specs, err = m.kindSpecs(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(specs, mine) {
		t.Errorf("kindSpecs did not build the kinds Flags bound")
	}
}
