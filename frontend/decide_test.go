package frontend

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/handle/resumeseal"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/workflows"
)

// TestDecideFromPage: the pages' entry point (pagesPort.Decide) sends the same sealed resume as every surface,
// with the session's identity (auth_time sealed to the second), surface, sign-in and the open
// request's prompt as the meaning shown (the page checked the form's meaning_digest against it).
func TestDecideFromPage(t *testing.T) {
	ms := memstore.New()
	f := newCoreFrontend(t, ms)
	ctx := context.Background()
	j := awaitingJob(t, f, ms, "acme/eval/ana/d", authz.ApproverApprover)
	authAt := time.Date(2030, 1, 1, 11, 58, 7, 500, time.UTC)
	s := handle.Session{Issuer: "https://idp.acme.example", Name: "Cy", Email: "cy@acme.example", AuthTime: authAt,
		AMR: []string{"pwd"}, ACR: "1", Tenant: coreAppr.Tenant, Subject: coreAppr.Subject, Scopes: authz.ScopeStrings(coreAppr.Scopes)}
	if _, err := (pagesPort{f}).Decide(ctx, s, &pages.Job{Ref: j}, pages.Decision{InputID: "approve-1", ScopeDigest: "sha256:d",
		Decision: workflows.DecisionApprove, Comment: "ok"}); err != nil {
		t.Fatal(err)
	}
	r := ms.Resumes[len(ms.Resumes)-1].Req
	want := workflows.Identity{Issuer: s.Issuer, Name: "Cy", Email: "cy@acme.example", AuthTime: authAt.Truncate(time.Second),
		AMR: []string{"pwd"}, ACR: "1"}
	if f := workflows.IdentityMismatch(want, r.Identity); f != "" || r.Surface != workflows.SurfacePage ||
		r.SignedInWith != jobcore.SignedInOIDCSession || r.Meaning != "Approve?" || r.Comment != "ok" {
		t.Fatalf("request %+v (identity field %q)", r, f)
	}
	seal, err := resumeseal.Verifier(f.Opts.ResumeKeys).OpenResumeSeal(r.Seal, f.Opts.Now())
	if err != nil || workflows.IdentityMismatch(seal.Identity, r.Identity) != "" || seal.MeaningDigest != workflows.MeaningDigest("Approve?") {
		t.Fatalf("seal %+v, %v", seal, err)
	}
}

// TestCallIdentityAndSurface: a tool call's token identity and its declared CLI surface reach
// the resume; any other declared surface records "tool".
func TestCallIdentityAndSurface(t *testing.T) {
	c := authz.Claims{Principal: coreAppr, Issuer: "https://idp", Person: authz.Person{Name: "Cy", Email: "cy@x"}}
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "resume_eval"},
		Extra: &mcp.RequestExtra{TokenInfo: tokenInfo(c)}}
	ctx := context.WithValue(context.Background(), jobcore.CallRecordKey{}, &jobcore.CallRecord{Req: req})
	if got := jobcore.CallIdentity(ctx); got.Issuer != "https://idp" || got.Name != "Cy" || got.Email != "cy@x" {
		t.Errorf("identity %+v", got)
	}
	if s := jobcore.CallSurface(ctx); s != workflows.SurfaceTool {
		t.Errorf("no _meta: surface %q", s)
	}
	req.Params.Meta = mcp.Meta{jobcore.MetaSurface: "page"}
	if s := jobcore.CallSurface(ctx); s != workflows.SurfaceTool {
		t.Errorf("declared page: surface %q, want tool (only cli may be declared)", s)
	}
	req.Params.Meta = mcp.Meta{jobcore.MetaSurface: "cli"}
	if s := jobcore.CallSurface(ctx); s != workflows.SurfaceCLI {
		t.Errorf("declared cli: surface %q", s)
	}
}
