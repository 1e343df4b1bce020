package pages

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/tests/support/webclient"
)

// The job pages against a fake job core (fakeJobs): what the pages do with what Jobs answers —
// the inbox, the request page and its form's checks, the fresh sign-in for a sensitive scope,
// the one 404, my jobs and the job page. What the real core answers (list_approvals' filter,
// the sealed resume, an export's result in words) is frontend's pages_port_test.go.

// fakeJobs is a job core of one tenant's jobs with a simple policy: anyone of the tenant reads
// every job; a person with jobs:approve answers any request but their own (four eyes).
type fakeJobs struct {
	mu        sync.Mutex
	now       time.Time
	jobs      map[string]Job
	results   map[string]Result
	decisions []Decision
	refuse    string // when set, Decide refuses with this reason
	down      bool   // the job store cannot be reached
	next      string // the next cursor Approvals and List answer
}

var errDown = errors.New("job store down")

func (f *fakeJobs) Now() time.Time                     { return f.now }
func (f *fakeJobs) Logger(context.Context) *zap.Logger { return zap.NewNop() }
func has(s handle.Session, sc authz.Scope) bool {
	return strings.Contains(" "+strings.Join(s.Scopes, " ")+" ", " "+string(sc)+" ")
}
func (f *fakeJobs) stale(cursor string) bool { return cursor != "" && cursor != f.next }
func (f *fakeJobs) visible(s handle.Session, j Job) bool {
	return strings.HasPrefix(j.ID, s.Tenant+"/")
}

func (f *fakeJobs) policy(s handle.Session, j Job) *Job {
	j.MayDecide = has(s, authz.ScopeApprove) && s.Subject != j.Owner
	if !j.MayDecide {
		j.Refusal = "four eyes: someone other than the owner must approve"
	}
	j.MayOpen = s.Subject == j.Owner
	j.ApprovalLink = j.Request != nil
	j.Ref = j.ID
	return &j
}

func (f *fakeJobs) list(s handle.Session, cursor string, keep func(Job) bool) (JobList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.down:
		return JobList{}, errDown
	case f.stale(cursor):
		return JobList{}, &JobsError{Code: ErrStaleLink, Message: "cursor: not yours"}
	}
	var l JobList
	for _, j := range f.jobs {
		if f.visible(s, j) && keep(j) {
			l.Jobs = append(l.Jobs, j)
		}
	}
	if cursor == "" {
		l.Next = f.next
	}
	return l, nil
}

func (f *fakeJobs) Approvals(_ context.Context, s handle.Session, cursor string) (JobList, error) {
	if !has(s, authz.ScopeApprove) {
		return JobList{}, &JobsError{Code: ErrForbidden}
	}
	return f.list(s, cursor, func(j Job) bool { return j.Request != nil && j.Owner != s.Subject })
}

func (f *fakeJobs) List(_ context.Context, s handle.Session, cursor string) (JobList, error) {
	if !has(s, authz.ScopeRead) {
		return JobList{}, &JobsError{Code: ErrForbidden}
	}
	return f.list(s, cursor, func(j Job) bool { return j.Owner == s.Subject })
}

func (f *fakeJobs) Job(_ context.Context, s handle.Session, id string) (*Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	switch {
	case f.down:
		return nil, errDown
	case !ok || !f.visible(s, j):
		return nil, &JobsError{Code: ErrNotFound, Message: "no such job"}
	}
	return f.policy(s, j), nil
}

func (f *fakeJobs) Result(_ context.Context, _ handle.Session, j *Job) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.results[j.Ref.(string)]
}

func (f *fakeJobs) Decide(_ context.Context, s handle.Session, j *Job, d Decision) (*Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != "" {
		return nil, &JobsError{Code: ErrRefused, Message: f.refuse}
	}
	f.decisions = append(f.decisions, d)
	after := f.jobs[j.Ref.(string)]
	after.Request, after.Status = nil, "running"
	f.jobs[after.ID] = after
	return f.policy(s, after), nil
}

func (f *fakeJobs) ServeDownload(w http.ResponseWriter, r *http.Request, s handle.Session) {
	io.WriteString(w, "the file of "+r.PathValue("token")+" for "+s.Subject)
}

// jobsEnv is the job pages over a fakeJobs behind real sessions (cookies sealed with the handle
// keys as a sign-in would) and a discovery document for the re-login redirect.
type jobsEnv struct {
	t    testing.TB
	jobs *fakeJobs
	srv  *httptest.Server
	idp  *httptest.Server
	keys *handle.Keyring
}

var fakeNow = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

const (
	pageJobID  = "acme/export/ana/q3"
	anaPrompt  = `ana asks to export dataset "customers"`
	anaMeaning = "md:ana"
)

func newJobsEnv(t testing.TB) *jobsEnv {
	t.Helper()
	e := &jobsEnv{t: t, keys: testKeys(t), jobs: &fakeJobs{now: fakeNow, jobs: map[string]Job{}, results: map[string]Result{}}}
	e.idp = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := "http://" + r.Host
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": base, "authorization_endpoint": base + "/authorize",
			"token_endpoint": base + "/token", "jwks_uri": base + "/jwks", "code_challenge_methods_supported": []string{"S256"}})
	}))
	t.Cleanup(e.idp.Close)
	p, err := New(Config{Issuer: e.idp.URL, ClientID: "jobgate-pages", PublicURL: "http://localhost", Keys: e.keys,
		Now: func() time.Time { return fakeNow }})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(p.JobsHandler(e.jobs, 0))
	t.Cleanup(e.srv.Close)
	return e
}

// session is a signed-in person's cookie value, authenticated authAge ago.
func (e *jobsEnv) session(sub, tenant string, authAge time.Duration, scopes ...authz.Scope) string {
	s := handle.Session{Issuer: e.idp.URL, Subject: sub, Tenant: tenant, Scopes: authz.ScopeStrings(scopes),
		AuthTime: fakeNow.Add(-authAge), CSRF: "csrf-" + sub, Expiry: fakeNow.Add(time.Hour), Name: "Person " + sub}
	v := e.keys.SealSession(s)
	if v == "" {
		e.t.Fatal("session not sealed")
	}
	return v
}

func (e *jobsEnv) do(method, path, cookie string, form url.Values) page {
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
	req.AddCookie(&http.Cookie{Name: "jobgate_session", Value: cookie})
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return page{status: resp.StatusCode, body: string(b), loc: resp.Header.Get("Location"), header: resp.Header}
}

// awaiting stores owner's export of customers with the sensitive column email, waiting for an
// approver for 12 minutes (of the fake's clock).
func (e *jobsEnv) awaiting(id, owner string) {
	e.jobs.mu.Lock()
	now := e.jobs.now
	defer e.jobs.mu.Unlock()
	e.jobs.jobs[id] = Job{ID: id, Kind: "export", Owner: owner, Status: "awaiting_input",
		Created: now.Add(-12 * time.Minute), Updated: now.Add(-12 * time.Minute),
		Request: &Request{InputID: "approve", ScopeDigest: "sha256:d1", Prompt: anaPrompt, MeaningDigest: anaMeaning,
			RequestedBy: owner, ExpiresAt: now.Add(24 * time.Hour), Sensitive: true,
			Scope: map[string]any{"dataset": "customers", "columns": []any{"id", "name", "email"}, "format": "csv",
				"purpose": "renewal mailing for Q3", "sensitive_columns": []any{"email"}, "max_rows": float64(1000000),
				"config_digest": "sha256:cfg"},
			Meaning: []MeaningPart{{Text: "Allow " + owner + "@acme to export id, name and "}, {Text: "email (sensitive)", Strong: true},
				{Text: " of customers"}}}}
}

func decisionForm(csrf, inputID, digest, decision, comment string) url.Values {
	return url.Values{"csrf": {csrf}, "input_id": {inputID}, "scope_digest": {digest}, "decision": {decision},
		"comment": {comment}, "meaning_digest": {anaMeaning}}
}

func contains(t *testing.T, r page, status int, subs ...string) {
	t.Helper()
	webclient.MustPage(t, r.status, r.body, status, subs...)
}

var (
	reqPath   = ApprovalPath(pageJobID)
	approver  = []authz.Scope{authz.ScopeApprove}
	ownerRead = []authz.Scope{authz.ScopeRead, authz.ScopeWrite}
	navMarkup = `<nav aria-label="Main">`
)

// The inbox lists the open requests Approvals answers in words (sensitive columns bold and said),
// with the next page's link; a person without jobs:approve, a stale cursor and a store that is
// down each get their page.
func TestJobPages_Inbox(t *testing.T) {
	e := newJobsEnv(t)
	e.awaiting(pageJobID, "ana")
	e.jobs.next = "c2"
	steward := e.session("steward", "acme", time.Minute, approver...)
	r := e.do("GET", PathApprovals, steward, nil)
	contains(t, r, 200, navMarkup, "Signed in as Person steward", "ana", "renewal mailing for Q3", "customers",
		`<strong class="sensitive">email (sensitive)</strong>`, "1,000,000", "12 min", `<time datetime="2030-01-02T12:00:00Z">2030-01-02 12:00 UTC</time>`,
		`href="/approvals/acme%2Fexport%2Fana%2Fq3"`, `href="/approvals?cursor=c2" rel="next"`, `<th scope="col">`)
	contains(t, e.do("GET", PathApprovals+"?cursor=old", steward, nil), 400, "Page link out of date", navMarkup)
	contains(t, e.do("GET", PathApprovals, e.session("ana", "acme", time.Minute, ownerRead...), nil), 403, "jobs:approve", `role="alert"`)
	e.jobs.jobs = map[string]Job{}
	contains(t, e.do("GET", PathApprovals, steward, nil), 200, "Nothing is waiting for your answer")
	e.jobs.down = true
	contains(t, e.do("GET", PathApprovals, steward, nil), 503, "Try again later", "reload the page")
	if r := e.do("GET", PathApprovals, "", nil); r.status != http.StatusSeeOther || !strings.Contains(r.loc, "/login?return=%2Fapprovals") {
		t.Fatalf("no session: %d %q", r.status, r.loc)
	}
}

// The request page shows the meaning and the form; the form decides only the open request as
// displayed, and a replay decides nothing twice.
func TestJobPages_Decide(t *testing.T) {
	e := newJobsEnv(t)
	e.awaiting(pageJobID, "ana")
	steward := e.session("steward", "acme", time.Minute, approver...)
	contains(t, e.do("GET", reqPath, steward, nil), 200, "Allow ana@acme to export id, name and <strong class=\"sensitive\">email (sensitive)</strong> of customers",
		`name="input_id" value="approve"`, `name="scope_digest" value="sha256:d1"`, `name="meaning_digest" value="md:ana"`,
		`name="csrf" value="csrf-steward"`, `<label for="comment">`, "config_digest", "approving needs a recent sign-in")
	for _, c := range []struct {
		form   url.Values
		status int
		want   string
	}{
		{decisionForm("csrf-steward", "approve", "sha256:d0", "approve", "kept"), 409, "The request changed since you opened this page"},
		{decisionForm("csrf-steward", "approve", "sha256:d1", "reject", "  "), 400, "A comment is required to reject"},
		{decisionForm("csrf-steward", "approve", "sha256:d1", "maybe", ""), 400, "Choose Approve or Reject"},
		{decisionForm("csrf-steward", "approve", "sha256:d1", "reject", strings.Repeat("é", CommentMax+1)), 400, "The comment is too long"},
	} {
		contains(t, e.do("POST", reqPath, steward, c.form), c.status, c.want)
	}
	stale := decisionForm("csrf-steward", "approve", "sha256:d1", "approve", "kept")
	stale.Set("meaning_digest", "md:other")
	contains(t, e.do("POST", reqPath, steward, stale), 409, "The request changed", ">kept</textarea>")
	e.jobs.refuse = "the request was answered meanwhile"
	contains(t, e.do("POST", reqPath, steward, decisionForm("csrf-steward", "approve", "sha256:d1", "approve", "")), 409,
		"Not decided: the request was answered meanwhile.")
	if len(e.jobs.decisions) != 0 {
		t.Fatalf("decided %+v", e.jobs.decisions)
	}
	e.jobs.refuse = ""
	contains(t, e.do("POST", reqPath, steward, decisionForm("csrf-steward", "approve", "sha256:d1", "approve", "ok for Q3")), 200,
		"You approved this request", "running", `role="status"`, "ok for Q3")
	if d := e.jobs.decisions; len(d) != 1 || d[0] != (Decision{InputID: "approve", ScopeDigest: "sha256:d1", Decision: DecisionApprove, Comment: "ok for Q3"}) {
		t.Fatalf("decisions %+v", d)
	}
	contains(t, e.do("POST", reqPath, steward, decisionForm("csrf-steward", "approve", "sha256:d1", "approve", "ok for Q3")), 409,
		"This request was already answered or is no longer open; nothing was changed.", "running")
	if len(e.jobs.decisions) != 1 {
		t.Fatalf("a replay decided again: %+v", e.jobs.decisions)
	}
}

// The owner sees her request with the refusal instead of the form, and her POST is refused.
func TestJobPages_Refusal(t *testing.T) {
	e := newJobsEnv(t)
	e.awaiting(pageJobID, "ana")
	ana := e.session("ana", "acme", time.Minute, authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove)
	r := e.do("GET", reqPath, ana, nil)
	contains(t, r, 200, "You cannot decide this request: four eyes", `href="/jobs/acme%2Fexport%2Fana%2Fq3"`)
	if strings.Contains(r.body, `name="decision"`) {
		t.Fatal("the owner is offered the decision form")
	}
	contains(t, e.do("POST", reqPath, ana, decisionForm("csrf-ana", "approve", "sha256:d1", "approve", "")), 403, "four eyes")
	if len(e.jobs.decisions) != 0 {
		t.Fatal("the owner decided")
	}
}

// An old sign-in: the request page goes back to the provider; an approval is refused with the
// comment kept and a link to sign in again; a rejection needs no fresh sign-in.
func TestJobPages_FreshLogin(t *testing.T) {
	e := newJobsEnv(t)
	e.awaiting(pageJobID, "ana")
	old := e.session("steward", "acme", time.Hour, approver...)
	if r := e.do("GET", reqPath, old, nil); r.status != http.StatusFound || !strings.Contains(r.loc, "prompt=login") || !strings.Contains(r.loc, "max_age=300") {
		t.Fatalf("old sign-in: %d %q", r.status, r.loc)
	}
	r := e.do("POST", reqPath, old, decisionForm("csrf-steward", "approve", "sha256:d1", "approve", "ok for Q3"))
	contains(t, r, 403, "needs a sign-in from the last 5 minutes", "Nothing was decided", `href="`+reqPath+`?draft=jgt1.`, ">ok for Q3</textarea>")
	link := html.UnescapeString(reReLogin.FindStringSubmatch(r.body)[1]) // the sealed draft: TestJobPages_CommentDraftSealed
	fresh := e.session("steward", "acme", time.Minute, approver...)
	contains(t, e.do("GET", link, fresh, nil), 200, ">ok for Q3</textarea>")
	contains(t, e.do("POST", reqPath, old, decisionForm("csrf-steward", "approve", "sha256:d1", "reject", "no")), 200, "You rejected")
}

// A missing job and another tenant's read the same 404 page, byte for byte: the one layout with
// the navigation, an alert and the way back.
func TestJobPages_NotFoundSameBytes(t *testing.T) {
	e := newJobsEnv(t)
	e.awaiting(pageJobID, "ana")
	steward := e.session("steward", "acme", time.Minute, approver...)
	want := e.do("GET", ApprovalPath("acme/export/ana/nope"), steward, nil)
	contains(t, want, 404, notFoundMsg, navMarkup, `class="warn" role="alert"`, `<a href="/approvals">Back to approvals</a>`)
	gus := e.session("gus", "globex", time.Minute, approver...)
	for _, p := range []string{reqPath, JobPath(pageJobID)} {
		if r := e.do("GET", p, gus, nil); r.status != 404 || r.body != want.body {
			t.Fatalf("%s: %d, body differs from a missing job's:\n%s", p, r.status, r.body)
		}
	}
}

// My jobs lists the person's jobs; the job page shows the result the kind gives (a digest as
// code), its download link and the open request's link.
func TestJobPages_MyJobs(t *testing.T) {
	e := newJobsEnv(t)
	e.awaiting(pageJobID, "ana")
	id := "acme/export/ana/done"
	e.jobs.jobs[id] = Job{ID: id, Kind: "export", Owner: "ana", Status: "succeeded", Created: fakeNow.Add(-time.Hour),
		Updated: fakeNow, Progress: Progress{Done: 3, Total: 3, Unit: "rows"}}
	e.jobs.results[id] = Result{Fields: []Field{{Label: "File", Value: "q3.csv.gz"}, {Label: "SHA-256", Value: "abab", Code: true}},
		Download: PathDownload + "tok"}
	ana := e.session("ana", "acme", time.Hour, ownerRead...)
	contains(t, e.do("GET", PathJobs, ana, nil), 200, `href="/jobs/acme%2Fexport%2Fana%2Fdone"`, "succeeded", "3 of 3 rows", "awaiting input")
	contains(t, e.do("GET", JobPath(id), ana, nil), 200, "<dt>File</dt><dd>q3.csv.gz</dd>", "<dd><code>abab</code></dd>",
		`<a class="button" href="/jobs/download/tok" download>`, "2030-01-01 11:00 UTC")
	contains(t, e.do("GET", JobPath(pageJobID), ana, nil), 200, `href="/approvals/acme%2Fexport%2Fana%2Fq3"`, "awaiting input")
	contains(t, e.do("GET", PathDownload+"tok", ana, nil), 200, "the file of tok for ana")
	contains(t, e.do("GET", PathJobs, e.session("steward", "acme", time.Hour, approver...), nil), 403, "jobs:read")
}

// FuzzApprovalsPagesDecide: whatever path segment and form a signed-in approver sends, the
// page never fails (5xx) nor panics, and a decision reaches the job core only for its open
// input_id and scope_digest with approve, or reject with a comment.
func FuzzApprovalsPagesDecide(f *testing.F) {
	f.Add(pageJobID, "approve", "sha256:d1", "approve", "")
	f.Add(pageJobID, "approve", "sha256:d1", "reject", "")
	f.Add(pageJobID, "approve", "sha256:d1", "reject", "why")
	f.Add("acme/export/ana/q3/../x", "approve", "sha256:d0", "approve", "")
	f.Add("globex/export/gus/k", "approve", "sha256:d1", "approve", "x")
	f.Add("acme\x00", "\xff", "", "APPROVE", strings.Repeat("é", 1001))
	e := newJobsEnv(f) // one stack; each input gets the open request afresh
	steward := e.session("steward", "acme", time.Minute, approver...)
	f.Fuzz(func(t *testing.T, id, inputID, digest, decision, comment string) {
		e.t = t
		e.jobs.mu.Lock()
		e.jobs.decisions = nil
		e.jobs.mu.Unlock()
		e.awaiting(pageJobID, "ana")
		r := e.do("POST", "/approvals/"+url.PathEscape(id), steward, decisionForm("csrf-steward", inputID, digest, decision, comment))
		if r.status >= 500 {
			t.Fatalf("%d:\n%s", r.status, r.body)
		}
		valid := id == pageJobID && inputID == "approve" && digest == "sha256:d1" &&
			(decision == "approve" || decision == "reject" && strings.TrimSpace(comment) != "") && utf8.RuneCountInString(strings.TrimSpace(comment)) <= CommentMax
		if got := len(e.jobs.decisions); got != map[bool]int{true: 1, false: 0}[valid] {
			t.Fatalf("%d decisions for id %q input %q digest %q decision %q comment %q", got, id, inputID, digest, decision, comment)
		}
	})
}
