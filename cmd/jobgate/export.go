package main

import (
	"encoding/json"
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
	raw, err := json.Marshal(j.view.Result)
	if err != nil {
		return false
	}
	var r wire.ExportResultView
	if json.Unmarshal(raw, &r) != nil {
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
