package pages

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jobgate/jobgate/frontend/handle"
)

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

// requestView is the request page.
type requestView struct {
	requestRow
	Meaning     []MeaningPart
	Prompt      string
	InputID     string
	ScopeDigest string
	// MeaningDigest is the digest of Prompt: the form sends it back so the decision records
	// the meaning this page displayed, or is refused as stale.
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
	Result                                       []Field
	Download                                     string
	ApprovalLink                                 string
	Link                                         string
	Charts                                       *evalCharts // an eval's pictures (charts.go)
	Parts                                        *partsView  // an export's parts
}

// jobRow is one row of "my jobs".
type jobRow struct {
	Link, JobID, Kind, Status, Created, Progress string
}

// ScopeStrings reads a list of strings from a scope value (decoded JSON or Go values); the
// frontend's adapter reads scopes with it too.
func ScopeStrings(v any) []string {
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

// GroupDigits writes n as 1,000,000 (exported for the job core's result rows, so every
// number on a page reads one way).
func GroupDigits(n int64) string {
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
			return GroupDigits(int64(n))
		}
	case int:
		if n > 0 {
			return GroupDigits(int64(n))
		}
	case int64:
		if n > 0 {
			return GroupDigits(n)
		}
	}
	return ""
}

// When is an instant as every page writes it: "2006-01-02 15:04 UTC" (the job core's result
// rows use it too, so a page reads one way).
func When(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

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

// requestRowOf renders the open request of job j. How long it has waited counts from the job's
// last change (entering awaiting_input), or its creation.
func requestRowOf(j *Job, now time.Time) requestRow {
	req := j.Request
	r := requestRow{Link: ApprovalPath(j.ID), JobID: j.ID, Kind: j.Kind, RequestedBy: req.RequestedBy,
		Purpose: scopeString(req.Scope, "purpose"), Dataset: scopeString(req.Scope, "dataset"),
		Format: scopeString(req.Scope, "format"), MaxRows: scopeRows(req.Scope)}
	if r.RequestedBy == "" {
		r.RequestedBy = j.Owner
	}
	sens := map[string]bool{}
	for _, c := range ScopeStrings(req.Scope["sensitive_columns"]) {
		sens[c] = true
	}
	for _, c := range ScopeStrings(req.Scope["columns"]) {
		r.Columns = append(r.Columns, column{Name: c, Sensitive: sens[c]})
	}
	since := slices.MaxFunc([]time.Time{j.Created, j.Updated}, time.Time.Compare)
	if !since.IsZero() && now.After(since) {
		r.Waited = waited(now.Sub(since))
	}
	if !req.ExpiresAt.IsZero() {
		r.Expires, r.ExpiresISO = When(req.ExpiresAt), req.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return r
}

// scopeText renders one listed scope value: objects and lists (an eval budget request's budget,
// spent, approve_extends_by) as compact JSON, anything else as fmt prints it.
func scopeText(v any) string {
	switch v.(type) {
	case map[string]any, []any:
		if b, err := json.Marshal(v); err == nil {
			return string(b)
		}
	}
	return fmt.Sprint(v)
}

// shownScopeKeys are the scope fields the request page shows in words; the rest are listed.
var shownScopeKeys = map[string]bool{"dataset": true, "columns": true, "sensitive_columns": true, "purpose": true, "format": true, "max_rows": true}

// renderRequest shows job j's request page to s, with msg as an alert (an error or a refusal)
// and comment kept in the form.
func (jp *jobPages) renderRequest(w http.ResponseWriter, r *http.Request, status int, s handle.Session, j *Job, msg, comment string) {
	jp.renderRequestWith(w, r, status, s, j, msg, comment, "")
}

// renderRequestWith is renderRequest with a "sign in again" link (reLogin, "" for none).
func (jp *jobPages) renderRequestWith(w http.ResponseWriter, r *http.Request, status int, s handle.Session, j *Job, msg, comment, reLogin string) {
	v := view{Title: "Approval request", Session: &s, Message: msg}
	rv := &requestView{Status: j.Status, Comment: comment, CSRF: s.CSRF, Action: ApprovalPath(j.ID), ReLogin: reLogin}
	if j.MayOpen {
		rv.JobLink = JobPath(j.ID)
	}
	if req := j.Request; req != nil {
		rv.requestRow = requestRowOf(j, jp.jobs.Now())
		rv.Prompt, rv.InputID, rv.ScopeDigest, rv.Open, rv.Sensitive = req.Prompt, req.InputID, req.ScopeDigest, true, req.Sensitive
		rv.MeaningDigest = req.MeaningDigest
		rv.Meaning = req.Meaning
		for k, val := range req.Scope {
			if !shownScopeKeys[k] {
				rv.Other = append(rv.Other, [2]string{k, scopeText(val)})
			}
		}
		sort.Slice(rv.Other, func(a, b int) bool { return rv.Other[a][0] < rv.Other[b][0] })
		if j.MayDecide {
			rv.CanDecide = true
		} else {
			rv.Refusal = "You cannot decide this request: " + j.Refusal + "."
		}
	} else {
		rv.JobID, rv.Kind = j.ID, j.Kind
	}
	v.Req = rv
	jp.render(w, r, status, "request", v)
}

// progressOf says how far a job got: "3 of 3 rows — message".
func progressOf(pr Progress) string {
	if pr.Total <= 0 && pr.Done <= 0 && pr.Message == "" {
		return ""
	}
	s := fmt.Sprintf("%s of %s %s", GroupDigits(int64(pr.Done)), GroupDigits(int64(pr.Total)), pr.Unit)
	if pr.Total == 0 {
		s = GroupDigits(int64(pr.Done)) + " " + pr.Unit
	}
	if pr.Message != "" {
		s = strings.TrimSpace(s + " — " + pr.Message)
	}
	return s
}

// jobViewOf renders job j for s: status, progress, error, and its result as its kind shows it
// (with a download link bound to s).
func (jp *jobPages) jobViewOf(r *http.Request, s handle.Session, j *Job) *jobView {
	v := &jobView{JobID: j.ID, Kind: j.Kind, Status: strings.ReplaceAll(j.Status, "_", " "), Owner: j.Owner,
		Created: When(j.Created), Updated: When(j.Updated), Link: JobPath(j.ID), Progress: progressOf(j.Progress), Error: j.Error}
	if j.Request != nil && j.ApprovalLink {
		v.ApprovalLink = ApprovalPath(j.ID)
	}
	res := jp.jobs.Result(r.Context(), s, j)
	v.Result, v.Download = res.Fields, res.Download
	v.Charts, v.Parts = evalChartsOf(res.Episodes), partsOf(res.Parts)
	return v
}

func jobRowOf(j *Job) jobRow {
	r := jobRow{Link: JobPath(j.ID), JobID: j.ID, Kind: j.Kind, Status: strings.ReplaceAll(j.Status, "_", " "),
		Created: When(j.Created)}
	if pr := j.Progress; pr.Total > 0 {
		r.Progress = fmt.Sprintf("%s of %s %s", GroupDigits(int64(pr.Done)), GroupDigits(int64(pr.Total)), pr.Unit)
	}
	return r
}
