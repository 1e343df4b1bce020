package main

import (
	"io"
	"strconv"
	"strings"

	"github.com/jobgate/jobgate/frontend/wire"
)

// exportCLI is the export kind in the CLI: its result is a manifest with a file to download.
func exportCLI() cliKind {
	return cliKind{name: "export", printResult: printExportResult, download: true}
}

// printExportResult prints an export's manifest and how to download it.
func printExportResult(w io.Writer, j *job) bool {
	var r wire.ExportResultView
	if j.view.DecodeResult(&r) != nil {
		return false
	}
	var f fields
	f.add("rows", strconv.Itoa(r.Rows))
	f.add("file", clean(r.FileName)+" ("+strconv.FormatInt(r.Bytes, 10)+" bytes, gzip)")
	f.add("format", clean(r.Format))
	f.add("columns", clean(strings.Join(r.Columns, ", ")))
	f.add("sha256", clean(r.SHA256))
	if r.ApprovedBy != "" {
		f.add("approved by", clean(r.ApprovedBy))
	}
	addDecision(&f, r.Decision)
	f.add("kept until", timeText(r.ExpiresAt))
	switch {
	case r.DownloadURL != "":
		f.add("download", "jobgate jobs download "+j.view.Handle)
	case r.Note != "":
		f.add("download", "not available: "+clean(r.Note))
	}
	f.write(w, "  ")
	return true
}

// addDecision adds the decision record's lines (get_*'s decision), if any.
func addDecision(f *fields, d *wire.Decision) {
	if d == nil {
		return
	}
	who := clean(d.By)
	if d.Name != "" || d.Email != "" {
		who += " (" + strings.TrimSpace(clean(d.Name)+" <"+clean(d.Email)+">") + ")"
	}
	if d.Issuer != "" {
		who += " of " + clean(d.Issuer)
	}
	f.add("decision", clean(d.Decision)+" by "+who+" at "+timeText(d.At))
	how := "via " + clean(d.Surface) + ", signed in with " + clean(d.SignedInWith)
	if !d.AuthTime.IsZero() {
		how += ", authenticated " + timeText(d.AuthTime)
	}
	if len(d.AMR) > 0 {
		how += " (" + clean(strings.Join(d.AMR, "+")) + ")"
	}
	f.add("decided", how)
	if d.Meaning != "" {
		f.add("meaning shown", clean(d.Meaning))
	}
	if d.Comment != "" {
		f.add("comment", clean(d.Comment))
	}
	sealed := "no seal"
	if d.Sealed {
		sealed = "sealed by the frontend, kept in the job's history (an approved export's manifest.json carries it: jobgate verify)"
	}
	f.add("record", "scope "+clean(d.ScopeDigest)+", "+sealed)
}
