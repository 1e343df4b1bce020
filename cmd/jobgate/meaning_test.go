package main

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/wire"
)

// TestMeaningLine: `jobgate approvals` and `jobgate jobs get` show what approving an export
// means, the sentence of the pages and the sealed record, rebuilt from the request's scope —
// also for an old run whose prompt predates the sentence; a new run's prompt (the sentence
// itself) is not said twice, and another kind's request keeps its prompt with no meaning line.
func TestMeaningLine(t *testing.T) {
	now := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	old := &wire.NeedsInputView{InputID: "i1", Prompt: "Approve the export of customers?", RequestedBy: "ana",
		ExpiresAt: now.Add(time.Hour), Scope: map[string]any{"dataset": "customers", "columns": []any{"id", "name", "email"},
			"sensitive_columns": []any{"email"}, "format": "csv", "purpose": "renewal mailing for Q3", "max_rows": float64(1000000)}}
	const want = "Allow ana@acme to export id, name and **email** of customers (up to 1,000,000 rows), csv, for 'renewal mailing for Q3'"

	var list strings.Builder
	printApprovals(&list, []wire.JobSummary{{Handle: "h1", JobID: "export-1", Kind: "export", Status: "awaiting_input", NeedsInput: old}}, "acme", now)
	if field(list.String(), "meaning") != want || field(list.String(), "prompt") != "Approve the export of customers?" {
		t.Errorf("approvals list of an old run lacks the meaning line or its prompt:\n%s", list.String())
	}

	var get strings.Builder
	j := &job{kind: "export", view: wire.JobView{JobSummary: wire.JobSummary{Handle: "h1", JobID: "export-1", Kind: "export",
		Status: "awaiting_input", Owner: "ana", NeedsInput: old}}}
	printJob(&get, j, "acme", now)
	if field(get.String(), "meaning") != want {
		t.Errorf("jobs get of an old run lacks the meaning line:\n%s", get.String())
	}

	// A new run: its prompt is the sentence, shown once, as the meaning.
	fresh := *old
	fresh.Prompt = want
	get.Reset()
	printJob(&get, &job{kind: "export", view: wire.JobView{JobSummary: wire.JobSummary{Handle: "h1", JobID: "export-1",
		Kind: "export", Status: "awaiting_input", NeedsInput: &fresh}}}, "acme", now)
	if strings.Count(get.String(), want) != 1 || field(get.String(), "meaning") != want {
		t.Errorf("jobs get of a new run says the sentence %d times, want once as the meaning:\n%s", strings.Count(get.String(), want), get.String())
	}

	// An eval's request: no meaning line, its prompt as it is; an unknown tenant: no sentence
	// with an empty tenant in it.
	eval := &wire.NeedsInputView{InputID: "i2", Prompt: "Run the suite?", RequestedBy: "ana", Scope: map[string]any{"suite": "s", "episodes": float64(3)}}
	list.Reset()
	printApprovals(&list, []wire.JobSummary{{Handle: "h2", JobID: "eval-1", Kind: "eval", NeedsInput: eval},
		{Handle: "h3", JobID: "export-2", Kind: "export", NeedsInput: old}}, "", now)
	if strings.Contains(list.String(), "meaning:") || field(list.String(), "prompt") != "Run the suite?" {
		t.Errorf("an eval's request, or an unknown tenant, shows a meaning line:\n%s", list.String())
	}
}

// TestClientTenant: the tenant comes from the token's tenant claim (the stored login's claim
// name when it has one), and is "" for a token that is not a JWT.
func TestClientTenant(t *testing.T) {
	jwt := func(payload string) string {
		e := base64.RawURLEncoding.EncodeToString
		return e([]byte(`{"alg":"none"}`)) + "." + e([]byte(payload)) + ".x"
	}
	for _, c := range []struct {
		creds *credentials
		want  string
	}{
		{&credentials{static: jwt(`{"sub":"steward","tenant":"acme"}`)}, "acme"},
		{&credentials{static: "opaque"}, ""},
		{nil, ""},
	} {
		if got := (&client{creds: c.creds}).tenant(); got != c.want {
			t.Errorf("tenant of %+v: %q, want %q", c.creds, got, c.want)
		}
	}
}

// field is the value of the first "label: value" line of out (fields align their values).
func field(out, label string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), label+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
