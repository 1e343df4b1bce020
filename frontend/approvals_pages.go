package frontend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// ApprovalMaxAgeDefault is how recent a person's sign-in must be to approve a sensitive scope
// in the pages when PagesHandler is given no max age: five minutes.
const ApprovalMaxAgeDefault = 5 * time.Minute

// Paths of the people's pages (PagesHandler).
const (
	PathApprovals = "/approvals"
	PathJobs      = "/jobs"
	// pathPageDownload + token serves an export's artifact to a signed-in person.
	pathPageDownload = "/jobs/download/"
)

// PageSessions is browser sign-in (*pages.Pages): the people's pages run behind its
// RequireSession, which puts the session where pages.SessionFrom reads it.
type PageSessions interface {
	RequireSession(maxAge time.Duration, next http.Handler) http.Handler
}

// PagePatterns are the net/http.ServeMux patterns PagesHandler serves.
func PagePatterns() []string {
	return []string{"GET " + PathApprovals, "GET " + PathApprovals + "/{job}", "POST " + PathApprovals + "/{job}",
		"GET " + PathJobs, "GET " + PathJobs + "/{job}", "GET " + pathPageDownload + "{token}"}
}

// ApprovalPagePath is the path of a job's request page (for deep links in notifications):
// the job ID is one escaped path segment.
func ApprovalPagePath(jobID string) string { return PathApprovals + "/" + url.PathEscape(jobID) }

// JobPagePath is the path of a job's page in "my jobs".
func JobPagePath(jobID string) string { return PathJobs + "/" + url.PathEscape(jobID) }

// pagesFE are the people's pages over a frontend.
type pagesFE struct {
	f        *Frontend
	sessions PageSessions
	maxAge   time.Duration
}

// PagesHandler serves the people's pages (PagePatterns) behind sessions: the approvals inbox
// (GET /approvals), a request page with its decision form (GET and POST /approvals/{job}),
// "my jobs" (GET /jobs, GET /jobs/{job}) and the artifact download of the job page. Approving
// a request with sensitive columns needs a sign-in no older than approvalMaxAge (0:
// ApprovalMaxAgeDefault). Every job the person may not see is the same 404 as a missing one.
func (f *Frontend) PagesHandler(sessions PageSessions, approvalMaxAge time.Duration) http.Handler {
	if approvalMaxAge <= 0 {
		approvalMaxAge = ApprovalMaxAgeDefault
	}
	pf := &pagesFE{f: f, sessions: sessions, maxAge: approvalMaxAge}
	mux := http.NewServeMux()
	wrap := func(h http.HandlerFunc) http.Handler { return sessions.RequireSession(0, h) }
	mux.Handle("GET "+PathApprovals, wrap(pf.inbox))
	mux.Handle("GET "+PathApprovals+"/{job}", wrap(pf.request))
	mux.Handle("POST "+PathApprovals+"/{job}", wrap(pf.decide))
	mux.Handle("GET "+PathJobs, wrap(pf.myJobs))
	mux.Handle("GET "+PathJobs+"/{job}", wrap(pf.jobPage))
	mux.Handle("GET "+pathPageDownload+"{token}", wrap(pf.download))
	return pages.SecurityHeaders(mux)
}

// principalOf is the person of the request's session as the job core's policy sees them.
func principalOf(r *http.Request) (handle.Session, authz.Principal, bool) {
	s, ok := pages.SessionFrom(r.Context())
	if !ok {
		return s, authz.Principal{}, false
	}
	p := authz.Principal{Tenant: s.Tenant, Subject: s.Subject}
	for _, sc := range s.Scopes {
		if authz.Scope(sc).Known() {
			p.Scopes = append(p.Scopes, authz.Scope(sc))
		}
	}
	return s, p, p.Valid() == nil
}

// notFoundMsg is the whole 404 page: a missing job, another tenant's, one the person may not
// see, and a request already answered (for a person who could only see it while it was open)
// all read the same, byte for byte.
const notFoundMsg = "There is no such request or job for you: it does not exist, it is not yours to see, or it was already answered."

func (pf *pagesFE) notFound(w http.ResponseWriter) {
	pf.render(w, http.StatusNotFound, "message", pageView{Title: "Not found", Message: notFoundMsg})
}

// failPage answers an error of the job core: a tool error by its message, anything else
// (Temporal unreachable) as 503 with the detail in the log only.
func (pf *pagesFE) failPage(w http.ResponseWriter, r *http.Request, err error) {
	var te *ToolError
	if errors.As(err, &te) {
		switch te.Code {
		case CodeNotFound:
			pf.notFound(w)
			return
		case CodeInvalidArgument:
			pf.render(w, http.StatusBadRequest, "message", pageView{Title: "Bad request", Message: te.Message})
			return
		case CodeCursorInvalid, CodeCursorExpired:
			// The tool's message names tool arguments; a person follows links.
			pf.render(w, http.StatusBadRequest, "message", pageView{Title: "Page link out of date",
				Message: "This page link is out of date or was made for someone else; start again from the first page."})
			return
		}
	}
	pf.f.logger(r.Context()).Warn("page: job store", zap.String("path", r.URL.Path), zap.Error(err))
	pf.render(w, http.StatusServiceUnavailable, "message", pageView{Title: "Try again later",
		Message: "The job store cannot be reached right now; reload the page in a moment."})
}

// pageJob reads the job of the request's {job} for p: one of p's tenant that p may read with
// action a, else errNotFound (the same for every reason).
func (pf *pagesFE) pageJob(ctx context.Context, r *http.Request, p authz.Principal, a authz.Action) (*jobstore.Job, error) {
	id := r.PathValue("job")
	if id == "" || len(id) > 1000 || !strings.HasPrefix(id, p.Tenant+"/") || !utf8.ValidString(id) {
		return nil, errNotFound()
	}
	j, err := pf.f.describe(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.Tenant != p.Tenant || authz.Decide(p, a, j.PolicyJob()) == authz.NotFound {
		return nil, errNotFound()
	}
	return j, nil
}

func (pf *pagesFE) inbox(w http.ResponseWriter, r *http.Request) {
	s, p, ok := principalOf(r)
	if !ok || !p.Has(authz.ScopeApprove) {
		pf.render(w, http.StatusForbidden, "message", pageView{Title: "Approvals", Session: &s,
			Message: "Approving needs the jobs:approve scope, which your sign-in does not carry."})
		return
	}
	out, err := pf.f.listApprovals(r.Context(), p, ListApprovalsIn{Cursor: r.URL.Query().Get("cursor")})
	if err != nil {
		pf.failPage(w, r, err)
		return
	}
	v := pageView{Title: "Approvals waiting for you", Session: &s}
	now := pf.f.opts.Now()
	for _, js := range out.Jobs {
		if js.NeedsInput == nil {
			continue
		}
		v.Rows = append(v.Rows, requestRowOf(js, now))
	}
	if out.NextCursor != "" {
		v.Next = PathApprovals + "?" + url.Values{"cursor": {out.NextCursor}}.Encode()
	}
	pf.render(w, http.StatusOK, "inbox", v)
}

// openJob is every job page's start: the signed-in person and the job the URL names, which
// they may read; on false it has answered (the one 404, or the job's error page).
func (pf *pagesFE) openJob(w http.ResponseWriter, r *http.Request) (handle.Session, authz.Principal, *jobstore.Job, bool) {
	s, p, ok := principalOf(r)
	if !ok {
		pf.notFound(w)
		return s, p, nil, false
	}
	j, err := pf.pageJob(r.Context(), r, p, authz.ActionGet)
	if err != nil {
		pf.failPage(w, r, err)
		return s, p, nil, false
	}
	return s, p, j, true
}

func (pf *pagesFE) request(w http.ResponseWriter, r *http.Request) {
	s, p, j, ok := pf.openJob(w, r)
	if !ok {
		return
	}
	if j.Status() == workflows.StatusAwaitingInput && j.NeedsInput != nil && sensitive(j.NeedsInput) &&
		authz.Decide(p, authz.ActionResume, j.PolicyJob()) == authz.Allow {
		// Show a sensitive scope's form only after a fresh sign-in, so the approval it sends is
		// not refused for an old one (RequireSession sends the browser to the provider with
		// prompt=login&max_age= and back here).
		pf.sessions.RequireSession(pf.maxAge, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			pf.renderRequest(w, http.StatusOK, s, p, j, "", typedComment(r))
		})).ServeHTTP(w, r)
		return
	}
	pf.renderRequest(w, http.StatusOK, s, p, j, "", typedComment(r))
}

// typedComment is the comment a re-login link carries back (?comment=, see
// renderRequestReLogin) to pre-fill the form: text the person typed, shown to them before they
// decide, never sent by itself. Over commentMax it is dropped.
func typedComment(r *http.Request) string {
	c := strings.TrimSpace(r.URL.Query().Get("comment"))
	if !utf8.ValidString(c) || utf8.RuneCountInString(c) > commentMax {
		return ""
	}
	return c
}

// reLoginPathMax bounds a re-login link: the sign-in returns only to paths up to 1024 bytes
// (frontend/pages), so a longer comment stays on the re-rendered page instead of in the link.
const reLoginPathMax = 1000

// renderRequestReLogin answers an approval whose sign-in is too old: 403, the request as it is
// now with the typed comment kept, and a "sign in again" link back to this request page.
func (pf *pagesFE) renderRequestReLogin(w http.ResponseWriter, s handle.Session, p authz.Principal, j *jobstore.Job, comment string) {
	link := ApprovalPagePath(j.ID)
	age := pf.maxAge.String()
	if pf.maxAge%time.Minute == 0 {
		age = fmt.Sprintf("%d minutes", int(pf.maxAge/time.Minute))
	}
	msg := fmt.Sprintf("Approving this request needs a sign-in from the last %s; yours is older. Nothing was decided. Sign in again with the link below: it brings you back to this request", age)
	withComment := link + "?" + url.Values{"comment": {comment}}.Encode()
	if comment != "" && len(withComment) <= reLoginPathMax {
		link, msg = withComment, msg+" with your comment filled in."
	} else if comment != "" {
		msg += "; copy your comment first, it is too long to carry along."
	} else {
		msg += "."
	}
	pf.renderRequestWith(w, http.StatusForbidden, s, p, j, msg, comment, link)
}

// decide: POST /approvals/{job} with csrf, input_id, scope_digest, meaning_digest (of the
// prompt the page displayed), decision and comment.
func (pf *pagesFE) decide(w http.ResponseWriter, r *http.Request) {
	s, p, j, ok := pf.openJob(w, r)
	if !ok {
		return
	}
	in := ResumeIn{InputID: r.PostFormValue("input_id"), ScopeDigest: r.PostFormValue("scope_digest"),
		Decision: r.PostFormValue("decision"), Comment: strings.TrimSpace(r.PostFormValue("comment"))}
	ni := j.NeedsInput
	switch {
	case j.Status() != workflows.StatusAwaitingInput || ni == nil:
		// A replayed or second form: the request is answered; nothing is sent.
		pf.renderRequest(w, http.StatusConflict, s, p, j, "This request was already answered or is no longer open; nothing was changed.", "")
		return
	case in.InputID != ni.InputID || in.ScopeDigest != ni.ScopeDigest ||
		r.PostFormValue("meaning_digest") != workflows.MeaningDigest(ni.Prompt):
		// The page was opened on another request, scope or wording: never approve what is no
		// longer asked, and never record as "shown" a meaning the page did not show (the
		// record's prompt is the open request's; the form carries the digest of the one it
		// displayed). Show what is asked now, keeping the typed comment.
		pf.renderRequest(w, http.StatusConflict, s, p, j, "The request changed since you opened this page. Nothing was decided: review the scope below as it is now, then decide again.", in.Comment)
		return
	case in.Decision != workflows.DecisionApprove && in.Decision != workflows.DecisionReject:
		pf.renderRequest(w, http.StatusBadRequest, s, p, j, "Choose Approve or Reject.", in.Comment)
		return
	case in.Decision == workflows.DecisionReject && in.Comment == "":
		pf.renderRequest(w, http.StatusBadRequest, s, p, j, "A comment is required to reject: tell the requester why.", in.Comment)
		return
	case utf8.RuneCountInString(in.Comment) > commentMax:
		pf.renderRequest(w, http.StatusBadRequest, s, p, j, "The comment is too long (at most 1000 characters).", in.Comment)
		return
	}
	if d := authz.Decide(p, authz.ActionResume, j.PolicyJob()); d != authz.Allow {
		pf.renderRequest(w, http.StatusForbidden, s, p, j, authz.ResumeRefusal(p, j.PolicyJob())+".", "")
		return
	}
	if in.Decision == workflows.DecisionApprove && sensitive(ni) {
		if !pages.FreshEnough(s.AuthTime, pf.f.opts.Now(), pf.maxAge) {
			// A form left open past the max age: decide nothing, keep what was typed, and offer
			// a sign-in that comes back to this request (a GET: reloading this answer would only
			// re-send the form). The comment rides along in the link when it fits.
			pf.renderRequestReLogin(w, s, p, j, in.Comment)
			return
		}
		// Approving a sensitive scope needs a recent sign-in; RequireSession checks it again
		// (the same rule) as the last word before anything is sent.
		pf.sessions.RequireSession(pf.maxAge, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			pf.send(w, r, s, p, j, in)
		})).ServeHTTP(w, r)
		return
	}
	pf.send(w, r, s, p, j, in)
}

// send delivers the page's decision and shows the outcome.
func (pf *pagesFE) send(w http.ResponseWriter, r *http.Request, s handle.Session, p authz.Principal, j *jobstore.Job, in ResumeIn) {
	after, err := pf.f.decideFromPage(r.Context(), s, p, j, in)
	if err != nil {
		var te *ToolError
		if !errors.As(err, &te) || te.Code == CodeUnavailable {
			pf.failPage(w, r, err)
			return
		}
		// The workflow's validator refused (four eyes, a request answered or changed meanwhile):
		// its message, over the job as it is now.
		now, derr := pf.pageJob(r.Context(), r, p, authz.ActionGet)
		if derr != nil {
			pf.failPage(w, r, derr)
			return
		}
		pf.renderRequest(w, http.StatusConflict, s, p, now, "Not decided: "+te.Message+".", "")
		return
	}
	v := pageView{Title: "Decision recorded", Session: &s, Job: pf.jobViewOf(r.Context(), p, after)}
	if in.Decision == workflows.DecisionApprove {
		v.Notice = "You approved this request. The job continues; its owner is told through the job's status."
	} else {
		v.Notice = "You rejected this request. The job ends as rejected; your comment is recorded."
	}
	v.Decision, v.Comment = in.Decision, in.Comment
	pf.render(w, http.StatusOK, "outcome", v)
}

// decideFromPage is the one place a page's decision enters the resume path (the same update,
// validator, seal and four-eyes rule as resume_*), recorded as surface "page" signed in with an
// OIDC session, with the session's person (issuer, name, e-mail, auth_time, amr, acr) and the
// meaning the page showed in the sealed decision record: decide has checked that the form's
// meaning_digest is the open request's prompt's, so that prompt is the one displayed.
func (f *Frontend) decideFromPage(ctx context.Context, s handle.Session, p authz.Principal, j *jobstore.Job, in ResumeIn) (*jobstore.Job, error) {
	who := answererOf(wire.Approver{Issuer: s.Issuer, Name: s.Name, Email: s.Email, AuthTime: s.AuthTime, AMR: s.AMR, ACR: s.ACR,
		Surface: workflows.SurfacePage, SignedInWith: SignedInOIDCSession})
	return f.resumeJob(ctx, p, j, in, who, shownPrompt(j, in.InputID))
}

func (pf *pagesFE) myJobs(w http.ResponseWriter, r *http.Request) {
	s, p, ok := principalOf(r)
	if !ok || authz.Decide(p, authz.ActionList, authz.Job{}) != authz.Allow {
		pf.render(w, http.StatusForbidden, "message", pageView{Title: "My jobs", Session: &s,
			Message: "Listing jobs needs the jobs:read scope, which your sign-in does not carry."})
		return
	}
	out, err := pf.f.listJobs(r.Context(), p, ListJobsIn{Cursor: r.URL.Query().Get("cursor")})
	if err != nil {
		pf.failPage(w, r, err)
		return
	}
	v := pageView{Title: "My jobs", Session: &s}
	for _, js := range out.Jobs {
		v.JobRows = append(v.JobRows, jobRowOf(js))
	}
	if out.NextCursor != "" {
		v.Next = PathJobs + "?" + url.Values{"cursor": {out.NextCursor}}.Encode()
	}
	pf.render(w, http.StatusOK, "jobs", v)
}

func (pf *pagesFE) jobPage(w http.ResponseWriter, r *http.Request) {
	s, p, j, ok := pf.openJob(w, r)
	if !ok {
		return
	}
	pf.render(w, http.StatusOK, "job", pageView{Title: "Job", Session: &s, Job: pf.jobViewOf(r.Context(), p, j)})
}

// download serves an export's artifact to the signed-in person through the export kind's
// download rule (principal-bound, signed, short-lived link; the same bare 404s).
func (pf *pagesFE) download(w http.ResponseWriter, r *http.Request) {
	_, p, ok := principalOf(r)
	if pf.f.export == nil {
		http.NotFound(w, r)
		return
	}
	pf.f.metrics.CountDownloads(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pf.f.export.serveDownload(pf.f, w, r, p, ok)
	})).ServeHTTP(w, r)
}

// pageDownloadPath seals a download link to job j's artifact for p, or "" when p may not
// download it or there is none.
func (pf *pagesFE) pageDownloadPath(p authz.Principal, j *jobstore.Job, m exportManifestRef) string {
	k := pf.f.export
	now := pf.f.opts.Now()
	if k == nil || k.opts.Artifacts == nil || !now.Before(m.expires) || authz.Decide(p, authz.ActionDownload, j.PolicyJob()) != authz.Allow {
		return ""
	}
	tok := pf.f.opts.Keys.SealDownload(handle.Download{Tenant: j.Tenant, WorkflowID: j.ID, Subject: p.Subject,
		Digest: m.sha256, Expiry: now.Add(k.opts.DownloadTTL).Truncate(time.Second)})
	if tok == "" {
		return ""
	}
	return pathPageDownload + url.PathEscape(tok)
}

type exportManifestRef struct {
	sha256  string
	expires time.Time
}
