package frontend

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// TestDecide: the pages' entry point sends the same sealed resume as every surface, with the
// approver's identity, surface, sign-in and the meaning shown; a job of another tenant or an
// invalid answer never reaches the store.
func TestDecide(t *testing.T) {
	ms := newMemStore()
	f := newCoreFrontend(t, ms)
	ctx := context.Background()
	j := awaitingJob(t, f, ms, "acme/eval/ana/d", authz.ApproverApprover)
	authAt := time.Date(2030, 1, 1, 11, 58, 7, 500, time.UTC)
	a := wire.Approver{Issuer: "https://idp.acme.example", Name: "Cy", Email: "cy@acme.example", AuthTime: authAt,
		AMR: []string{"pwd"}, ACR: "1", Surface: workflows.SurfacePage, SignedInWith: SignedInOIDCSession}
	ans := wire.Answer{InputID: "approve-1", ScopeDigest: "sha256:d", Decision: workflows.DecisionApprove, Comment: "ok", Meaning: "Approve?"}

	for name, c := range map[string]struct {
		p    authz.Principal
		id   string
		edit func(*wire.Answer)
		code string
	}{
		"other tenant": {authz.Principal{Tenant: "globex", Subject: "gus", Scopes: []authz.Scope{authz.ScopeApprove}}, j.id, nil, CodeNotFound},
		"guessed id":   {coreAppr, "acme/eval/ana/nope", nil, CodeNotFound},
		"no decision":  {coreAppr, j.id, func(a *wire.Answer) { a.Decision = "" }, CodeInvalidArgument},
		"no input_id":  {coreAppr, j.id, func(a *wire.Answer) { a.InputID = "" }, CodeInvalidArgument},
	} {
		in := ans
		if c.edit != nil {
			c.edit(&in)
		}
		_, err := f.Decide(ctx, c.p, a, c.id, in)
		wantCode(t, name, err, c.code)
	}
	if len(ms.resumes) != 0 {
		t.Fatalf("%d refused decisions reached the store", len(ms.resumes))
	}

	st, err := f.Decide(ctx, coreAppr, a, j.id, ans)
	if err != nil || st != workflows.StatusRunning {
		t.Fatalf("Decide = %v, %v", st, err)
	}
	r := ms.resumes[len(ms.resumes)-1].req
	want := workflows.Identity{Issuer: a.Issuer, Name: "Cy", Email: "cy@acme.example", AuthTime: authAt.Truncate(time.Second),
		AMR: []string{"pwd"}, ACR: "1"}
	if f := workflows.IdentityMismatch(want, r.Identity); f != "" || r.Surface != workflows.SurfacePage ||
		r.SignedInWith != SignedInOIDCSession || r.Meaning != "Approve?" || r.Comment != "ok" {
		t.Fatalf("request %+v (identity field %q)", r, f)
	}
	s, err := ResumeVerifier(f.opts.ResumeKeys).OpenResumeSeal(r.Seal, f.opts.Now())
	if err != nil || workflows.IdentityMismatch(s.Identity, r.Identity) != "" || s.MeaningDigest != workflows.MeaningDigest("Approve?") {
		t.Fatalf("seal %+v, %v", s, err)
	}
}

// TestCallIdentityAndSurface: a tool call's token identity and its declared CLI surface reach
// the resume; any other declared surface records "tool".
func TestCallIdentityAndSurface(t *testing.T) {
	c := authz.Claims{Principal: coreAppr, Issuer: "https://idp", Person: authz.Person{Name: "Cy", Email: "cy@x"}}
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "resume_eval"},
		Extra: &mcp.RequestExtra{TokenInfo: tokenInfo(c)}}
	ctx := context.WithValue(context.Background(), callRecordKey{}, &callRecord{req: req})
	if got := callIdentity(ctx); got.Issuer != "https://idp" || got.Name != "Cy" || got.Email != "cy@x" {
		t.Errorf("identity %+v", got)
	}
	if s := callSurface(ctx); s != workflows.SurfaceTool {
		t.Errorf("no _meta: surface %q", s)
	}
	req.Params.Meta = mcp.Meta{MetaSurface: "page"}
	if s := callSurface(ctx); s != workflows.SurfaceTool {
		t.Errorf("declared page: surface %q, want tool (only cli may be declared)", s)
	}
	req.Params.Meta = mcp.Meta{MetaSurface: "cli"}
	if s := callSurface(ctx); s != workflows.SurfaceCLI {
		t.Errorf("declared cli: surface %q", s)
	}
}
