package frontend

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/workflows"
	"github.com/jobgate/jobgate/workflows/jobstate"
)

//go:embed pagetemplates/*.html
var pageTemplatesFS embed.FS

// pageTmpl are the people's pages, each parsed with frontend/pages' layout (one look for /me,
// /approvals and /jobs).
var pageTmpl = func() map[string]*template.Template {
	m := map[string]*template.Template{}
	for _, name := range []string{"inbox", "request", "outcome", "jobs", "job", "message"} {
		m[name] = template.Must(pages.ParseWithLayout(pageTemplatesFS, "pagetemplates/"+name+".html", "pagetemplates/parts.html"))
	}
	return m
}()

// pageView is what every people's page template gets.
type pageView struct {
	Title   string
	Message string // an error or explanation, shown as an alert
	Notice  string // a success, shown as a status
	Session *handle.Session
	Rows    []requestRow // inbox
	JobRows []jobRow     // my jobs
	Next    string       // the next page's link (signed cursor)
	Req     *requestView
	Job     *jobView
	// Decision and Comment: the outcome page's decision as sent.
	Decision, Comment string
}

// Who names the signed-in person for the header.
func (v pageView) Who() string {
	if v.Session == nil {
		return ""
	}
	if v.Session.Name != "" {
		return v.Session.Name
	}
	return v.Session.Subject
}

type column struct {
	Name      string
	Sensitive bool
}

// requestRow is one open request as the inbox lists it.
type requestRow struct {
	Link, JobID, Kind, RequestedBy, Purpose, Dataset, Format, MaxRows string
	Columns                                                           []column
	Waited, Expires, ExpiresISO                                       string
}

// meaningPart is a piece of the meaning sentence; Strong marks a sensitive column.
type meaningPart struct {
	Text   string
	Strong bool
}

// requestView is the request page.
type requestView struct {
	requestRow
	Meaning     []meaningPart
	Prompt      string
	InputID     string
	ScopeDigest string
	// MeaningDigest is workflows.MeaningDigest of Prompt: the form sends it back so the
	// decision records the meaning this page displayed, or is refused as stale.
	MeaningDigest string
	Other         [][2]string // scope fields not shown above, sorted by name
	Open          bool        // the request is open
	CanDecide     bool        // the person may answer it
	Refusal       string      // why not, when open and CanDecide is false
	Sensitive     bool
	Action        string // the form's action
	CSRF          string
	Comment       string // the comment typed before an error, kept
	ReLogin       string // a "sign in again" link back to this request, when the sign-in was too old
	JobLink       string // the job page, for those who may read it
	Status        string
}

// jobView is a job's page and the outcome page.
type jobView struct {
	JobID, Kind, Status, Owner, Created, Updated string
	Progress                                     string
	Error                                        string
	Result                                       [][2]string
	Download                                     string
	ApprovalLink                                 string
	Link                                         string
}

// jobRow is one row of "my jobs".
type jobRow struct {
	Link, JobID, Kind, Status, Created, Progress string
}

func (pf *pagesFE) render(w http.ResponseWriter, status int, page string, v pageView) {
	var b bytes.Buffer
	if err := pageTmpl[page].Execute(&b, v); err != nil {
		pf.f.log.Error("page rendering failed: " + err.Error())
		http.Error(w, "page rendering failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// scopeStrings reads a list of strings from a scope value (decoded JSON or Go values).
func scopeStrings(v any) []string {
	switch l := v.(type) {
	case []string:
		return l
	case []any:
		out := make([]string, 0, len(l))
		for _, x := range l {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	return nil
}

func scopeString(scope map[string]any, k string) string {
	if v, ok := scope[k]; ok && v != nil {
		return fmt.Sprint(v)
	}
	return ""
}

// groupDigits writes n as 1,000,000.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func scopeRows(scope map[string]any) string {
	switch n := scope["max_rows"].(type) {
	case float64:
		if n > 0 {
			return groupDigits(int64(n))
		}
	case int:
		if n > 0 {
			return groupDigits(int64(n))
		}
	case int64:
		if n > 0 {
			return groupDigits(n)
		}
	}
	return ""
}

// sensitive reports whether the request's scope names a sensitive column: approving it needs a
// recent sign-in.
func sensitive(ni *workflows.NeedsInput) bool {
	return len(scopeStrings(ni.Scope["sensitive_columns"])) > 0
}

func when(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// waited says a duration the way people do: "under a minute", "12 min", "3 h 5 min", "2 days".
func waited(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
}

// requestRowOf renders an open request of job summary js. How long it has waited counts from
// the job's last change (entering awaiting_input), or its creation.
func requestRowOf(js JobSummary, now time.Time) requestRow {
	ni := js.NeedsInput
	r := requestRow{Link: ApprovalPagePath(js.JobID), JobID: js.JobID, Kind: js.Kind, RequestedBy: ni.RequestedBy,
		Purpose: scopeString(ni.Scope, "purpose"), Dataset: scopeString(ni.Scope, "dataset"),
		Format: scopeString(ni.Scope, "format"), MaxRows: scopeRows(ni.Scope)}
	if r.RequestedBy == "" {
		r.RequestedBy = js.Owner
	}
	sens := map[string]bool{}
	for _, c := range scopeStrings(ni.Scope["sensitive_columns"]) {
		sens[c] = true
	}
	for _, c := range scopeStrings(ni.Scope["columns"]) {
		r.Columns = append(r.Columns, column{Name: c, Sensitive: sens[c]})
	}
	since := latest(js.CreatedAt, js.UpdatedAt)
	if !since.IsZero() && now.After(since) {
		r.Waited = waited(now.Sub(since))
	}
	if !ni.ExpiresAt.IsZero() {
		r.Expires, r.ExpiresISO = when(ni.ExpiresAt), ni.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return r
}

// pageMeaning is what approving means, in words: for an export the sentence every surface shows
// and the decision record keeps (jobstate.ExportMeaning), with sensitive columns in <strong> and
// said in words too, e.g. "Allow ana@acme to export id, name and email (sensitive) of customers
// (up to 1,000,000 rows), csv, for 'renewal mailing'"; for other kinds the request's prompt.
func pageMeaning(requestedBy, tenant string, scope map[string]any, prompt string) []meaningPart {
	m, ok := jobstate.ExportMeaningFromScope(requestedBy, tenant, scope)
	if !ok {
		return []meaningPart{{Text: prompt}}
	}
	var parts []meaningPart
	for _, p := range m.Parts() {
		if p.Sensitive {
			p.Text += " (sensitive)" // bold alone is not read out by screen readers
		}
		parts = append(parts, meaningPart{Text: p.Text, Strong: p.Sensitive})
	}
	return parts
}

// shownScopeKeys are the scope fields the request page shows in words; the rest are listed.
var shownScopeKeys = map[string]bool{"dataset": true, "columns": true, "sensitive_columns": true, "purpose": true, "format": true, "max_rows": true}

// renderRequest shows job j's request page to p, with msg as an alert (an error or a refusal)
// and comment kept in the form.
func (pf *pagesFE) renderRequest(w http.ResponseWriter, status int, s handle.Session, p authz.Principal, j *jobstore.Job, msg, comment string) {
	pf.renderRequestWith(w, status, s, p, j, msg, comment, "")
}

// renderRequestWith is renderRequest with a "sign in again" link (reLogin, "" for none).
func (pf *pagesFE) renderRequestWith(w http.ResponseWriter, status int, s handle.Session, p authz.Principal, j *jobstore.Job, msg, comment, reLogin string) {
	v := pageView{Title: "Approval request", Session: &s, Message: msg}
	rv := &requestView{Status: string(j.Status()), Comment: comment, CSRF: s.CSRF, Action: ApprovalPagePath(j.ID), ReLogin: reLogin}
	if authz.Decide(p, authz.ActionGet, workflows.PolicyJob(j.Tenant, j.Owner, nil)) == authz.Allow {
		rv.JobLink = JobPagePath(j.ID)
	}
	if ni := j.NeedsInput; ni != nil && j.Status() == workflows.StatusAwaitingInput {
		js := pf.f.summary(p, j)
		rv.requestRow = requestRowOf(js, pf.f.opts.Now())
		rv.Prompt, rv.InputID, rv.ScopeDigest, rv.Open, rv.Sensitive = ni.Prompt, ni.InputID, ni.ScopeDigest, true, sensitive(ni)
		rv.MeaningDigest = workflows.MeaningDigest(ni.Prompt)
		rv.Meaning = pageMeaning(rv.RequestedBy, j.Tenant, ni.Scope, ni.Prompt)
		for k, val := range ni.Scope {
			if !shownScopeKeys[k] {
				rv.Other = append(rv.Other, [2]string{k, fmt.Sprint(val)})
			}
		}
		sort.Slice(rv.Other, func(a, b int) bool { return rv.Other[a][0] < rv.Other[b][0] })
		if authz.Decide(p, authz.ActionResume, j.PolicyJob()) == authz.Allow {
			rv.CanDecide = true
		} else {
			rv.Refusal = "You cannot decide this request: " + authz.ResumeRefusal(p, j.PolicyJob()) + "."
		}
	} else {
		rv.JobID, rv.Kind = j.ID, j.Kind
	}
	v.Req = rv
	pf.render(w, status, "request", v)
}

// jobViewOf renders job j for p: status, progress, error, and for a succeeded export its
// result and a download link bound to p.
func (pf *pagesFE) jobViewOf(ctx context.Context, p authz.Principal, j *jobstore.Job) *jobView {
	js := pf.f.summary(p, j)
	v := &jobView{JobID: j.ID, Kind: j.Kind, Status: strings.ReplaceAll(string(js.Status), "_", " "), Owner: j.Owner,
		Created: when(js.CreatedAt), Updated: when(js.UpdatedAt), Link: JobPagePath(j.ID)}
	if pr := js.Progress; pr.Total > 0 || pr.Done > 0 || pr.Message != "" {
		v.Progress = fmt.Sprintf("%s of %s %s", groupDigits(int64(pr.Done)), groupDigits(int64(pr.Total)), pr.Unit)
		if pr.Total == 0 {
			v.Progress = groupDigits(int64(pr.Done)) + " " + pr.Unit
		}
		if pr.Message != "" {
			v.Progress = strings.TrimSpace(v.Progress + " — " + pr.Message)
		}
	}
	if js.Error != nil {
		v.Error = js.Error.Message + " (" + js.Error.Code + ")"
	}
	if js.NeedsInput != nil && (js.NeedsInput.Approver == authz.ApproverApprover || authz.Decide(p, authz.ActionResume, j.PolicyJob()) == authz.Allow) {
		v.ApprovalLink = ApprovalPagePath(j.ID)
	}
	if js.Status == workflows.StatusSucceeded && j.Kind == workflows.KindExport && authz.Decide(p, authz.ActionGet, j.PolicyJob()) == authz.Allow {
		var res workflows.ExportResult
		if err := pf.f.readResult(ctx, j, &res); err == nil {
			m := res.Manifest
			v.Result = [][2]string{{"Rows", groupDigits(int64(m.Rows))}, {"Format", m.Format},
				{"Columns", strings.Join(m.Columns, ", ")}, {"File", m.FileName}, {"SHA-256", m.SHA256},
				{"Available until", when(m.ExpiresAt)}}
			if res.Decision != nil {
				v.Result = append(v.Result, decisionRows(res.Decision)...)
			} else if res.ApprovedBy != "" {
				v.Result = append(v.Result, [2]string{"Approved by", res.ApprovedBy})
			}
			v.Download = pf.pageDownloadPath(p, j, exportManifestRef{sha256: m.SHA256, expires: m.ExpiresAt})
		}
	}
	if js.Status == workflows.StatusSucceeded && j.Kind == workflows.KindEval && authz.Decide(p, authz.ActionGet, j.PolicyJob()) == authz.Allow {
		var res workflows.EvalResult
		if err := pf.f.readResult(ctx, j, &res); err == nil && res.Decision != nil {
			v.Result = decisionRows(res.Decision)
			if n := len(v.Result) - 1; v.Result[n][0] == "Record" { // an eval has no manifest
				v.Result[n][1] = "sealed; kept in the job's history"
			}
		}
	}
	if j.Decision != nil { // the job ended by a rejection: who rejected it, how and why
		v.Result = decisionRows(j.Decision)
	}
	return v
}

// decisionRows are the decision record in words for the job page: who answered (and who vouched
// for them), when and how, what they were shown, their comment, and where the sealed copy is.
func decisionRows(d *workflows.DecisionRecord) [][2]string {
	who := d.By
	if d.Name != "" {
		who = d.Name + " (" + d.By + ")"
	}
	if d.Email != "" {
		who += " <" + d.Email + ">"
	}
	if d.Issuer != "" {
		who += ", signed in at " + d.Issuer
	}
	how := "via " + d.Surface
	if d.SignedInWith != "" {
		how += " (" + d.SignedInWith + ")"
	}
	if !d.AuthTime.IsZero() {
		how += ", authenticated " + when(d.AuthTime)
	}
	if len(d.AMR) > 0 {
		how += " with " + strings.Join(d.AMR, ", ")
	}
	verb := map[string]string{workflows.DecisionApprove: "Approved by", workflows.DecisionReject: "Rejected by"}[d.Decision]
	if verb == "" {
		verb = "Answered by"
	}
	rows := [][2]string{{verb, who}, {"Decided", when(d.At) + ", " + how}}
	what, comment, scope, seal := "What was approved", "Approver's comment", "Approved scope",
		"sealed; check it with jobgate verify on the export's manifest.json"
	if d.Decision == workflows.DecisionReject { // no artifact, no manifest: the record is in the job's history
		what, comment, scope, seal = "What was rejected", "Reason given", "Rejected scope", "sealed; kept in the job's history"
	}
	if d.Prompt != "" {
		rows = append(rows, [2]string{what, strings.ReplaceAll(d.Prompt, "**", "")})
	}
	if d.Comment != "" {
		rows = append(rows, [2]string{comment, d.Comment})
	}
	rows = append(rows, [2]string{scope, d.ScopeDigest})
	if d.Seal != "" {
		rows = append(rows, [2]string{"Record", seal})
	}
	return rows
}

func jobRowOf(js JobSummary) jobRow {
	r := jobRow{Link: JobPagePath(js.JobID), JobID: js.JobID, Kind: js.Kind, Status: strings.ReplaceAll(string(js.Status), "_", " "),
		Created: when(js.CreatedAt)}
	if pr := js.Progress; pr.Total > 0 {
		r.Progress = fmt.Sprintf("%s of %s %s", groupDigits(int64(pr.Done)), groupDigits(int64(pr.Total)), pr.Unit)
	}
	return r
}
