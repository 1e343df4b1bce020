package activities

import "time"

// Application error types an export activity can end with. All are final for the attempt's
// inputs; the workflow decides what follows (ask again, fail the job).
const (
	// ErrTypeScopeChanged: the dataset's configuration no longer has the digest the approval
	// was given for. The workflow asks again; no row was read under the old approval.
	ErrTypeScopeChanged = "ScopeChanged"
	// ErrTypeDatasetMissing: the dataset is not configured on this worker.
	ErrTypeDatasetMissing = "DatasetMissing"
	// ErrTypeDatasetTooLarge: the tenant has more rows than the dataset's max_rows.
	ErrTypeDatasetTooLarge = "DatasetTooLarge"
	// ErrTypeDatasetAccess: the dataset's database refused the worker's login or has no such
	// database (PostgreSQL SQLSTATE class 28, 3D000): a configuration error that retries only
	// repeat (and repeated failed logins can lock the account). The message names the dataset
	// only; the driver's error, with host, user and database, is the cause in history.
	ErrTypeDatasetAccess = "DatasetAccess"
)

// KeyRange is a half-open keyset range of one export part: key > After (or from the first
// key when After is nil) and key <= Through. Keys travel as strings whatever the column type,
// so integer keys never lose precision in JSON.
type KeyRange struct {
	After   *string `json:"after,omitempty"`
	Through string  `json:"through"`
}

// PlanExportInput asks for an export's parts. ConfigDigest is the dataset digest the job's
// approval (or start, when none was needed) was given for.
type PlanExportInput struct {
	JobID        string   `json:"job_id"`
	Tenant       string   `json:"tenant"`
	Dataset      string   `json:"dataset"`
	Columns      []string `json:"columns"`
	ConfigDigest string   `json:"config_digest"`
	// PartRows is the number of rows per part. Defaults to PartRowsDefault.
	PartRows int `json:"part_rows,omitempty"`
}

// PlanExportResult is either a changed scope (nothing was read) or the parts to export.
type PlanExportResult struct {
	// ScopeChanged: the dataset's current config digest differs from the input's; the fields
	// below it describe the current config and no query touched the dataset.
	ScopeChanged bool   `json:"scope_changed,omitempty"`
	ConfigDigest string `json:"config_digest"`
	Sensitive    bool   `json:"sensitive,omitempty"` // requested columns include a sensitive one now
	// SensitiveColumns names the requested columns that are sensitive now, for a new prompt.
	SensitiveColumns []string   `json:"sensitive_columns,omitempty"`
	Missing          []string   `json:"missing_columns,omitempty"` // requested columns the dataset no longer has
	Rows             int        `json:"rows"`
	Ranges           []KeyRange `json:"ranges,omitempty"`
}

// ExportPartInput exports one key range of the caller tenant's rows.
type ExportPartInput struct {
	JobID        string   `json:"job_id"`
	Tenant       string   `json:"tenant"`
	Dataset      string   `json:"dataset"`
	Columns      []string `json:"columns"`
	Format       string   `json:"format"` // "jsonl" or "csv"
	ConfigDigest string   `json:"config_digest"`
	Part         int      `json:"part"` // 1-based
	Range        KeyRange `json:"range"`
	// PageRows is the rows per query page and per chunk object. Defaults to PageRowsDefault.
	PageRows int `json:"page_rows,omitempty"`
}

// PartResult says what one part wrote: Chunks objects, each one gzip member.
type PartResult struct {
	Part   int   `json:"part"`
	Chunks int   `json:"chunks"`
	Rows   int   `json:"rows"`
	Bytes  int64 `json:"bytes"`
}

// FinalizeExportInput assembles the parts into one artifact and its manifest.
type FinalizeExportInput struct {
	JobID     string       `json:"job_id"`
	Format    string       `json:"format"`
	Columns   []string     `json:"columns"`
	Parts     []PartResult `json:"parts"`
	ExpiresAt time.Time    `json:"expires_at"`
}

// ManifestPart is one part of a finished artifact.
type ManifestPart struct {
	Part   int    `json:"part"`
	Rows   int    `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"` // hex of the part's bytes within the artifact
}

// Manifest describes a finished export artifact. It lives next to the artifact and is the
// export job's result (references and digests only, never rows).
type Manifest struct {
	Object    string         `json:"object"` // artifact store key of the gzip file
	FileName  string         `json:"file_name"`
	Format    string         `json:"format"`
	Columns   []string       `json:"columns"`
	Rows      int            `json:"rows"`
	Bytes     int64          `json:"bytes"`
	SHA256    string         `json:"sha256"` // hex of the whole artifact
	Parts     []ManifestPart `json:"parts"`
	CreatedAt time.Time      `json:"created_at"`
	ExpiresAt time.Time      `json:"expires_at"`
}

// DeleteExportInput removes every object of one export job.
type DeleteExportInput struct {
	JobID string `json:"job_id"`
}

// Defaults for export sizes.
const (
	PartRowsDefault = 10_000
	PageRowsDefault = 1_000
)
