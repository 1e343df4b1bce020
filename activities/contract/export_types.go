package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

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
	// Steps, when above 0, stops the walk after that many part boundaries (More then says
	// whether rows may follow), so the workflow can start those parts while a second call
	// plans the rest. 0 plans to the end.
	Steps int `json:"steps,omitempty"`
	// After continues a walk after this key, the last boundary of an earlier call that
	// returned More, which planned PartsBefore full parts before it (max_rows counts them).
	After       *string `json:"after,omitempty"`
	PartsBefore int     `json:"parts_before,omitempty"`
}

// PlanExportResult is either a changed scope (nothing was read) or the parts to export.
type PlanExportResult struct {
	// ScopeChanged: the dataset's current config digest differs from the input's; the fields
	// below it describe the current config and no query touched the dataset.
	ScopeChanged bool   `json:"scope_changed,omitempty"`
	ConfigDigest string `json:"config_digest"`
	Sensitive    bool   `json:"sensitive,omitempty"` // requested columns include a sensitive one now
	// SensitiveColumns names the requested columns that are sensitive now, for a new prompt.
	SensitiveColumns []string `json:"sensitive_columns,omitempty"`
	Missing          []string `json:"missing_columns,omitempty"` // requested columns the dataset no longer has
	// Rows is the rows of the whole export (PartsBefore's included); with More, the rows of
	// the full parts planned so far.
	Rows   int        `json:"rows"`
	Ranges []KeyRange `json:"ranges,omitempty"`
	// More: the walk stopped after Steps boundaries; rows may follow the last range's Through
	// (plan them with After and PartsBefore). Never set when Steps is 0.
	More bool `json:"more,omitempty"`
	// Approval is what this worker's catalog says an export of the requested columns needs,
	// whether or not the scope changed. The workflow asks with it (never with what the
	// frontend resolved at start), so four eyes switched back on is in force at once. Nil in
	// plans recorded before it existed.
	Approval *PlanApproval `json:"approval,omitempty"`
}

// PlanApproval is every approval-relevant setting of a dataset for the requested columns, as
// the worker's current catalog has them.
type PlanApproval struct {
	// Required: a requested column is sensitive.
	Required bool `json:"required"`
	// AllowSelf: the dataset's allow_self_approval (the owner may approve).
	AllowSelf bool `json:"allow_self"`
	// Sensitive names the requested sensitive columns, in request order.
	Sensitive []string `json:"sensitive,omitempty"`
	// Timeout is the dataset's approval_timeout.
	Timeout Duration `json:"timeout"`
}

// ExportPartInput exports one key range of the caller tenant's rows.
type ExportPartInput struct {
	JobID string `json:"job_id"`
	// FirstRunID is the job's first run ID: chunks go under ExportPrefix(JobID, FirstRunID).
	// Empty only for jobs started before run-scoped artifacts (the legacy prefix).
	FirstRunID   string   `json:"first_run_id,omitempty"`
	Tenant       string   `json:"tenant"`
	Dataset      string   `json:"dataset"`
	Columns      []string `json:"columns"`
	Format       string   `json:"format"` // "jsonl" or "csv"
	ConfigDigest string   `json:"config_digest"`
	Part         int      `json:"part"` // 1-based
	Range        KeyRange `json:"range"`
	// PageRows is the rows per chunk object. Zero: 100,000 (a whole default part), or
	// PageRowsDefault on a dataset with max_rows_per_second, whose parts pause between chunks.
	PageRows int `json:"page_rows,omitempty"`
}

// PartResult says what one part wrote: Chunks objects, each one gzip member.
type PartResult struct {
	Part   int   `json:"part"`
	Chunks int   `json:"chunks"`
	Rows   int   `json:"rows"`
	Bytes  int64 `json:"bytes"`
	// SHA256 is the hex SHA-256 of the part's chunks in order, as the part wrote them: finalize
	// checks the stored chunks against it. Empty from workers before it, or when a part resumed
	// from such a worker's heartbeat; finalize then only computes it.
	SHA256 string `json:"sha256,omitempty"`
}

// FinalizeExportInput assembles the parts into one artifact and its manifest.
type FinalizeExportInput struct {
	JobID string `json:"job_id"`
	// FirstRunID is the job's first run ID (see ExportPartInput); the manifest records it.
	FirstRunID string       `json:"first_run_id,omitempty"`
	Format     string       `json:"format"`
	Columns    []string     `json:"columns"`
	Parts      []PartResult `json:"parts"`
	ExpiresAt  time.Time    `json:"expires_at"`
	// Decision is the approval the export ran under (nil: none was needed); it is written into
	// the manifest, so the artifact carries who approved what.
	Decision *DecisionRecord `json:"decision,omitempty"`
	// Scope is what Decision approved, the fields its scope_digest is the digest of; it goes to
	// the manifest so an auditor can recompute the digest (jobgate verify). Nil without a
	// decision, and in inputs recorded before it existed.
	Scope *ApprovedScope `json:"scope,omitempty"`
	// ApprovalRequired says the export needed an approval; it goes to the manifest under the
	// manifest seal, so a manifest whose decision record was removed fails verify.
	ApprovalRequired bool `json:"approval_required,omitempty"`
}

// ApprovedScope is an export's approval scope (workflows.ExportScope is this type):
// "sha256:" + hex SHA-256 of its JSON encoding is the scope_digest the decision record and its
// seal carry.
type ApprovedScope struct {
	Tenant       string   `json:"tenant"`
	Dataset      string   `json:"dataset"`
	ConfigDigest string   `json:"config_digest"`
	Columns      []string `json:"columns"`
	Format       string   `json:"format"`
	Purpose      string   `json:"purpose"`
}

// JSONDigest is "sha256:<hex>" of v's JSON encoding (encoding/json: struct fields in order, map
// keys sorted): the form of every digest jobgate binds something to (a scope_digest, a
// dataset's ConfigDigest, a stored manifest's finalize input). jobgate verify recomputes it.
func JSONDigest(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// Identity is what a frontend knows of the person behind a principal beyond tenant and
// subject, when their token or sign-in session says it (every field optional: "" or zero
// when unknown). It is embedded (flattened) in the resume request and the decision record.
type Identity struct {
	// Issuer is the identity provider that vouched for the principal (the token's iss).
	Issuer string `json:"issuer,omitempty"`
	Name   string `json:"name,omitempty"`
	Email  string `json:"email,omitempty"`
	// AuthTime is when the person last authenticated at the identity provider (auth_time).
	AuthTime time.Time `json:"auth_time,omitzero"`
	// AMR and ACR say how they authenticated (authentication methods and context class).
	AMR []string `json:"amr,omitempty"`
	ACR string   `json:"acr,omitempty"`
}

// DecisionRecord is who answered a job's input request, when, through which surface and how
// they signed in, what they were shown and exactly what they answered, with the frontend's
// resume seal over it (an HMAC with the resume keys; expired minutes after the decision, which
// `jobgate verify` allows: it checks the signature and that At is before the expiry). Every
// field the seal binds is here in full (the comment and the meaning as text, the seal binds
// their SHA-256), so a holder of the resume keys can check the record against the seal.
// Records made before a field existed lack it (omitempty).
type DecisionRecord struct {
	// WorkflowID and RunID name the job and the run that accepted the answer (sealed).
	WorkflowID   string    `json:"workflow_id,omitempty"`
	RunID        string    `json:"run_id,omitempty"`
	InputID      string    `json:"input_id"`
	ScopeDigest  string    `json:"scope_digest"`
	Decision     string    `json:"decision"`
	Tenant       string    `json:"tenant"`
	By           string    `json:"by"`
	Scopes       []string  `json:"scopes,omitempty"`
	At           time.Time `json:"at"`
	Surface      string    `json:"surface,omitempty"`
	SignedInWith string    `json:"signed_in_with,omitempty"`
	Identity
	// Comment is the approver's comment, in full.
	Comment string `json:"comment,omitempty"`
	// Prompt is the meaning shown to the approver (the input request's prompt).
	Prompt string `json:"prompt,omitempty"`
	Seal   string `json:"seal,omitempty"`
	// Signature is the frontend's Ed25519 signature over the same fields as Seal (and the same
	// expiry), checked with the published public keys alone; absent in records made before it
	// existed or by a frontend without signing keys (verify reports those as legacy).
	Signature string `json:"signature,omitempty"`
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
	// RunID is the first run ID of the job instance that wrote the artifact, and InputDigest
	// the digest of its FinalizeExportInput: a retried finalize reuses a stored manifest only
	// when both match its own, never one left by an earlier instance of the same job ID.
	RunID       string `json:"run_id,omitempty"`
	InputDigest string `json:"input_digest,omitempty"`
	// Decision records the approval the export ran under; nil when none was needed.
	Decision *DecisionRecord `json:"decision,omitempty"`
	// Scope is what Decision approved (FinalizeExportInput.Scope).
	Scope *ApprovedScope `json:"scope,omitempty"`
	// ApprovalRequired is FinalizeExportInput.ApprovalRequired (absent: false, or a manifest
	// written before it existed).
	ApprovalRequired bool `json:"approval_required,omitempty"`
	// ManifestSeal is the worker's seal over every other field of this manifest (the artifact's
	// digests, the decision record with its seal, the scope, approval_required): an HMAC with
	// the deployment's resume keys under a key derived for manifests only (ManifestSealer).
	// Absent in manifests written before it existed, or by a worker without resume keys.
	ManifestSeal string `json:"manifest_seal,omitempty"`
	// Version is ManifestVersionSigned for manifests a worker signed with its signing keys;
	// absent (0) before. A manifest that says it is signed and is not fails verification,
	// whatever flags: removing the signature is no way to make a manifest "legacy".
	Version int `json:"manifest_version,omitempty"`
	// ManifestSignature is the worker's Ed25519 signature over every other field of this
	// manifest (ManifestSigner; frontend/handle, jgms1), checked with the published public
	// keys: the artifact's and each part's SHA-256, the decision record with its own signature,
	// the scope, approval_required and the version.
	ManifestSignature string `json:"manifest_signature,omitempty"`
}

// ManifestVersionSigned is Manifest.Version of a manifest signed with Ed25519.
const ManifestVersionSigned = 2

// SigningKeysObject is the name, beside each manifest.json, of the JWK set of the public keys
// that verify it: an auditor given the export's directory has the keys with it (to be compared
// with the deployment's published set, /.well-known/jobgate-signing-keys).
const SigningKeysObject = "signing-keys.json"

// DeleteEpisodesInput names one eval job instance whose episode log the retention child deletes.
type DeleteEpisodesInput struct {
	JobID      string `json:"job_id"`
	FirstRunID string `json:"first_run_id"`
}

// DeleteExportInput removes every object of one export job.
type DeleteExportInput struct {
	JobID string `json:"job_id"`
	// FirstRunID scopes the delete to one job instance (ExportPrefix); empty deletes the
	// legacy prefix of a job started before run-scoped artifacts, which holds no newer job's
	// objects.
	FirstRunID string `json:"first_run_id,omitempty"`
}

// Defaults for export sizes, measured with BenchmarkExportLevers (1M rows, PostgreSQL, csv):
// 1,000-row chunks made finalize half the run (a thousand objects to open); 10,000-row chunks
// and 100,000-row parts bring it under 10% and the ratio to COPY from ~0.2 to ~0.5. Since issue
// 34 a part without page_rows writes one chunk (finalize ~2%); PageRowsDefault stays the chunk
// of throttled datasets.
const (
	PartRowsDefault = 100_000
	PageRowsDefault = 10_000
)
