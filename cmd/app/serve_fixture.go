package app

import (
	"flag"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// fixtureServe is the conformance fixtures' kind (frontend/fixture.go), in dev only:
// `jobgate dev --conformance-fixtures` registers it in dev's worker and serves its tools. It
// has no serve flag and no serve spec, so `jobgate serve` never serves it (and refuses the
// flag), and `jobgate worker --kinds` does not know it.
func fixtureServe() serveKind {
	return serveKind{name: workflows.KindFixture,
		devFlags: func(fs *flag.FlagSet, c *DevConfig) {
			fs.BoolVar(&c.ConformanceFixtures, "conformance-fixtures", false,
				"also serve the MCP conformance suite's Tasks fixtures (greet, slow_compute, failing_job, protocol_error_job, confirm_delete, multi_input, test_tool_with_task) as jobs of the fixture kind; for running the suite, never for users")
		},
		dev: func(c DevConfig, _ string, w *WorkerConfig, s *ServeConfig) error {
			if c.ConformanceFixtures {
				w.devKinds = append(w.devKinds, workflows.KindFixture)
				s.KindSpecs = append(s.KindSpecs, jobcore.FixtureKind())
			}
			return nil
		}}
}
