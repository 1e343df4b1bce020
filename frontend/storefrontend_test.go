package frontend

import (
	"bytes"
	"testing"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
)

// unitSecret signs the unit tests' bearer tokens (newStoreFrontend's verifier).
var unitSecret = bytes.Repeat([]byte{1}, 32)

// newStoreFrontend is the unit tests' frontend over store: opts's zero Verifier, Keys,
// ResumeKeys and ResourceURI get the tests' (unitSecret, listTestKeys, resumeTestKeys,
// http://localhost/mcp); everything else is as given.
func newStoreFrontend(t testing.TB, store jobstore.Store, opts jobcore.Options) *Frontend {
	t.Helper()
	if opts.ResourceURI == "" {
		opts.ResourceURI = "http://localhost/mcp"
	}
	if opts.Verifier == nil {
		v, err := authz.NewHS256Verifier("iss", opts.ResourceURI, unitSecret, "")
		if err != nil {
			t.Fatal(err)
		}
		opts.Verifier = v
	}
	if opts.Keys == nil {
		opts.Keys = listTestKeys(t)
	}
	if opts.ResumeKeys == nil {
		opts.ResumeKeys = resumeTestKeys(t)
	}
	f, err := newFrontend(opts, store)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
