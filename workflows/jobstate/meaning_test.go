package jobstate

import (
	"encoding/json"
	"testing"
)

func TestExportMeaning(t *testing.T) {
	m := ExportMeaning{Requester: "ana", Tenant: "acme", Dataset: "customers", Columns: []string{"id", "name", "email"},
		Sensitive: []string{"email"}, MaxRows: 1000000, Format: "csv", Purpose: "renewal mailing for Q3"}
	want := "Allow ana@acme to export id, name and **email** of customers (up to 1,000,000 rows), csv, for 'renewal mailing for Q3'"
	if got := m.Text(); got != want {
		t.Errorf("Text() =\n%s\nwant\n%s", got, want)
	}
	// The same from the scope a client decodes from needs_input.
	var scope map[string]any
	_ = json.Unmarshal([]byte(`{"dataset":"customers","columns":["id","name","email"],"sensitive_columns":["email"],
		"max_rows":1000000,"format":"csv","purpose":"renewal mailing for Q3","config_digest":"sha256:x"}`), &scope)
	got, ok := ExportMeaningFromScope("ana", "acme", scope)
	if !ok || got.Text() != want {
		t.Errorf("from scope: %q, %v", got.Text(), ok)
	}
	if _, ok := ExportMeaningFromScope("ana", "acme", map[string]any{"suite": "x"}); ok {
		t.Error("an eval's scope read as an export's")
	}
	one := ExportMeaning{Requester: "bo", Tenant: "acme", Dataset: "orders", Columns: []string{"id"}, Format: "jsonl", Purpose: "p"}
	if got := one.Text(); got != "Allow bo@acme to export id of orders, jsonl, for 'p'" {
		t.Errorf("one column: %q", got)
	}
	for n, w := range map[int]string{0: "0", 999: "999", 1000: "1,000", 12345678: "12,345,678"} {
		if thousands(n) != w {
			t.Errorf("thousands(%d) = %s", n, thousands(n))
		}
	}
}

// FuzzExportMeaningFromScope: any JSON scope reads without a panic, and what it reads states
// itself in one line. Seeds: testdata/fuzz/FuzzExportMeaningFromScope.
func FuzzExportMeaningFromScope(f *testing.F) {
	f.Fuzz(func(t *testing.T, payload string) {
		var scope map[string]any
		if json.Unmarshal([]byte(payload), &scope) != nil {
			return
		}
		m, ok := ExportMeaningFromScope("ana", "acme", scope)
		if ok && m.MaxRows < 0 {
			t.Fatalf("negative max_rows %d", m.MaxRows)
		}
		_ = m.Text()
	})
}
