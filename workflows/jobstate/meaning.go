package jobstate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ExportMeaning is what approving an export allows, as its fields come from the job.
type ExportMeaning struct {
	Requester string   // subject of the job's owner
	Tenant    string   // the job's tenant
	Dataset   string   // dataset name
	Columns   []string // requested columns, in request order
	Sensitive []string // the requested columns that are sensitive
	MaxRows   int      // the dataset's row bound (0: none stated)
	Format    string   // csv or jsonl
	Purpose   string   // the requester's stated purpose
}

// Text is the one sentence every surface shows as the meaning of approving (the input
// request's prompt for exports started after it existed, the CLI, the pages), e.g.
//
//	Allow ana@acme to export id, name and **email** of customers (up to 1,000,000 rows), csv, for 'renewal mailing for Q3'
//
// Sensitive columns are marked **like this**. It is deterministic (workflows call it).
func (m ExportMeaning) Text() string {
	cols := make([]string, len(m.Columns))
	for i, c := range m.Columns {
		if slices.Contains(m.Sensitive, c) {
			c = "**" + c + "**"
		}
		cols[i] = c
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Allow %s@%s to export %s of %s", m.Requester, m.Tenant, andList(cols), m.Dataset)
	if m.MaxRows > 0 {
		fmt.Fprintf(&b, " (up to %s rows)", thousands(m.MaxRows))
	}
	fmt.Fprintf(&b, ", %s, for '%s'", m.Format, m.Purpose)
	return b.String()
}

// ExportMeaningFromScope reads an export's meaning from an open request as clients see it
// (needs_input: requested_by and the kind-specific scope, decoded from JSON or as the worker
// built it). ok is false when the scope is not an export's.
func ExportMeaningFromScope(requestedBy, tenant string, scope map[string]any) (ExportMeaning, bool) {
	m := ExportMeaning{Requester: requestedBy, Tenant: tenant}
	var ok1, ok2 bool
	m.Dataset, ok1 = scope["dataset"].(string)
	m.Columns, ok2 = strs(scope["columns"])
	if !ok1 || !ok2 {
		return ExportMeaning{}, false
	}
	m.Sensitive, _ = strs(scope["sensitive_columns"])
	m.Format, _ = scope["format"].(string)
	m.Purpose, _ = scope["purpose"].(string)
	switch n := scope["max_rows"].(type) {
	case float64:
		if n >= 0 && n < 1<<53 {
			m.MaxRows = int(n)
		}
	case int:
		m.MaxRows = n
	}
	return m, true
}

func strs(v any) ([]string, bool) {
	switch l := v.(type) {
	case []string:
		return l, true
	case []any:
		out := make([]string, 0, len(l))
		for _, x := range l {
			s, ok := x.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, v == nil
}

// andList joins "a", "a and b", "a, b and c".
func andList(items []string) string {
	switch len(items) {
	case 0:
		return "no columns"
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// thousands writes n with comma separators: 1,000,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return s
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
