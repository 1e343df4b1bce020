package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows/jobstate"
)

// Human-readable rendering of jobs and input requests. Everything the server sends is text a
// job's owner chose (purpose, idempotency key) or that names their data, so it is sanitized
// before it reaches the terminal.

// fields is a label/value block, printed with the values aligned.
type fields struct{ rows [][2]string }

func (f *fields) add(label, value string) { f.rows = append(f.rows, [2]string{label, value}) }

// write prints the block, each line prefixed by indent; a multi-line value continues under
// its first line.
func (f *fields) write(w io.Writer, indent string) {
	width := 0
	for _, r := range f.rows {
		width = max(width, utf8.RuneCountInString(r[0])+1)
	}
	for _, r := range f.rows {
		lines := strings.Split(r[1], "\n")
		fmt.Fprintf(w, "%s%-*s %s\n", indent, width, r[0]+":", lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "%s%-*s %s\n", indent, width, "", l)
		}
	}
}

// clean keeps newlines and replaces every other control character (escape sequences
// included) with '?'.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' {
			return r
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, strings.TrimRight(s, "\n"))
}

// formatValue renders a JSON value for a human: lists joined with ", ", whole numbers without
// an exponent, objects as compact JSON.
func formatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return clean(x)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = formatValue(e)
		}
		return strings.Join(parts, ", ")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return clean(string(b))
}

// scopeOrder is how an export's (and any kind's) scope keys are presented, with their labels.
// Keys not named here follow, sorted, labelled by their name.
var scopeOrder = []struct{ key, label string }{
	{"dataset", "dataset"},
	{"columns", "columns"},
	{"sensitive_columns", "sensitive"},
	{"format", "format"},
	{"purpose", "purpose"},
	{"max_rows", "rows"},
	{"suite", "suite"},
	{"episodes", "episodes"},
	{"config_digest", "dataset config"},
}

// addScope adds an input request's scope, whatever keys it has.
func addScope(f *fields, scope map[string]any) {
	seen := map[string]bool{}
	for _, k := range scopeOrder {
		v, ok := scope[k.key]
		if !ok {
			continue
		}
		seen[k.key] = true
		val := formatValue(v)
		if k.key == "max_rows" {
			// The bound, not a count: no row may be read (so none counted) before approval.
			if n, ok := v.(float64); ok && n <= 0 {
				continue
			}
			val = "up to " + val
		}
		f.add(k.label, val)
	}
	var rest []string
	for k := range scope {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		f.add(strings.ReplaceAll(clean(k), "_", " "), formatValue(scope[k]))
	}
}

// addNeedsInput adds an open input request: who asked, what exactly, what approving means,
// the prompt and expiry. tenant is the caller's (the job's: no one sees another tenant's job).
func addNeedsInput(f *fields, ni *wire.NeedsInputView, tenant string, now time.Time) {
	if ni.RequestedBy != "" {
		f.add("asked by", clean(ni.RequestedBy))
	}
	f.add("answer by", approverText(ni))
	addScope(f, ni.Scope)
	meaning := meaningText(ni, tenant)
	if meaning != "" {
		f.add("meaning", meaning)
	}
	// New exports' prompt is the meaning sentence itself: said once. An old run's prompt
	// (from before the sentence existed) or another kind's still shows.
	if p := clean(ni.Prompt); p != meaning {
		f.add("prompt", p)
	}
	f.add("expires", timeText(ni.ExpiresAt)+" ("+untilText(ni.ExpiresAt, now)+")")
}

// meaningText is the sentence every surface shows as what approving an export means
// (jobstate.ExportMeaning, as the pages and the sealed record have it), rebuilt from the
// request's scope so a run whose prompt predates the sentence shows it too; "" when the scope
// is not an export's or the tenant is unknown (a token without the tenant claim).
func meaningText(ni *wire.NeedsInputView, tenant string) string {
	if tenant == "" || ni.RequestedBy == "" {
		return ""
	}
	m, ok := jobstate.ExportMeaningFromScope(ni.RequestedBy, tenant, ni.Scope)
	if !ok {
		return ""
	}
	return clean(m.Text())
}

func approverText(ni *wire.NeedsInputView) string {
	switch ni.Approver {
	case "owner":
		return "the job's owner"
	case "approver":
		if ni.SelfApproval {
			return "an approver (jobs:approve; the owner may too)"
		}
		return "an approver (jobs:approve) other than the job's owner"
	}
	return clean(string(ni.Approver))
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// untilText says how far t is from now: "in 23h59m", "expired 5m ago".
func untilText(t, now time.Time) string {
	d := t.Sub(now)
	if d < 0 {
		return "expired " + shortDuration(-d) + " ago"
	}
	return "in " + shortDuration(d)
}

// shortDuration renders d to the minute (to the second below one minute), rounding down: a
// deadline is never shown later than it is.
func shortDuration(d time.Duration) string {
	if d < time.Minute {
		return strconv.Itoa(int(d/time.Second)) + "s"
	}
	h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case h == 0:
		return strconv.Itoa(m) + "m"
	case m == 0:
		return strconv.Itoa(h) + "h"
	}
	return fmt.Sprintf("%dh%dm", h, m)
}

// progressText is "done/total unit" (with failures, if any).
func progressText(v *wire.JobView) string {
	p := v.Progress
	s := strconv.Itoa(p.Done) + "/"
	if p.Total > 0 {
		s += strconv.Itoa(p.Total)
	} else {
		s += "?"
	}
	if p.Unit != "" {
		s += " " + clean(p.Unit)
	}
	if p.Failed > 0 {
		s += fmt.Sprintf(" (%d failed)", p.Failed)
	}
	return s
}

// printJob prints a job view for a human.
func printJob(w io.Writer, j *job, tenant string, now time.Time) {
	v := &j.view
	var f fields
	f.add("job", clean(v.JobID))
	f.add("kind", clean(v.Kind))
	f.add("status", string(v.Status))
	f.add("owner", clean(v.Owner))
	f.add("created", timeText(v.CreatedAt))
	f.add("updated", timeText(v.UpdatedAt))
	prog := progressText(v)
	if v.Progress.Message != "" {
		prog += " — " + clean(v.Progress.Message)
	}
	f.add("progress", prog)
	if v.UIURL != "" {
		f.add("web ui", clean(v.UIURL))
	}
	f.add("handle", v.Handle)
	if v.Error != nil {
		f.add("error", clean(v.Error.Code)+": "+clean(v.Error.Message))
	}
	f.write(w, "")
	if ni := v.NeedsInput; ni != nil {
		fmt.Fprintln(w, "\nwaiting for input:")
		var g fields
		addNeedsInput(&g, ni, tenant, now)
		g.write(w, "  ")
	}
	if v.Decision != nil { // the job ended by a rejection: its record
		fmt.Fprintln(w, "\nrejected:")
		var g fields
		addDecision(&g, v.Decision)
		g.write(w, "  ")
	}
	if v.Result != nil {
		fmt.Fprintln(w, "\nresult:")
		printResult(w, j)
	}
}

// printResult prints a succeeded job's result: in its kind's own form where it has one (an
// export's manifest and how to download it), otherwise as indented JSON.
func printResult(w io.Writer, j *job) {
	if k := cliKindOf(j.kind); k.printResult != nil && k.printResult(w, j) {
		return
	}
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetIndent("  ", "  ")
	if enc.Encode(j.view.Result) == nil {
		fmt.Fprint(w, "  "+clean(buf.String())+"\n")
	}
}

// printJSON pretty-prints raw JSON, keeping its key order.
func printJSON(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := buf.WriteTo(w)
	return err
}

// printJSONValue prints v as indented JSON.
func printJSONValue(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// cliKind is what the CLI does for one kind of job beyond the generic view (which every kind
// gets): a kind's own file declares it, and cliKinds lists it. The CLI never tests a kind by
// name anywhere else.
type cliKind struct {
	name string
	// printResult prints a succeeded job's result in the kind's own form; false falls back to
	// indented JSON.
	printResult func(w io.Writer, j *job) bool
	// download: the kind's succeeded jobs have a file `jobgate jobs download` fetches.
	download bool
	// printMore prints what `jobs get` shows of the job beyond its view, read with more calls
	// (an eval's score distribution); nil for nothing.
	printMore func(ctx context.Context, cl *client, w io.Writer, j *job)
}

// cliKinds are the kinds with CLI behaviour of their own.
func cliKinds() []cliKind { return []cliKind{exportCLI(), evalCLI()} }

// cliKindOf is kind's CLI behaviour; the zero cliKind (generic view only) for any other kind.
func cliKindOf(kind string) cliKind {
	for _, k := range cliKinds() {
		if k.name == kind {
			return k
		}
	}
	return cliKind{name: kind}
}
