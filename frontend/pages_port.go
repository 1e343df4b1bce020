package frontend

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
	"github.com/jobgate/jobgate/workflows/jobstate"
)

// The people's job pages (approvals, my jobs) live in frontend/pages; this file is their port
// into the job core: pagesPort implements pages.Jobs over a Frontend, turning the session into
// the principal the policy checks and the store's jobs into the pages' plain data. What differs
// per kind (a succeeded job's result rows and download link) comes from the kind registry
// (servedKind.pageResult), so the pages never branch on a kind's name.

// Names kept for the callers that mount the pages (cmd/app serve, tests): the pages package
// owns them.
const (
	ApprovalMaxAgeDefault = pages.ApprovalMaxAgeDefault
	PathApprovals         = pages.PathApprovals
	PathJobs              = pages.PathJobs
)

// PagePatterns are the net/http.ServeMux patterns PagesHandler serves (pages.JobsPatterns).
func PagePatterns() []string { return pages.JobsPatterns() }

// ApprovalPagePath is the path of a job's request page (pages.ApprovalPath).
func ApprovalPagePath(jobID string) string { return pages.ApprovalPath(jobID) }

// JobPagePath is the path of a job's page in "my jobs" (pages.JobPath).
func JobPagePath(jobID string) string { return pages.JobPath(jobID) }

// PagesHandler serves the people's job pages over f behind sign-in p (pages.JobsHandler):
// approving a sensitive scope needs a sign-in no older than approvalMaxAge (0:
// ApprovalMaxAgeDefault).
func (f *Frontend) PagesHandler(p *pages.Pages, approvalMaxAge time.Duration) http.Handler {
	return p.JobsHandler(pagesPort{f}, approvalMaxAge)
}

// pagesPort is the job core as the pages see it (pages.Jobs).
type pagesPort struct{ f *Frontend }

var _ pages.Jobs = pagesPort{}

func (pp pagesPort) Now() time.Time { return pp.f.Opts.Now() }

func (pp pagesPort) Logger(ctx context.Context) *zap.Logger { return pp.f.Logger(ctx) }

// principalOf is the person of session s as the job core's policy sees them (ok: a valid one).
func principalOf(s handle.Session) (authz.Principal, bool) {
	p := authz.Principal{Tenant: s.Tenant, Subject: s.Subject}
	for _, sc := range s.Scopes {
		if authz.Scope(sc).Known() {
			p.Scopes = append(p.Scopes, authz.Scope(sc))
		}
	}
	return p, p.Valid() == nil
}

// pageError is err as the pages read it: the tool errors a person can act on by their meaning,
// anything else (Temporal unreachable) as it is.
func pageError(err error) error {
	var te *jobcore.ToolError
	if !errors.As(err, &te) {
		return err
	}
	switch te.Code {
	case jobcore.CodeNotFound:
		return &pages.JobsError{Code: pages.ErrNotFound, Message: te.Message}
	case jobcore.CodeInvalidArgument:
		return &pages.JobsError{Code: pages.ErrInvalid, Message: te.Message}
	case jobcore.CodeCursorInvalid, jobcore.CodeCursorExpired:
		return &pages.JobsError{Code: pages.ErrStaleLink, Message: te.Message}
	}
	return err
}

var errPageForbidden = &pages.JobsError{Code: pages.ErrForbidden, Message: "forbidden"}

func (pp pagesPort) Approvals(ctx context.Context, s handle.Session, cursor string) (pages.JobList, error) {
	p, ok := principalOf(s)
	if !ok || !p.Has(authz.ScopeApprove) {
		return pages.JobList{}, errPageForbidden
	}
	out, err := pp.f.ListApprovals(ctx, p, jobcore.ListApprovalsIn{Cursor: cursor})
	if err != nil {
		return pages.JobList{}, pageError(err)
	}
	return pagesList(out), nil
}

func (pp pagesPort) List(ctx context.Context, s handle.Session, cursor string) (pages.JobList, error) {
	p, ok := principalOf(s)
	if !ok || authz.Decide(p, authz.ActionList, authz.Job{}) != authz.Allow {
		return pages.JobList{}, errPageForbidden
	}
	out, err := pp.f.ListJobs(ctx, p, jobcore.ListJobsIn{Cursor: cursor})
	if err != nil {
		return pages.JobList{}, pageError(err)
	}
	return pagesList(out), nil
}

// pagesList is a list page as the pages show its rows: no policy answers (a row links to the
// job's pages, which read the job again).
func pagesList(out *jobcore.ListJobsOut) pages.JobList {
	l := pages.JobList{Next: out.NextCursor}
	for _, js := range out.Jobs {
		l.Jobs = append(l.Jobs, pages.Job{ID: js.JobID, Kind: js.Kind, Owner: js.Owner, Status: string(js.Status),
			Created: js.CreatedAt, Updated: js.UpdatedAt, Progress: pageProgress(js.Progress), Request: pageRequest(js.NeedsInput, js.Owner, "")})
	}
	return l
}

func pageProgress(pr workflows.Progress) pages.Progress {
	return pages.Progress{Done: pr.Done, Total: pr.Total, Unit: pr.Unit, Message: pr.Message}
}

// pageRequest is an open request (nil: none) of a job of tenant; the meaning in words is
// rendered when tenant is set (the request page), not for list rows.
func pageRequest(ni *jobcore.NeedsInputView, owner, tenant string) *pages.Request {
	if ni == nil {
		return nil
	}
	r := &pages.Request{InputID: ni.InputID, ScopeDigest: ni.ScopeDigest, Prompt: ni.Prompt,
		MeaningDigest: workflows.MeaningDigest(ni.Prompt), RequestedBy: ni.RequestedBy, Scope: ni.Scope,
		ExpiresAt: ni.ExpiresAt, Sensitive: len(pages.ScopeStrings(ni.Scope["sensitive_columns"])) > 0}
	if tenant != "" {
		by := r.RequestedBy
		if by == "" {
			by = owner
		}
		r.Meaning = pageMeaning(by, tenant, ni.Scope, ni.Prompt)
	}
	return r
}

// Job reads the job id for s: one of s's tenant that s may read, else not found (the same for
// every reason).
func (pp pagesPort) Job(ctx context.Context, s handle.Session, id string) (*pages.Job, error) {
	p, ok := principalOf(s)
	if !ok || id == "" || len(id) > 1000 || !strings.HasPrefix(id, p.Tenant+"/") || !utf8.ValidString(id) {
		return nil, pageError(jobcore.ErrNotFound())
	}
	j, err := pp.f.Describe(ctx, id)
	if err != nil {
		return nil, pageError(err)
	}
	if j.Tenant != p.Tenant || authz.Decide(p, authz.ActionGet, j.PolicyJob()) == authz.NotFound {
		return nil, pageError(jobcore.ErrNotFound())
	}
	return pp.pageJob(p, j), nil
}

// pageJob is j as the pages show it to p, with the policy's answers for p.
func (pp pagesPort) pageJob(p authz.Principal, j *jobstore.Job) *pages.Job {
	js := pp.f.Summary(p, j)
	v := &pages.Job{ID: j.ID, Kind: j.Kind, Owner: j.Owner, Status: string(js.Status), Created: js.CreatedAt, Updated: js.UpdatedAt,
		Progress: pageProgress(js.Progress), Ref: j,
		MayDecide: authz.Decide(p, authz.ActionResume, j.PolicyJob()) == authz.Allow,
		MayOpen:   authz.Decide(p, authz.ActionGet, workflows.PolicyJob(j.Tenant, j.Owner, nil)) == authz.Allow}
	if !v.MayDecide {
		v.Refusal = authz.ResumeRefusal(p, j.PolicyJob())
	}
	if js.Error != nil {
		v.Error = js.Error.Message + " (" + js.Error.Code + ")"
	}
	if j.Status() == workflows.StatusAwaitingInput && j.NeedsInput != nil {
		v.Request = pageRequest(js.NeedsInput, j.Owner, j.Tenant)
		v.ApprovalLink = js.NeedsInput.Approver == authz.ApproverApprover || v.MayDecide
	}
	return v
}

// coreJob is the store's job the pages read (pages.Job.Ref).
func coreJob(j *pages.Job) (*jobstore.Job, bool) {
	cj, ok := j.Ref.(*jobstore.Job)
	return cj, ok && cj != nil
}

// Result is j's result for s: the kind's rows and download link once succeeded (servedKind.pageResult),
// and the decision record when a rejection ended it.
func (pp pagesPort) Result(ctx context.Context, s handle.Session, pj *pages.Job) pages.Result {
	j, ok := coreJob(pj)
	p, valid := principalOf(s)
	if !ok || !valid {
		return pages.Result{}
	}
	var res pages.Result
	// Each kind's PageResult says what it shows in which status (an eval's episodes while it
	// runs, an export's manifest once it succeeded).
	if authz.Decide(p, authz.ActionGet, j.PolicyJob()) == authz.Allow {
		for _, k := range pp.f.Kinds {
			if k.Name == j.Kind && k.PageResult != nil {
				res = k.PageResult(ctx, p, j)
			}
		}
	}
	if j.Decision != nil { // the job ended by a rejection: who rejected it, how and why
		res.Fields = jobcore.DecisionFields(j.Decision)
	}
	return res
}

// Decide is the one place a page's decision enters the resume path (the same update,
// validator, seal and four-eyes rule as resume_*), recorded as surface "page" signed in with an
// OIDC session, with the session's person (issuer, name, e-mail, auth_time, amr, acr) and the
// meaning the page showed in the sealed decision record: the page has checked that the form's
// meaning_digest is the open request's prompt's in pj, so that prompt is the one displayed.
func (pp pagesPort) Decide(ctx context.Context, s handle.Session, pj *pages.Job, d pages.Decision) (*pages.Job, error) {
	j, ok := coreJob(pj)
	p, valid := principalOf(s)
	if !ok || !valid {
		return nil, pageError(jobcore.ErrNotFound())
	}
	in := jobcore.ResumeIn{InputID: d.InputID, ScopeDigest: d.ScopeDigest, Decision: d.Decision, Comment: d.Comment}
	who := jobcore.AnswererOf(wire.Approver{Issuer: s.Issuer, Name: s.Name, Email: s.Email, AuthTime: s.AuthTime, AMR: s.AMR, ACR: s.ACR,
		Surface: workflows.SurfacePage, SignedInWith: jobcore.SignedInOIDCSession})
	after, err := pp.f.ResumeJob(ctx, p, j, in, who, jobcore.ShownPrompt(j, in.InputID))
	if err != nil {
		var te *jobcore.ToolError
		if errors.As(err, &te) && te.Code != jobcore.CodeUnavailable {
			// The workflow's validator or the policy refused (four eyes, a request answered
			// or changed meanwhile): the page says so over the job as it is now.
			return nil, &pages.JobsError{Code: pages.ErrRefused, Message: te.Message}
		}
		return nil, err
	}
	return pp.pageJob(p, after), nil
}

// ServeDownload serves an export's artifact to the signed-in person through the export kind's
// download rule (principal-bound, signed, short-lived link; the same bare 404s).
func (pp pagesPort) ServeDownload(w http.ResponseWriter, r *http.Request, s handle.Session) {
	f := pp.f
	p, ok := principalOf(s)
	if f.Export == nil {
		http.NotFound(w, r)
		return
	}
	f.Metrics.CountDownloads(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.Export.ServeDownload(f.Core, w, r, p, ok)
	})).ServeHTTP(w, r)
}

// pageMeaning is what approving means, in words: for an export the sentence every surface shows
// and the decision record keeps (jobstate.ExportMeaning), with sensitive columns in <strong> and
// said in words too, e.g. "Allow ana@acme to export id, name and email (sensitive) of customers
// (up to 1,000,000 rows), csv, for 'renewal mailing'"; for other kinds the request's prompt.
func pageMeaning(requestedBy, tenant string, scope map[string]any, prompt string) []pages.MeaningPart {
	m, ok := jobstate.ExportMeaningFromScope(requestedBy, tenant, scope)
	if !ok {
		return []pages.MeaningPart{{Text: prompt}}
	}
	var parts []pages.MeaningPart
	for _, p := range m.Parts() {
		if p.Sensitive {
			p.Text += " (sensitive)" // bold alone is not read out by screen readers
		}
		parts = append(parts, pages.MeaningPart{Text: p.Text, Strong: p.Sensitive})
	}
	return parts
}
