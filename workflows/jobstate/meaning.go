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
	var b strings.Builder
	for _, p := range m.Parts() {
		if p.Sensitive {
			b.WriteString("**" + p.Text + "**")
		} else {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// MeaningPart is a piece of the meaning sentence; Sensitive marks a sensitive column's name.
type MeaningPart struct {
	Text      string
	Sensitive bool
}

// Parts is Text in pieces, for a surface that marks sensitive columns its own way (the pages
// render them in <strong>, where Text's ** would be ambiguous next to a purpose that has **).
func (m ExportMeaning) Parts() []MeaningPart {
	parts := []MeaningPart{{Text: fmt.Sprintf("Allow %s@%s to export ", m.Requester, m.Tenant)}}
	if len(m.Columns) == 0 {
		parts[0].Text += "no columns"
	}
	for i, c := range m.Columns {
		switch {
		case i == 0:
		case i == len(m.Columns)-1:
			parts = append(parts, MeaningPart{Text: " and "})
		default:
			parts = append(parts, MeaningPart{Text: ", "})
		}
		parts = append(parts, MeaningPart{Text: c, Sensitive: slices.Contains(m.Sensitive, c)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, " of %s", m.Dataset)
	if m.MaxRows > 0 {
		fmt.Fprintf(&b, " (up to %s rows)", thousands(m.MaxRows))
	}
	fmt.Fprintf(&b, ", %s, for '%s'", m.Format, m.Purpose)
	return append(parts, MeaningPart{Text: b.String()})
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
