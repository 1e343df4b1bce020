package main

import (
	"context"
	"io"
)

// cliKind is what the CLI does for one kind of job beyond the generic view (which every kind
// gets): a kind's own file declares it, and cliKinds lists it. The CLI never tests a kind by
// name anywhere else.
type cliKind struct {
	name string
	// printResult prints a succeeded job's result in the kind's own form; false falls back to
	// indented JSON.
	printResult func(w io.Writer, j *job) bool
	// download: the kind's succeeded jobs have a file `jobgate jobs download` fetches.
	download bool
	// printMore prints what `jobs get` shows of the job beyond its view, read with more calls
	// (an eval's score distribution); nil for nothing.
	printMore func(ctx context.Context, cl *client, w io.Writer, j *job)
}

// cliKinds are the kinds with CLI behaviour of their own.
func cliKinds() []cliKind { return []cliKind{exportCLI(), evalCLI()} }

// cliKindOf is kind's CLI behaviour; the zero cliKind (generic view only) for any other kind.
func cliKindOf(kind string) cliKind {
	for _, k := range cliKinds() {
		if k.name == kind {
			return k
		}
	}
	return cliKind{name: kind}
}
