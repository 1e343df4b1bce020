// store_query.go renders a jobstore.Filter in Temporal's visibility query language: the only place
// the frontend writes query text (the Temporal store's List and Count use it).

package temporalstore

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// visibilityQuery is f as a visibility query. Every value is validated first (f.validate) and
// every string literal quoted, so nothing in f can change the query's shape.
func VisibilityQuery(f jobstore.Filter) (string, error) {
	if err := f.Validate(); err != nil {
		return "", err
	}
	q := &quoter{}
	cs := []string{"JobTenant = " + q.quote(f.Tenant)}
	if f.Owner != "" {
		cs = append(cs, "JobOwner = "+q.quote(f.Owner))
	}
	if len(f.Owners) > 0 {
		cs = append(cs, q.oneOf("JobOwner", f.Owners))
	}
	if f.IDs != nil {
		if len(f.IDs) == 0 {
			// No ID: nothing is selected (IN () is not in the language).
			cs = append(cs, "WorkflowId = ''")
		} else {
			cs = append(cs, "WorkflowId IN ("+q.all(f.IDs)+")")
		}
	}
	if len(f.ExcludeIDs) > 0 {
		cs = append(cs, "WorkflowId NOT IN ("+q.all(f.ExcludeIDs)+")")
	}
	switch f.Runs {
	case jobstore.RunsLatest:
		cs = append(cs, "ExecutionStatus != 'ContinuedAsNew'")
	case jobstore.RunsUnfinished:
		cs = append(cs, "ExecutionStatus = 'Running'")
	case jobstore.RunsContinued:
		cs = append(cs, "ExecutionStatus = 'ContinuedAsNew'")
	}
	if len(f.Kinds) > 0 {
		cs = append(cs, q.oneOf("JobKind", f.Kinds))
	}
	if f.Status != "" {
		c, ok := statusClause(f.Status)
		if !ok {
			return "", fmt.Errorf("status: %w", jobstore.ErrQueryValue)
		}
		cs = append(cs, c)
	}
	if len(f.Answerers) > 0 {
		cs = append(cs, answererClause(q, f))
	}
	if !f.StartedSince.IsZero() {
		cs = append(cs, "StartTime >= "+queryTime(f.StartedSince))
	}
	if !f.StartedBefore.IsZero() {
		cs = append(cs, "StartTime < "+queryTime(f.StartedBefore))
	}
	if !f.ClosedSince.IsZero() {
		cs = append(cs, "CloseTime >= "+queryTime(f.ClosedSince))
	}
	if c := slotsClause(f); c != "" {
		cs = append(cs, c)
	}
	if q.err != nil {
		return "", q.err
	}
	return strings.Join(cs, " AND "), nil
}

// quoter quotes string literals for one query and keeps the first failure. validate refuses
// every value quoteQueryString would; should one slip through, the query fails as a whole
// instead of running without it.
type quoter struct{ err error }

func (q *quoter) quote(s string) string {
	l, err := QuoteQueryString(s)
	if err != nil && q.err == nil {
		q.err = fmt.Errorf("visibility query: %w", err)
	}
	return l
}

// all is ss quoted and comma-separated.
func (q *quoter) all(ss []string) string {
	qs := make([]string, len(ss))
	for i, s := range ss {
		qs[i] = q.quote(s)
	}
	return strings.Join(qs, ", ")
}

// oneOf is "attr = v" for one value, "attr IN (…)" for more.
func (q *quoter) oneOf(attr string, vs []string) string {
	if len(vs) == 1 {
		return attr + " = " + q.quote(vs[0])
	}
	return attr + " IN (" + q.all(vs) + ")"
}

// answererClause selects jobs whose open input request f's answerers may answer.
func answererClause(q *quoter, f jobstore.Filter) string {
	if f.ApproverNot == "" {
		return q.oneOf("JobAnswerer", f.Answerers)
	}
	// An approver request of the subject's own job needs another approver.
	alts := make([]string, len(f.Answerers))
	for i, a := range f.Answerers {
		alts[i] = "JobAnswerer = " + q.quote(a)
		if a == workflows.AnswererApprover {
			alts[i] = "(" + alts[i] + " AND JobOwner != " + q.quote(f.ApproverNot) + ")"
		}
	}
	return "(" + strings.Join(alts, " OR ") + ")"
}

// slotsClause is the condition on a job's slots, or "" when f sets none.
func slotsClause(f jobstore.Filter) string {
	slots := workflows.SAJobSlots.GetName()
	switch lo, hi := f.SlotsMin, f.SlotsMax; {
	case f.NoSlots:
		return slots + " IS NULL"
	case lo > 0 && lo == hi:
		return slots + " = " + strconv.Itoa(lo)
	case lo > 0 && hi > 0:
		return slots + " BETWEEN " + strconv.Itoa(lo) + " AND " + strconv.Itoa(hi)
	case lo > 0:
		return slots + " >= " + strconv.Itoa(lo)
	case hi > 0:
		return slots + " <= " + strconv.Itoa(hi)
	}
	return ""
}

// queryTime is t as a visibility datetime literal.
func queryTime(t time.Time) string {
	return "'" + t.UTC().Format(time.RFC3339Nano) + "'"
}

// statusClause is the visibility condition for a contract status. Closed executions are the
// truth once a job has finished; while running, the JobStatus attribute names the phase
// (mirrors job.status()).
func statusClause(s workflows.Status) (string, bool) {
	switch s {
	case workflows.StatusSucceeded:
		return "ExecutionStatus = 'Completed'", true
	case workflows.StatusFailed:
		return "ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut')", true
	case workflows.StatusCancelled:
		return "ExecutionStatus = 'Canceled'", true
	case workflows.StatusQueued, workflows.StatusRunning, workflows.StatusAwaitingInput, workflows.StatusCancelling:
		return "ExecutionStatus = 'Running' AND JobStatus = '" + string(s) + "'", true
	}
	return "", false
}

// quoteQueryString renders s as a single-quoted string literal of Temporal's visibility query
// language. Temporal's parser (temporalio/sqlparser) reads backslash escapes and doubled
// quotes; we emit \\ and \' only. Values that are not printable UTF-8 are refused rather than
// escaped (storeValue): no identity we accept contains them.
func QuoteQueryString(s string) (string, error) {
	if !jobstore.StoreValue(s) {
		return "", jobstore.ErrQueryValue
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for _, r := range s {
		if r == '\\' || r == '\'' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('\'')
	return b.String(), nil
}
