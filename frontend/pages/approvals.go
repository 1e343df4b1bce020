package pages

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

	"github.com/jobgate/jobgate/frontend/handle"
)

// jobPages are the job pages over a job core, behind p's sessions.
type jobPages struct {
	p      *Pages
	jobs   Jobs
	maxAge time.Duration
}

// JobsHandler serves the job pages (JobsPatterns) over jobs behind p's sessions: the approvals
// inbox (GET /approvals), a request page with its decision form (GET and POST
// /approvals/{job}), "my jobs" (GET /jobs, GET /jobs/{job}) and the download of the job page.
// Approving a request with sensitive columns needs a sign-in no older than approvalMaxAge (0:
// ApprovalMaxAgeDefault). Every job the person may not see is the same 404 as a missing one.
func (p *Pages) JobsHandler(jobs Jobs, approvalMaxAge time.Duration) http.Handler {
	if approvalMaxAge <= 0 {
		approvalMaxAge = ApprovalMaxAgeDefault
	}
	jp := &jobPages{p: p, jobs: jobs, maxAge: approvalMaxAge}
	mux := http.NewServeMux()
	wrap := func(h http.HandlerFunc) http.Handler { return p.RequireSession(0, h) }
	mux.Handle("GET "+PathApprovals, wrap(jp.inbox))
	mux.Handle("GET "+PathApprovals+"/{job}", wrap(jp.request))
	mux.Handle("POST "+PathApprovals+"/{job}", wrap(jp.decide))
	mux.Handle("GET "+PathJobs, wrap(jp.myJobs))
	mux.Handle("GET "+PathJobs+"/{job}", wrap(jp.jobPage))
	mux.Handle("GET "+PathDownload+"{token}", wrap(jp.download))
	return securityHeaders(mux)
}

// notFoundMsg is the whole 404 page: a missing job, another tenant's, one the person may not
// see, and a request already answered (for a person who could only see it while it was open)
// all read the same, byte for byte.
const notFoundMsg = "There is no such request or job for you: it does not exist, it is not yours to see, or it was already answered."

// render shows a job page: every one has the navigation, and a message page links back to the
// inbox.
func (jp *jobPages) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	v.Nav = true
	if page == "message" {
		v.Back = PathApprovals
	}
	if err := render(w, status, page, v); err != nil {
		jp.jobs.Logger(r.Context()).Error("page rendering failed: " + err.Error())
	}
}

func (jp *jobPages) notFound(w http.ResponseWriter, r *http.Request) {
	jp.render(w, r, http.StatusNotFound, "message", view{Title: "Not found", Message: notFoundMsg})
}

// failPage answers an error of the job core: a JobsError by what it means, anything else (the
// job store unreachable) as 503 with the detail in the log only.
func (jp *jobPages) failPage(w http.ResponseWriter, r *http.Request, err error) {
	var je *JobsError
	if errors.As(err, &je) {
		switch je.Code {
		case ErrNotFound:
			jp.notFound(w, r)
			return
		case ErrInvalid:
			jp.render(w, r, http.StatusBadRequest, "message", view{Title: "Bad request", Message: je.Message})
			return
		case ErrStaleLink:
			// The job core's message names tool arguments; a person follows links.
			jp.render(w, r, http.StatusBadRequest, "message", view{Title: "Page link out of date",
				Message: "This page link is out of date or was made for someone else; start again from the first page."})
			return
		}
	}
	jp.jobs.Logger(r.Context()).Warn("page: job store", zap.String("path", r.URL.Path), zap.Error(err))
	jp.render(w, r, http.StatusServiceUnavailable, "message", view{Title: "Try again later",
		Message: "The job store cannot be reached right now; reload the page in a moment."})
}

func forbidden(err error) bool {
	var je *JobsError
	return errors.As(err, &je) && je.Code == ErrForbidden
}

func (jp *jobPages) inbox(w http.ResponseWriter, r *http.Request) {
	jp.listPage(w, r, listing{jp.jobs.Approvals, "Approvals",
		"Approving needs the jobs:approve scope, which your sign-in does not carry.",
		"Approvals waiting for you", PathApprovals, "inbox", func(v *view, jobs []Job) {
			now := jp.jobs.Now()
			for _, j := range jobs {
				if j.Request != nil {
					v.Rows = append(v.Rows, requestRowOf(&j, now))
				}
			}
		}})
}

// A listing is one list page: what it lists, its 403 page (title and why) for a person whose
// sign-in may not list it, and its own page (title, path, template, and rows, which fills in
// the rows of jobs).
type listing struct {
	list                  func(context.Context, handle.Session, string) (JobList, error)
	deniedTitle, why      string
	title, path, template string
	rows                  func(v *view, jobs []Job)
}

// listPage answers a list page: the page of jobs l.list reads at the URL's cursor for the
// signed-in person, with a link to the next page; or l's 403 page, or the error page.
func (jp *jobPages) listPage(w http.ResponseWriter, r *http.Request, l listing) {
	s, _ := SessionFrom(r.Context())
	out, err := l.list(r.Context(), s, r.URL.Query().Get("cursor"))
	if forbidden(err) {
		jp.render(w, r, http.StatusForbidden, "message", view{Title: l.deniedTitle, Session: &s, Message: l.why})
		return
	}
	if err != nil {
		jp.failPage(w, r, err)
		return
	}
	v := view{Title: l.title, Session: &s}
	l.rows(&v, out.Jobs)
	v.Next = pageLink(l.path, out.Next)
	jp.render(w, r, http.StatusOK, l.template, v)
}

// pageLink is the link to the list page at path from cursor next; "" when there is no next page.
func pageLink(path, next string) string {
	if next == "" {
		return ""
	}
	return path + "?" + url.Values{"cursor": {next}}.Encode()
}

// openJob is every job page's start: the signed-in person and the job the URL names, which
// they may read; on false it has answered (the one 404, or the job's error page).
func (jp *jobPages) openJob(w http.ResponseWriter, r *http.Request) (handle.Session, *Job, bool) {
	s, _ := SessionFrom(r.Context())
	j, err := jp.jobs.Job(r.Context(), s, r.PathValue("job"))
	if err != nil {
		jp.failPage(w, r, err)
		return s, nil, false
	}
	return s, j, true
}

func (jp *jobPages) request(w http.ResponseWriter, r *http.Request) {
	s, j, ok := jp.openJob(w, r)
	if !ok {
		return
	}
	if j.Request != nil && j.Request.Sensitive && j.MayDecide {
		// Show a sensitive scope's form only after a fresh sign-in, so the approval it sends is
		// not refused for an old one (RequireSession sends the browser to the provider with
		// prompt=login&max_age= and back here).
		jp.p.RequireSession(jp.maxAge, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			jp.renderRequest(w, r, http.StatusOK, s, j, "", jp.typedComment(r, s, j))
		})).ServeHTTP(w, r)
		return
	}
	jp.renderRequest(w, r, http.StatusOK, s, j, "", jp.typedComment(r, s, j))
}

// draftParam is the query parameter of a re-login link that carries the sealed comment draft.
// A plain ?comment= fills nothing: a link the requester wrote would fill the approver's form
// with the requester's words, which the approver's decision then seals as theirs.
const draftParam = "draft"

// typedComment is the comment a re-login link carries back (?draft=, see renderRequestReLogin)
// to pre-fill the form: text this person typed on this request page, shown to them before they
// decide, never sent by itself. A draft of another person or job, expired, tampered with or over
// CommentMax fills nothing.
func (jp *jobPages) typedComment(r *http.Request, s handle.Session, j *Job) string {
	str := r.URL.Query().Get(draftParam)
	if str == "" {
		return ""
	}
	d, err := jp.p.cfg.Keys.OpenCommentDraft(str, jp.jobs.Now())
	if err != nil || d.Issuer != s.Issuer || d.Subject != s.Subject || d.Tenant != s.Tenant || d.Job != j.ID ||
		utf8.RuneCountInString(d.Comment) > CommentMax {
		return ""
	}
	return d.Comment
}

// sealDraft seals comment, typed by s's person on j's request page, for a re-login link; ""
// when it does not fit (handle.MaxCommentDraftLen).
func (jp *jobPages) sealDraft(s handle.Session, j *Job, comment string) string {
	return jp.p.cfg.Keys.SealCommentDraft(handle.CommentDraft{Issuer: s.Issuer, Subject: s.Subject, Tenant: s.Tenant,
		Job: j.ID, Comment: comment, Expiry: jp.jobs.Now().Add(handle.CommentDraftTTL)})
}

// reLoginPathMax bounds a re-login link: the sign-in returns only to paths up to 1024 bytes
// (localPath), so a longer comment stays on the re-rendered page instead of in the link.
const reLoginPathMax = 1000

// renderRequestReLogin answers an approval whose sign-in is too old: 403, the request as it is
// now with the typed comment kept, and a "sign in again" link back to this request page.
func (jp *jobPages) renderRequestReLogin(w http.ResponseWriter, r *http.Request, s handle.Session, j *Job, comment string) {
	link := ApprovalPath(j.ID)
	age := jp.maxAge.String()
	if jp.maxAge%time.Minute == 0 {
		age = fmt.Sprintf("%d minutes", int(jp.maxAge/time.Minute))
	}
	msg := fmt.Sprintf("Approving this request needs a sign-in from the last %s; yours is older. Nothing was decided. Sign in again with the link below: it brings you back to this request", age)
	draft := ""
	if comment != "" {
		draft = jp.sealDraft(s, j, comment)
	}
	withComment := link + "?" + url.Values{draftParam: {draft}}.Encode()
	if draft != "" && len(withComment) <= reLoginPathMax {
		link, msg = withComment, msg+" with your comment filled in."
	} else if comment != "" {
		msg += "; copy your comment first, it is too long to carry along."
	} else {
		msg += "."
	}
	jp.renderRequestWith(w, r, http.StatusForbidden, s, j, msg, comment, link)
}

// decide: POST /approvals/{job} with csrf, input_id, scope_digest, meaning_digest (of the
// prompt the page displayed), decision and comment.
func (jp *jobPages) decide(w http.ResponseWriter, r *http.Request) {
	s, j, ok := jp.openJob(w, r)
	if !ok {
		return
	}
	d := Decision{InputID: r.PostFormValue("input_id"), ScopeDigest: r.PostFormValue("scope_digest"),
		Decision: r.PostFormValue("decision"), Comment: strings.TrimSpace(r.PostFormValue("comment"))}
	req := j.Request
	switch {
	case req == nil:
		// A replayed or second form: the request is answered; nothing is sent.
		jp.renderRequest(w, r, http.StatusConflict, s, j, "This request was already answered or is no longer open; nothing was changed.", "")
		return
	case d.InputID != req.InputID || d.ScopeDigest != req.ScopeDigest || r.PostFormValue("meaning_digest") != req.MeaningDigest:
		// The page was opened on another request, scope or wording: never approve what is no
		// longer asked, and never record as "shown" a meaning the page did not show (the
		// record's prompt is the open request's; the form carries the digest of the one it
		// displayed). Show what is asked now, keeping the typed comment.
		jp.renderRequest(w, r, http.StatusConflict, s, j, "The request changed since you opened this page. Nothing was decided: review the scope below as it is now, then decide again.", d.Comment)
		return
	case d.Decision != DecisionApprove && d.Decision != DecisionReject:
		jp.renderRequest(w, r, http.StatusBadRequest, s, j, "Choose Approve or Reject.", d.Comment)
		return
	case d.Decision == DecisionReject && d.Comment == "":
		jp.renderRequest(w, r, http.StatusBadRequest, s, j, "A comment is required to reject: tell the requester why.", d.Comment)
		return
	case utf8.RuneCountInString(d.Comment) > CommentMax:
		jp.renderRequest(w, r, http.StatusBadRequest, s, j, "The comment is too long (at most 1000 characters).", d.Comment)
		return
	}
	if !j.MayDecide {
		jp.renderRequest(w, r, http.StatusForbidden, s, j, j.Refusal+".", "")
		return
	}
	if d.Decision == DecisionApprove && req.Sensitive {
		if !FreshEnough(s.AuthTime, jp.jobs.Now(), jp.maxAge) {
			// A form left open past the max age: decide nothing, keep what was typed, and offer
			// a sign-in that comes back to this request (a GET: reloading this answer would only
			// re-send the form). The comment rides along in the link when it fits.
			jp.renderRequestReLogin(w, r, s, j, d.Comment)
			return
		}
		// Approving a sensitive scope needs a recent sign-in; RequireSession checks it again
		// (the same rule) as the last word before anything is sent.
		jp.p.RequireSession(jp.maxAge, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			jp.send(w, r, s, j, d)
		})).ServeHTTP(w, r)
		return
	}
	jp.send(w, r, s, j, d)
}

// send delivers the page's decision and shows the outcome.
func (jp *jobPages) send(w http.ResponseWriter, r *http.Request, s handle.Session, j *Job, d Decision) {
	after, err := jp.jobs.Decide(r.Context(), s, j, d)
	if err != nil {
		var je *JobsError
		if !errors.As(err, &je) || je.Code != ErrRefused {
			jp.failPage(w, r, err)
			return
		}
		// The workflow's validator refused (four eyes, a request answered or changed meanwhile):
		// its message, over the job as it is now.
		now, derr := jp.jobs.Job(r.Context(), s, r.PathValue("job"))
		if derr != nil {
			jp.failPage(w, r, derr)
			return
		}
		jp.renderRequest(w, r, http.StatusConflict, s, now, "Not decided: "+je.Message+".", "")
		return
	}
	v := view{Title: "Decision recorded", Session: &s, Job: jp.jobViewOf(r, s, after)}
	if d.Decision == DecisionApprove {
		v.Notice = "You approved this request. The job continues; its owner is told through the job's status."
	} else {
		v.Notice = "You rejected this request. The job ends as rejected; your comment is recorded."
	}
	v.Decision, v.Comment = d.Decision, d.Comment
	jp.render(w, r, http.StatusOK, "outcome", v)
}

func (jp *jobPages) myJobs(w http.ResponseWriter, r *http.Request) {
	jp.listPage(w, r, listing{jp.jobs.List, "My jobs",
		"Listing jobs needs the jobs:read scope, which your sign-in does not carry.",
		"My jobs", PathJobs, "jobs", func(v *view, jobs []Job) {
			for _, j := range jobs {
				v.JobRows = append(v.JobRows, jobRowOf(&j))
			}
		}})
}

func (jp *jobPages) jobPage(w http.ResponseWriter, r *http.Request) {
	s, j, ok := jp.openJob(w, r)
	if !ok {
		return
	}
	jp.render(w, r, http.StatusOK, "job", view{Title: "Job", Session: &s, Job: jp.jobViewOf(r, s, j)})
}

// download serves a job's file to the signed-in person through the kind's download rule
// (principal-bound, signed, short-lived link; the same bare 404s).
func (jp *jobPages) download(w http.ResponseWriter, r *http.Request) {
	s, _ := SessionFrom(r.Context())
	jp.jobs.ServeDownload(w, r, s)
}
