package frontend

import (
	"bytes"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle/resumeseal"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/workflows"
)

// TestUIURLFor: ui_url goes to jobs:admin holders by default, to everyone with "all", to nobody
// with "none" (or without a UI base URL); anything else is a configuration error.
func TestUIURLFor(t *testing.T) {
	v, err := authz.NewHS256Verifier("iss", "http://localhost/mcp", bytes.Repeat([]byte{1}, 32), "")
	if err != nil {
		t.Fatal(err)
	}
	admin := authz.Principal{Tenant: "acme", Subject: "ops", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}}
	j := &jobstore.Job{ID: "acme/eval/a", RunID: "r1", Tenant: "acme", Owner: "ana", Kind: "eval"}
	const want = "http://ui.test/namespaces/default/workflows/acme%2Feval%2Fa/r1/history"
	for _, c := range []struct {
		for_, base         string
		anaGets, adminGets bool
	}{
		{"", "http://ui.test", false, true},
		{jobcore.UIURLForAdmin, "http://ui.test", false, true},
		{jobcore.UIURLForAll, "http://ui.test", true, true},
		{jobcore.UIURLForNone, "http://ui.test", false, false},
		{jobcore.UIURLForAll, "", false, false},
	} {
		f, err := newFrontend(jobcore.Options{Verifier: v, Keys: listTestKeys(t), ResumeKeys: resumeTestKeys(t),
			ResourceURI: "http://localhost/mcp", UIBaseURL: c.base, UIURLFor: c.for_, Now: func() time.Time { return listNow }}, memstore.New())
		if err != nil {
			t.Fatal(err)
		}
		for _, pc := range []struct {
			p    authz.Principal
			gets bool
		}{{listAna, c.anaGets}, {admin, c.adminGets}} {
			got := f.Summary(pc.p, j).UIURL
			if (got == want) != pc.gets || (got != "" && got != want) {
				t.Errorf("UIURLFor %q base %q, %s: ui_url %q, want it: %v", c.for_, c.base, pc.p.Subject, got, pc.gets)
			}
		}
	}
	if _, err := newFrontend(jobcore.Options{Verifier: v, Keys: listTestKeys(t), ResumeKeys: resumeTestKeys(t),
		ResourceURI: "http://localhost/mcp", UIURLFor: "admins"}, memstore.New()); err == nil {
		t.Error("UIURLFor \"admins\" accepted")
	}
	if _, err := newFrontend(jobcore.Options{Verifier: v, Keys: listTestKeys(t),
		ResourceURI: "http://localhost/mcp"}, memstore.New()); err == nil {
		t.Error("a frontend without ResumeKeys was built")
	}
}

// TestResumeVerifier: what the frontend seals, the workers' verifier opens to the same values;
// another ring's seal and an expired one are errors.
func TestResumeVerifier(t *testing.T) {
	keys := resumeTestKeys(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove, authz.ScopeRead}}
	seal := resumeseal.Seal(keys, "acme/export/q3", "r1", workflows.ResumeRequest{Principal: p, InputID: "approve-1",
		ScopeDigest: "sha256:ab", Decision: workflows.DecisionApprove, Comment: "fine", Surface: workflows.SurfaceMRTR,
		SignedInWith: workflows.SignedInBearerJWT, Meaning: "Allow ann@acme to export id of customers",
		Identity: workflows.Identity{Issuer: "https://idp", Name: "Stew", Email: "s@acme.example",
			AuthTime: now.Add(-time.Minute), AMR: []string{"pwd"}, ACR: "1"}}, now.Add(jobcore.ResumeSealTTL))
	got, err := resumeseal.Verifier(keys).OpenResumeSeal(seal, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.WorkflowID != "acme/export/q3" || got.RunID != "r1" || got.Principal.Subject != "steward" ||
		len(got.Principal.Scopes) != 2 || got.Principal.Scopes[1] != authz.ScopeRead ||
		got.CommentDigest != workflows.CommentDigest("fine") || got.Surface != workflows.SurfaceMRTR ||
		got.MeaningDigest != workflows.MeaningDigest("Allow ann@acme to export id of customers") ||
		workflows.IdentityMismatch(got.Identity, workflows.Identity{Issuer: "https://idp", Name: "Stew", Email: "s@acme.example",
			AuthTime: now.Add(-time.Minute), AMR: []string{"pwd"}, ACR: "1"}) != "" {
		t.Errorf("opened %+v", got)
	}
	if _, err := resumeseal.Verifier(keys).OpenResumeSeal(seal, now.Add(jobcore.ResumeSealTTL)); err == nil {
		t.Error("an expired seal opened")
	}
	if _, err := resumeseal.Verifier(listTestKeys(t)).OpenResumeSeal(seal, now); err == nil {
		t.Error("the handle keys opened a resume seal")
	}
}
