package app

import (
	"context"
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// TestConformanceFixturesDevOnly: only `jobgate dev --conformance-fixtures` serves the fixture
// kind. serve and worker have no such flag, serve's kinds never include it, --kinds does not
// know it, and dev without the flag registers nothing of it.
func TestConformanceFixturesDevOnly(t *testing.T) {
	var sc ServeConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sc.Flags(fs)
	if err := fs.Parse([]string{"--conformance-fixtures"}); err == nil {
		t.Error("serve accepted --conformance-fixtures")
	}
	var wc WorkerConfig
	fs = flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	wc.Flags(fs)
	if err := fs.Parse([]string{"--conformance-fixtures"}); err == nil {
		t.Error("worker accepted --conformance-fixtures")
	}
	if _, err := ParseKinds(workflows.KindFixture); err == nil {
		t.Error("--kinds accepted the fixture kind")
	}
	m := &ServeMain{Config: ServeConfig{ArtifactsURL: "file://" + t.TempDir()}}
	specs, err := m.kindSpecs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Name() == workflows.KindFixture {
			t.Error("serve serves the fixture kind")
		}
	}
	_ = m.Close()

	for _, on := range []bool{false, true} {
		var dc DevConfig
		fs = flag.NewFlagSet("dev", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		dc.Flags(fs)
		args := []string{}
		if on {
			args = append(args, "--conformance-fixtures")
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if dc.ConformanceFixtures != on {
			t.Fatalf("dev %v: ConformanceFixtures %v", args, dc.ConformanceFixtures)
		}
		var w WorkerConfig
		var s ServeConfig
		i := slices.IndexFunc(dc.kinds, func(k serveKind) bool { return k.name == workflows.KindFixture })
		if i < 0 {
			t.Fatal("dev has no fixture kind")
		}
		if err := dc.kinds[i].dev(dc, t.TempDir(), &w, &s); err != nil {
			t.Fatal(err)
		}
		served := slices.ContainsFunc(s.KindSpecs, func(k jobcore.KindSpec) bool { return k.Name() == workflows.KindFixture })
		registered := slices.Contains(w.devKinds, workflows.KindFixture)
		if registered != on || served != on {
			t.Errorf("dev %v: worker registers fixtures %v, frontend serves them %v; want %v", args, registered, served, on)
		}
	}
}
