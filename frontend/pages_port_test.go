package frontend

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/tests/support/webclient"
	"github.com/jobgate/jobgate/workflows"
)

// The people's pages (frontend/pages) wired to the job core through the real port (pagesPort)
// over the in-memory store, behind the real frontend/pages sessions: cookies sealed with the
// handle keys as a sign-in would, and a discovery document for the re-login redirect. They pin
// what only the core knows (list_approvals' filter, the sealed resume, the export's result and
// decision record in words); the pages' own behaviour is tested against a fake in
// frontend/pages (approvals_test.go), and the full sign-in round trip is
// tests/approvals_browser_test.go's, against jobgate dev.

// notFoundMsg is the pages' one 404 message.
const notFoundMsg = "There is no such request or job for you: it does not exist, it is not yours to see, or it was already answered."

type pagesEnv struct {
	t    testing.TB
	ms   *memstore.Store
	f    *Frontend
	srv  *httptest.Server
	idp  *httptest.Server
	keys *handle.Keyring
}

func newPagesEnv(t testing.TB) *pagesEnv {
	t.Helper()
	e := &pagesEnv{t: t, ms: memstore.New()}
	e.idp = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := "http://" + r.Host
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": base, "authorization_endpoint": base + "/authorize",
			"token_endpoint": base + "/token", "jwks_uri": base + "/jwks", "code_challenge_methods_supported": []string{"S256"}})
	}))
	t.Cleanup(e.idp.Close)
	e.f = newStoreFrontend(t, e.ms, jobcore.Options{Now: func() time.Time { return coreNow }})
	e.keys = e.f.Opts.Keys
	p, err := pages.New(pages.Config{Issuer: e.idp.URL, ClientID: "jobgate-pages", PublicURL: "http://localhost",
		Keys: e.keys, Now: func() time.Time { return coreNow }})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.f.PagesHandler(p, 0))
	t.Cleanup(e.srv.Close)
	return e
}

// session is a signed-in person's cookie value.
func (e *pagesEnv) session(sub, tenant string, authAge time.Duration, scopes ...authz.Scope) string {
	s := handle.Session{Issuer: e.idp.URL, Subject: sub, Tenant: tenant, Scopes: authz.ScopeStrings(scopes),
		AuthTime: coreNow.Add(-authAge), CSRF: "csrf-" + sub, Expiry: coreNow.Add(time.Hour),
		Name: "Person " + sub, Email: sub + "@" + tenant + ".example", AMR: []string{"pwd"}, ACR: "1"}
	v := e.keys.SealSession(s)
	if v == "" {
		e.t.Fatal("session not sealed")
	}
	return v
}

type pageResp struct {
	status int
	body   string
	loc    string
}

func (e *pagesEnv) do(method, path, cookie string, form url.Values, hdr ...string) pageResp {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.AddCookie(&http.Cookie{Name: "jobgate_session", Value: cookie})
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return pageResp{status: resp.StatusCode, body: string(b), loc: resp.Header.Get("Location")}
}

const pageJobID = "acme/export/ana/q3"

// promptTail follows the owner in exportAwaiting's prompt; anaPrompt is ana's.
const (
	promptTail = " asks to export dataset \"customers\""
	anaPrompt  = "ana" + promptTail
)

// exportAwaiting stores ana's export of customers with the sensitive column email, waiting for
// an approver, and returns its digest.
func (e *pagesEnv) exportAwaiting(id, owner, digest string) *jobstore.Job {
	j := &jobstore.Job{ID: id, RunID: "run-" + id, Tenant: "acme", Owner: owner, Kind: workflows.KindExport, Exec: jobstore.RunRunning,
		SAStatus: workflows.StatusAwaitingInput, CreatedAt: coreNow.Add(-12 * time.Minute),
		NeedsInput: &workflows.NeedsInput{InputID: "approve", Prompt: owner + promptTail,
			ScopeDigest: digest, Approver: authz.ApproverApprover, RequestedBy: owner, ExpiresAt: coreNow.Add(24 * time.Hour),
			Scope: map[string]any{"dataset": "customers", "columns": []any{"id", "name", "email"}, "format": "csv",
				"purpose": "renewal mailing for Q3", "sensitive_columns": []any{"email"}, "max_rows": float64(1000000),
				"config_digest": "sha256:cfg"}}}
	e.ms.Jobs[id] = j
	return j
}

// form is the request page's form as a browser sends it: meaning_digest is the digest of the
// prompt exportAwaiting gives ana's export (the page under test showed that one).
func form(csrf, inputID, digest, decision, comment string) url.Values {
	return url.Values{"csrf": {csrf}, "input_id": {inputID}, "scope_digest": {digest}, "decision": {decision}, "comment": {comment},
		"meaning_digest": {workflows.MeaningDigest(anaPrompt)}}
}

func mustContain(t *testing.T, r pageResp, status int, subs ...string) {
	t.Helper()
	webclient.MustPage(t, r.status, r.body, status, subs...)
}

var (
	reqPath  = ApprovalPagePath(pageJobID)
	approver = []authz.Scope{authz.ScopeApprove}
	owner    = []authz.Scope{authz.ScopeRead, authz.ScopeWrite}
)

// The inbox lists exactly what list_approvals' rule gives the steward (the filter excludes the
// steward's own jobs; a row the policy refuses is dropped even if the store returns it), with
// the request in words.
func TestApprovalsPages_Inbox(t *testing.T) {
	e := newPagesEnv(t)
	mine := e.exportAwaiting("acme/export/steward/own", "steward", "sha256:own")
	e.ms.Leaked = []*jobstore.Job{mine}
	e.exportAwaiting(pageJobID, "ana", "sha256:d1")
	// Nineteen more requests fill the first page (20 rows), which then carries a next cursor.
	for i := range 19 {
		e.exportAwaiting(fmt.Sprintf("acme/export/bo%d/q", i), fmt.Sprintf("bo%d", i), "sha256:bo")
	}
	steward := e.session("steward", "acme", time.Minute, approver...)
	r := e.do("GET", PathApprovals, steward, nil)
	mustContain(t, r, 200, "ana", "renewal mailing for Q3", "customers", `<strong class="sensitive">email (sensitive)</strong>`,
		"1,000,000", "12 min", "2030-01-02 12:00 UTC", `href="/approvals/acme%2Fexport%2Fana%2Fq3"`, `rel="next"`, `<th scope="col">`)
	if strings.Contains(r.body, "steward%2Fown") {
		t.Fatalf("the steward's own request is listed:\n%s", r.body)
	}
	if jf := e.ms.Lists[0].Filter; jf.Tenant != "acme" || jf.ApproverNot != "steward" || len(jf.Answerers) != 2 || jf.Status != workflows.StatusAwaitingInput {
		t.Fatalf("inbox filter %+v is not list_approvals' rule", jf)
	}
	// The next page's cursor is list_approvals' signed cursor: it opens for the steward only.
	next := r.body[strings.Index(r.body, "/approvals?cursor="):]
	next = strings.ReplaceAll(next[:strings.Index(next, `"`)], "&amp;", "&")
	mustContain(t, e.do("GET", next, steward, nil), 200, "Nothing is waiting")
	bo := e.session("bo", "acme", time.Minute, approver...)
	if r := e.do("GET", next, bo, nil); r.status != http.StatusBadRequest {
		t.Fatalf("another person's cursor: %d, want 400", r.status)
	}
	// Empty state (every request answered); no jobs:approve: a clear refusal.
	e.ms.Jobs, e.ms.Leaked = map[string]*jobstore.Job{}, nil
	mustContain(t, e.do("GET", PathApprovals, steward, nil), 200, "Nothing is waiting for your answer")
	mustContain(t, e.do("GET", PathApprovals, e.session("ana", "acme", time.Minute, owner...), nil), 403, "jobs:approve")
	// Not signed in: sent to sign in and back.
	if r := e.do("GET", PathApprovals, "", nil); r.status != http.StatusSeeOther || !strings.Contains(r.loc, "/login?return=%2Fapprovals") {
		t.Fatalf("no session: %d %q", r.status, r.loc)
	}
}

// The steward opens the request, sees its meaning, approves through the resume path (surface
// page); the form replayed decides nothing twice.
func TestApprovalsPages_Approve(t *testing.T) {
	e := newPagesEnv(t)
	e.exportAwaiting(pageJobID, "ana", "sha256:d1")
	steward := e.session("steward", "acme", time.Minute, approver...)
	r := e.do("GET", reqPath, steward, nil)
	mustContain(t, r, 200, "Allow ana@acme to export id, name and <strong class=\"sensitive\">email (sensitive)</strong> of customers (up to 1,000,000 rows), csv, for &#39;renewal mailing for Q3&#39;",
		`name="input_id" value="approve"`, `name="scope_digest" value="sha256:d1"`, `name="csrf" value="csrf-steward"`,
		"sha256:d1", `<label for="comment">`, "config_digest")
	mustContain(t, e.do("POST", reqPath, steward, form("csrf-steward", "approve", "sha256:d1", "approve", "ok for Q3")), 200,
		"You approved this request", "running")
	if len(e.ms.Resumes) != 1 {
		t.Fatalf("%d resumes, want 1", len(e.ms.Resumes))
	}
	req := e.ms.Resumes[0].Req
	if req.Surface != workflows.SurfacePage || req.SignedInWith != jobcore.SignedInOIDCSession || req.Principal.Subject != "steward" ||
		req.Decision != "approve" || req.Comment != "ok for Q3" || req.ScopeDigest != "sha256:d1" || req.Seal == "" {
		t.Fatalf("resume request %+v", req)
	}
	// The session's person goes into the sealed record: who vouched, name, e-mail, how and when.
	if id := req.Identity; id.Issuer != e.idp.URL || id.Name != "Person steward" || id.Email != "steward@acme.example" ||
		id.AuthTime.IsZero() || len(id.AMR) != 1 || id.ACR != "1" {
		t.Fatalf("decision identity %+v, want the session's", id)
	}
	// The same form again: the request is answered, the steward no longer sees the job; nothing is sent.
	r = e.do("POST", reqPath, steward, form("csrf-steward", "approve", "sha256:d1", "approve", "ok for Q3"))
	mustContain(t, r, 404, notFoundMsg)
	if len(e.ms.Resumes) != 1 {
		t.Fatalf("replay sent a second decision (%d resumes)", len(e.ms.Resumes))
	}
	// Someone who still sees the job (its owner) posting the old form reads that it was answered.
	ana := e.session("ana", "acme", time.Minute, authz.ScopeRead, authz.ScopeWrite)
	mustContain(t, e.do("POST", reqPath, ana, form("csrf-ana", "approve", "sha256:d1", "approve", "")), 409,
		"This request was already answered or is no longer open; nothing was changed.", "running")
	if len(e.ms.Resumes) != 1 {
		t.Fatalf("a second decision (%d resumes)", len(e.ms.Resumes))
	}
}

// A page left open while the scope changed shows the new scope and decides nothing; reject
// needs a comment; the owner cannot approve her own sensitive export.
func TestApprovalsPages_Refusals(t *testing.T) {
	e := newPagesEnv(t)
	j := e.exportAwaiting(pageJobID, "ana", "sha256:d1")
	steward := e.session("steward", "acme", time.Minute, approver...)
	j.NeedsInput.InputID, j.NeedsInput.ScopeDigest = "approve-2", "sha256:d2" // the scope changed
	mustContain(t, e.do("POST", reqPath, steward, form("csrf-steward", "approve", "sha256:d1", "approve", "")), 409,
		"The request changed since you opened this page", `name="scope_digest" value="sha256:d2"`, `name="input_id" value="approve-2"`)
	mustContain(t, e.do("POST", reqPath, steward, form("csrf-steward", "approve-2", "sha256:d2", "reject", "  ")), 400,
		"A comment is required to reject")
	mustContain(t, e.do("POST", reqPath, steward, form("csrf-steward", "approve-2", "sha256:d2", "maybe", "")), 400, "Choose Approve or Reject")
	// ana holds jobs:approve too, but four eyes: she sees her request, no form, and a POST is refused.
	ana := e.session("ana", "acme", time.Minute, authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove)
	r := e.do("GET", reqPath, ana, nil)
	mustContain(t, r, 200, "You cannot decide this request: four eyes")
	if strings.Contains(r.body, `name="decision"`) {
		t.Fatal("the owner is offered the decision form")
	}
	mustContain(t, e.do("POST", reqPath, ana, form("csrf-ana", "approve-2", "sha256:d2", "approve", "")), 403, "four eyes")
	// Cross-site POST and a wrong CSRF token: 403.
	if r := e.do("POST", reqPath, steward, form("csrf-steward", "approve-2", "sha256:d2", "approve", ""), "Sec-Fetch-Site", "cross-site"); r.status != 403 {
		t.Fatalf("cross-site POST: %d", r.status)
	}
	if r := e.do("POST", reqPath, steward, form("csrf-other", "approve-2", "sha256:d2", "approve", "")); r.status != 403 {
		t.Fatalf("wrong csrf: %d", r.status)
	}
	if len(e.ms.Resumes) != 0 {
		t.Fatalf("%d resumes sent, want none", len(e.ms.Resumes))
	}
	// A reject with a comment goes through.
	mustContain(t, e.do("POST", reqPath, steward, form("csrf-steward", "approve-2", "sha256:d2", "reject", "not for Q3")), 200, "You rejected")
	if len(e.ms.Resumes) != 1 || e.ms.Resumes[0].Req.Decision != "reject" {
		t.Fatalf("resumes %+v", e.ms.Resumes)
	}
}

// A page whose displayed request wording is not the open request's (the prompt changed while
// the scope did not, or a form without meaning_digest) decides nothing and shows the wording
// as it is now, keeping the typed comment: the record's "meaning shown" is always what the
// page displayed (review 18, finding 13).
func TestApprovalsPages_StaleMeaning(t *testing.T) {
	e := newPagesEnv(t)
	j := e.exportAwaiting(pageJobID, "ana", "sha256:d1")
	steward := e.session("steward", "acme", time.Minute, approver...)
	mustContain(t, e.do("GET", reqPath, steward, nil), 200,
		`name="meaning_digest" value="`+workflows.MeaningDigest(anaPrompt)+`"`)
	newPrompt := "ana asks to export dataset \"customers\" to a new recipient"
	j.NeedsInput.Prompt = newPrompt
	mustContain(t, e.do("POST", reqPath, steward, form("csrf-steward", "approve", "sha256:d1", "approve", "fine by me")), 409,
		"The request changed since you opened this page", "to a new recipient", "fine by me",
		`name="meaning_digest" value="`+workflows.MeaningDigest(newPrompt)+`"`)
	noDigest := form("csrf-steward", "approve", "sha256:d1", "approve", "")
	noDigest.Del("meaning_digest")
	mustContain(t, e.do("POST", reqPath, steward, noDigest), 409, "The request changed since you opened this page")
	if len(e.ms.Resumes) != 0 {
		t.Fatalf("%d resumes sent for a meaning the page did not show", len(e.ms.Resumes))
	}
	ok := form("csrf-steward", "approve", "sha256:d1", "approve", "")
	ok.Set("meaning_digest", workflows.MeaningDigest(newPrompt))
	mustContain(t, e.do("POST", reqPath, steward, ok), 200, "You approved")
	if len(e.ms.Resumes) != 1 || e.ms.Resumes[0].Req.Meaning != newPrompt {
		t.Fatalf("resumes %+v", e.ms.Resumes)
	}
}

// Another tenant's job, a guessed ID and a job the approver may not see read the same 404.
func TestApprovalsPages_NotFoundSameBytes(t *testing.T) {
	e := newPagesEnv(t)
	e.exportAwaiting(pageJobID, "ana", "sha256:d1")
	e.ms.Jobs["acme/export/ana/done"] = &jobstore.Job{ID: "acme/export/ana/done", RunID: "r", Tenant: "acme", Owner: "ana", Kind: workflows.KindExport, Exec: jobstore.RunCompleted}
	gus := e.session("gus", "globex", time.Minute, authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove)
	steward := e.session("steward", "acme", time.Minute, approver...)
	want := e.do("GET", ApprovalPagePath("acme/export/ana/nope"), steward, nil)
	mustContain(t, want, 404, notFoundMsg)
	for _, c := range []struct{ cookie, path string }{
		{gus, reqPath}, {gus, JobPagePath(pageJobID)}, {steward, ApprovalPagePath("acme/export/ana/done")},
		{steward, JobPagePath("acme/export/ana/done")}, {steward, "/approvals/x"}, {gus, ApprovalPagePath("globex/export/gus/nope")},
	} {
		if r := e.do("GET", c.path, c.cookie, nil); r.status != 404 || r.body != want.body {
			t.Fatalf("%s: %d, body differs from a missing job's:\n%s", c.path, r.status, r.body)
		}
	}
	if r := e.do("POST", reqPath, gus, form("csrf-gus", "approve", "sha256:d1", "approve", "")); r.status != 404 || r.body != want.body {
		t.Fatalf("gus POST: %d", r.status)
	}
	if len(e.ms.Resumes) != 0 {
		t.Fatal("a resume was sent")
	}
}

// An old sign-in: the request page goes back to the provider with prompt=login&max_age, and an
// approval POST is refused without deciding.
func TestApprovalsPages_FreshLogin(t *testing.T) {
	e := newPagesEnv(t)
	e.exportAwaiting(pageJobID, "ana", "sha256:d1")
	old := e.session("steward", "acme", time.Hour, approver...)
	r := e.do("GET", reqPath, old, nil)
	if r.status != http.StatusFound || !strings.HasPrefix(r.loc, e.idp.URL+"/authorize?") ||
		!strings.Contains(r.loc, "prompt=login") || !strings.Contains(r.loc, "max_age=300") {
		t.Fatalf("old sign-in: %d %q", r.status, r.loc)
	}
	// A form left open past the max age (review 18, finding 11): nothing decided, the request
	// page again with the typed comment kept and a sign-in link (a GET) back to this request
	// carrying the comment; that link re-logs in, and after it the form is pre-filled.
	r = e.do("POST", reqPath, old, form("csrf-steward", "approve", "sha256:d1", "approve", "ok for Q3 & only Q3"))
	mustContain(t, r, 403, "needs a sign-in from the last 5 minutes", "Nothing was decided", "Sign in again", `href="`+reqPath+`?draft=jgt1.`,
		">ok for Q3 &amp; only Q3</textarea>", `name="decision" value="approve"`)
	// The comment rides sealed (pages' TestJobPages_CommentDraftSealed), bound to steward and this job.
	m := regexp.MustCompile(`href="(/approvals/[^"?]+\?draft=[^"]*)"`).FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no re-login link:\n%s", r.body)
	}
	link := html.UnescapeString(m[1])
	if len(e.ms.Resumes) != 0 {
		t.Fatal("approved with an old sign-in")
	}
	if r := e.do("GET", link, old, nil); r.status != http.StatusFound || !strings.Contains(r.loc, "prompt=login") {
		t.Fatalf("re-login link with an old sign-in: %d %q", r.status, r.loc)
	}
	fresh := e.session("steward", "acme", time.Minute, approver...)
	mustContain(t, e.do("GET", link, fresh, nil), 200, ">ok for Q3 &amp; only Q3</textarea>")
	// A comment too long for the link stays on the page, and the link goes back without it.
	long := strings.Repeat("x", 990)
	mustContain(t, e.do("POST", reqPath, old, form("csrf-steward", "approve", "sha256:d1", "approve", long)), 403,
		"copy your comment first", `href="`+reqPath+`"`, ">"+long+"</textarea>")
	// Rejecting needs no fresh sign-in (it exposes nothing).
	mustContain(t, e.do("POST", reqPath, old, form("csrf-steward", "approve", "sha256:d1", "reject", "no")), 200, "You rejected")
}

// My jobs and the job page: status, progress, result and a download link bound to the person.
func TestApprovalsPages_MyJobs(t *testing.T) {
	e := newPagesEnv(t)
	id := "acme/export/ana/done"
	j := &jobstore.Job{ID: id, RunID: "run-done", Tenant: "acme", Owner: "ana", Kind: workflows.KindExport, Exec: jobstore.RunCompleted,
		CreatedAt: coreNow.Add(-time.Hour), Progress: workflows.Progress{Done: 3, Total: 3, Unit: "rows"}}
	e.ms.Jobs[id] = j
	rec := &workflows.DecisionRecord{Decision: "approve", By: "steward", Tenant: "acme", At: coreNow.Add(-30 * time.Minute),
		Surface: workflows.SurfacePage, SignedInWith: jobcore.SignedInOIDCSession, ScopeDigest: "sha256:d1", Seal: "jgr1.x",
		Identity: workflows.Identity{Issuer: "https://idp.example", Name: "Stew Ard", Email: "steward@acme.example",
			AuthTime: coreNow.Add(-31 * time.Minute), AMR: []string{"pwd", "otp"}},
		Prompt: "Allow ana@acme to export id and **email** of customers, csv, for 'q3'", Comment: "ok for Q3"}
	e.ms.Results["run-done"] = workflows.ExportResult{ApprovedBy: "steward", Decision: rec, Manifest: contract.Manifest{Rows: 3, Format: "csv",
		Columns: []string{"id", "email"}, FileName: "q3.csv.gz", SHA256: strings.Repeat("ab", 32), ExpiresAt: coreNow.Add(time.Hour)}}
	ana := e.session("ana", "acme", time.Hour, owner...)
	mustContain(t, e.do("GET", PathJobs, ana, nil), 200, `href="/jobs/acme%2Fexport%2Fana%2Fdone"`, "succeeded", "3 of 3 rows")
	mustContain(t, e.do("GET", JobPagePath(id), ana, nil), 200, "succeeded", "q3.csv.gz", strings.Repeat("ab", 32),
		// the decision record in words: who (and who vouched), how, what they were shown, their comment
		"Approved by", "Stew Ard (steward) &lt;steward@acme.example&gt;, signed in at https://idp.example",
		"via page (oidc-session), authenticated", "with pwd, otp",
		"Allow ana@acme to export id and email of customers, csv, for &#39;q3&#39;", "ok for Q3", "sha256:d1", "jobgate verify")
	// bo (same tenant, not the owner) gets the 404.
	mustContain(t, e.do("GET", JobPagePath(id), e.session("bo", "acme", time.Hour, owner...), nil), 404, notFoundMsg)
	// A download link of the pages refuses a token that is not bound to the person.
	if r := e.do("GET", pages.PathDownload+"bogus", ana, nil); r.status != 404 {
		t.Fatalf("bogus download: %d", r.status)
	}
}

// The job page of a rejected export shows the rejecting answer's record (from the memo), not
// just the job error.
func TestApprovalsPages_RejectedJobRecord(t *testing.T) {
	e := newPagesEnv(t)
	id := "acme/export/ana/rejected"
	e.ms.Jobs[id] = &jobstore.Job{ID: id, RunID: "run-rej", Tenant: "acme", Owner: "ana", Kind: workflows.KindExport, Exec: jobstore.RunCanceled,
		SAStatus: workflows.StatusCancelled, CreatedAt: coreNow.Add(-time.Hour),
		JobErr: &workflows.JobError{Code: workflows.ErrCodeRejected, Message: "rejected by steward: email is not needed"},
		Decision: &workflows.DecisionRecord{Decision: "reject", By: "steward", Tenant: "acme", At: coreNow.Add(-30 * time.Minute),
			Surface: workflows.SurfaceTool, SignedInWith: "bearer-jwt", ScopeDigest: "sha256:d9", Seal: "jgr1.x",
			Prompt: "Allow ana@acme to export id and **email** of customers, csv, for 'q3'", Comment: "email is not needed"}}
	ana := e.session("ana", "acme", time.Hour, owner...)
	mustContain(t, e.do("GET", JobPagePath(id), ana, nil), 200, "cancelled", "Rejected by", "steward", "via tool (bearer-jwt)",
		"What was rejected", "Reason given", "email is not needed", "Rejected scope", "sha256:d9", "kept in the job&#39;s history")
}

// The pages keep their own copies of the decision words and the comment limit (so they need not
// link the workflows layer); they must stay the resume path's.
func TestPagesPort_SharedConstants(t *testing.T) {
	if pages.DecisionApprove != workflows.DecisionApprove || pages.DecisionReject != workflows.DecisionReject || pages.CommentMax != jobcore.CommentMax {
		t.Fatalf("pages' decisions %q/%q and comment limit %d differ from the resume path's %q/%q/%d",
			pages.DecisionApprove, pages.DecisionReject, pages.CommentMax, workflows.DecisionApprove, workflows.DecisionReject, jobcore.CommentMax)
	}
}
