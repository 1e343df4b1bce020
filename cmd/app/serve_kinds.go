package app

import (
	"context"
	"flag"

	"github.com/jobgate/jobgate/frontend/jobcore"
)

// serveKind is what serve does for one kind: its flags and how it builds its
// frontend.KindSpec from them; and what dev, which runs a worker and a frontend in one
// process, does for it. A kind's own file declares it and serveKinds lists
// it; Flags and build loop over them and never name a kind. A kind without options of its
// own needs no entry: frontend.DefaultKinds serves it with its defaults.
type serveKind struct {
	name string
	// flags registers the kind's flags into c, or into variables of the kind's own (Flags
	// keeps the serveKind it bound for build, so a kind with options needs no ServeConfig
	// field; code configures such a kind through ServeConfig.KindSpecs); nil for none.
	flags func(fs *flag.FlagSet, c *ServeConfig)
	// spec builds the kind's spec from m.Config, opening what it needs; what it opens it
	// hands to m.closeOnExit, so Close releases it. nil for a kind serve does not serve
	// (the conformance fixtures, dev only).
	spec func(ctx context.Context, m *ServeMain) (jobcore.KindSpec, error)
	// devFlags registers the kind's flags of `jobgate dev` into c; nil for none.
	devFlags func(fs *flag.FlagSet, c *DevConfig)
	// dev configures the kind in dev's worker w and frontend s from c; dir is the absolute
	// directory for its dev data (the data dir, or a temp dir when ephemeral). nil for nothing.
	dev func(c DevConfig, dir string, w *WorkerConfig, s *ServeConfig) error
}

// serveKinds are the kinds with serve options of their own.
func serveKinds() []serveKind { return []serveKind{evalServe(), exportServe(), fixtureServe()} }

// kindSpecs builds every kind's spec: one from its flags per serveKind, then c.KindSpecs,
// which replace those of the same name (frontend.DefaultKinds adds every other kind with its
// defaults).
func (m *ServeMain) kindSpecs(ctx context.Context) ([]jobcore.KindSpec, error) {
	kinds := m.Config.kinds
	if kinds == nil {
		kinds = serveKinds()
	}
	var specs []jobcore.KindSpec
	for _, k := range kinds {
		if k.spec == nil {
			continue
		}
		s, err := k.spec(ctx, m)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return jobcore.DefaultKinds(append(specs, m.Config.KindSpecs...)...), nil
}
