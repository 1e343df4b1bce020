package contract

import "slices"

// ErrTypeExportInvalid: the export's input cannot be served as given (unknown format or
// column, malformed key range, too many parts) or a row cannot be paged (NULL or mistyped
// key). Retrying the same input cannot help.
const ErrTypeExportInvalid = "ExportInvalid"

// Export formats: the one definition (the frontend offers and checks these too).
const (
	FormatJSONL = "jsonl"
	FormatCSV   = "csv"
)

// Formats lists the export formats in the order start_export offers them.
func Formats() []string { return []string{FormatJSONL, FormatCSV} }

// ValidFormat reports whether f is one of Formats.
func ValidFormat(f string) bool { return slices.Contains(Formats(), f) }
