// Package wire holds the JSON shapes jobgate's tools answer with, as a client decodes them:
// the job view and list rows, an export's result, list pages and the tool error, plus
// ParseResult, which reads a tool result the way every client must.
//
// The server (package frontend) renders these same types (frontend.JobSummary is
// wire.JobSummary, …), so the two cannot drift; a client such as the jobgate CLI imports this
// package, not the server. It imports nothing of jobgate but the leaves authz (for Approver)
// and workflows/jobstate (status, progress, job error).
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows/jobstate"
)

// Version is the product version: what the server reports to MCP clients and the CLI reports
// as its client version.
const Version = "0.1.0"

// list_jobs and list_approvals page sizes (CONTRACT.md).
const (
	ListPageSizeDefault = 20
	ListPageSizeMax     = 100
)

// ---------------------------------------------------------------- job views

// JobSummary is one list_jobs row: the cheap part of a job view, read from the visibility
// record alone (no result, no per-row Temporal call).
type JobSummary struct {
	Handle      string             `json:"handle" jsonschema:"opaque handle naming this job; pass it verbatim to get_*, cancel_*, resume_*"`
	JobID       string             `json:"job_id" jsonschema:"the Temporal workflow ID <tenant>/<kind>/<owner>/<idempotency_key> (owner %XX-escaped; <tenant>/<kind>/<idempotency_key> for jobs started before keys were per owner)"`
	Kind        string             `json:"kind" jsonschema:"eval or export"`
	Status      jobstate.Status    `json:"status" jsonschema:"queued, running, awaiting_input, succeeded, failed, cancelling or cancelled"`
	Owner       string             `json:"owner" jsonschema:"subject of the principal that started the job"`
	CreatedAt   time.Time          `json:"created_at" jsonschema:"when the job was first started"`
	UpdatedAt   time.Time          `json:"updated_at" jsonschema:"when the job last reported a change"`
	Progress    jobstate.Progress  `json:"progress" jsonschema:"units done and failed out of total (progress.unit: episodes or rows), as of progress.as_of"`
	PollAfterMS int                `json:"poll_after_ms" jsonschema:"wait at least this long before polling get_* again; 0 once the job is finished"`
	UIURL       string             `json:"ui_url,omitempty" jsonschema:"link to this job in the Temporal Web UI"`
	NeedsInput  *NeedsInputView    `json:"needs_input,omitempty" jsonschema:"present while status is awaiting_input: the open input request to answer with resume_*"`
	Error       *jobstate.JobError `json:"error,omitempty" jsonschema:"why the job failed or was cancelled"`
	Decision    *Decision          `json:"decision,omitempty" jsonschema:"present when the job ended because its input request was rejected: the record of that answer (who, when, how signed in, through which surface, what they were shown, their comment)"`
}

// JobView decodes any kind's job view (for clients and tests); Result is left as decoded JSON.
// (The server answers with a kind's typed view, frontend.KindView, of the same JSON.)
type JobView struct {
	JobSummary
	Result  any    `json:"result,omitempty"`
	Created *bool  `json:"created,omitempty"`
	Note    string `json:"note,omitempty"`
}

// DecodeResult decodes the job's result into out, a kind's result view (*ExportResultView,
// *EvalResultView): Result holds it as generic JSON. An error when there is none.
func (v *JobView) DecodeResult(out any) error {
	if v.Result == nil {
		return errors.New("the job view has no result")
	}
	raw, err := json.Marshal(v.Result)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// NeedsInputView is an open input request.
type NeedsInputView struct {
	InputID      string         `json:"input_id" jsonschema:"pass to resume_* unchanged"`
	Prompt       string         `json:"prompt" jsonschema:"the question to show to whoever may answer"`
	AnswerSchema map[string]any `json:"answer_schema" jsonschema:"JSON schema of the answer"`
	ScopeDigest  string         `json:"scope_digest" jsonschema:"digest of exactly what is being approved; pass to resume_* unchanged"`
	Scope        map[string]any `json:"scope,omitempty" jsonschema:"what is being approved, kind-specific (an export's dataset, columns, format, purpose; an eval's suite and size)"`
	Approver     authz.Approver `json:"approver" jsonschema:"owner: only the job's owner (with jobs:write) may answer; approver: only a principal with jobs:approve who is not the job's owner (unless self_approval)"`
	SelfApproval bool           `json:"self_approval,omitempty" jsonschema:"true when the job's owner may answer an approver request too (four eyes switched off for this dataset)"`
	RequestedBy  string         `json:"requested_by,omitempty" jsonschema:"subject of the job's owner, who asked"`
	ExpiresAt    time.Time      `json:"expires_at" jsonschema:"after this the job fails with input_expired"`

	// encoded, when set, is this view as JSON: the bytes the fields above encode to, kept
	// with a cached open request (see frontend's needsInputCache) so its maps are not encoded
	// per call. Set by WithJSON.
	encoded []byte
}

// WithJSON returns v carrying b, which must be v's own JSON encoding, as the bytes MarshalJSON
// answers: a server that caches an open request's encoding renders it without encoding its maps
// again. Clients have no use for it.
func (v NeedsInputView) WithJSON(b []byte) NeedsInputView {
	v.encoded = b
	return v
}

// MarshalJSON encodes the view's fields as encoding/json does for a struct; a view rendered
// from a cached open request returns the encoding kept with it, the same bytes.
func (v NeedsInputView) MarshalJSON() ([]byte, error) {
	if v.encoded != nil {
		return v.encoded, nil
	}
	type fields NeedsInputView // the same fields, without this method
	return json.Marshal(fields(v))
}

// ListJobsOut is list_jobs' (and list_approvals') result.
type ListJobsOut struct {
	Jobs       []JobSummary `json:"jobs" jsonschema:"the page's jobs, running ones first (newest start first), then finished ones (most recently finished first)"`
	NextCursor string       `json:"next_cursor,omitempty" jsonschema:"pass as cursor (with the same filters) for the next page; absent on the last page. A page may be empty while more follow"`
}

// ExportResultView is a succeeded export's result: the artifact's manifest summary and a
// short-lived download link for the caller. It is its own shape, not the worker's manifest
// (contract.Manifest), so a client links no server code to read it.
type ExportResultView struct {
	Rows                 int        `json:"rows" jsonschema:"rows exported"`
	Bytes                int64      `json:"bytes" jsonschema:"size of the gzip file in bytes"`
	SHA256               string     `json:"sha256" jsonschema:"hex SHA-256 of the gzip file; verify the download against it"`
	Format               string     `json:"format" jsonschema:"jsonl or csv"`
	Columns              []string   `json:"columns" jsonschema:"the exported columns, in file order"`
	FileName             string     `json:"file_name" jsonschema:"suggested file name"`
	Parts                int        `json:"parts" jsonschema:"how many parallel parts the file was assembled from"`
	ApprovedBy           string     `json:"approved_by,omitempty" jsonschema:"who approved the scope, when a sensitive column needed approval"`
	Decision             *Decision  `json:"decision,omitempty" jsonschema:"the record of the approval the export ran under (who, when, how signed in, through which surface, what they were shown); its seal is in the artifact's manifest.json (jobgate verify)"`
	ExpiresAt            time.Time  `json:"expires_at" jsonschema:"when the artifact is deleted (retention)"`
	Expired              bool       `json:"expired,omitempty" jsonschema:"true once the artifact is past retention: it can no longer be downloaded"`
	DownloadURL          string     `json:"download_url,omitempty" jsonschema:"GET it with your own bearer token (Authorization header) before download_url_expires_at; call get_export again for a fresh link"`
	DownloadURLExpiresAt *time.Time `json:"download_url_expires_at,omitempty" jsonschema:"when download_url stops working"`
	DownloadInstructions string     `json:"download_instructions,omitempty" jsonschema:"how to fetch the file"`
	Note                 string     `json:"note,omitempty" jsonschema:"why there is no download_url"`
}

// EvalResultView is a succeeded eval's result: the workflow's summary (workflows.EvalResult
// embeds the same jobstate.EvalSummary; its fields come first, flattened) with its approval's
// record as get_* shows it (without the seal, as an export's).
type EvalResultView struct {
	jobstate.EvalSummary
	Decision *Decision `json:"decision,omitempty" jsonschema:"the record of the approval the run went on under (who, when, how signed in, through which surface, what they were shown); absent when none was needed and for runs approved before records"`
	// The episode log (list_episodes' episodes, as one JSON Lines file).
	EpisodesCount        int        `json:"episodes_count,omitempty" jsonschema:"lines in the episodes file: one per finished episode"`
	EpisodesSHA256       string     `json:"episodes_sha256,omitempty" jsonschema:"hex SHA-256 of the episodes file; verify the download against it"`
	EpisodesURL          string     `json:"episodes_url,omitempty" jsonschema:"every episode as JSON Lines (the fields of list_episodes): GET it with your own bearer token (Authorization header) before episodes_url_expires_at; call get_eval again for a fresh link. Absent when the server keeps no episode log for the run"`
	EpisodesURLExpiresAt *time.Time `json:"episodes_url_expires_at,omitempty" jsonschema:"when episodes_url stops working"`
	EpisodesKeptUntil    *time.Time `json:"episodes_kept_until,omitempty" jsonschema:"when the episode log (list_episodes, episodes_url) is deleted: the suite's episode_retention after the run ended; absent for runs from before episode logs expired"`
	EpisodesExpired      bool       `json:"episodes_expired,omitempty" jsonschema:"true once the episode log has been deleted (past episodes_kept_until): no episodes_url, and list_episodes says so; this summary stays"`
}

// ---------------------------------------------------------------- tool errors

// Tool error codes (CONTRACT.md).
const (
	CodeInvalidArgument      = "invalid_argument"
	CodeNotFound             = "not_found"
	CodeInvalidHandle        = "invalid_handle"
	CodeHandleExpired        = "handle_expired"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeInputNotExpected     = "input_not_expected"
	CodeForbidden            = "forbidden"
	CodeCursorInvalid        = "cursor_invalid"
	CodeCursorExpired        = "cursor_expired"
	CodeUnavailable          = "unavailable"
	CodeQuotaExceeded        = "quota_exceeded"
)

// ToolError is the JSON text of every isError tool result.
type ToolError struct {
	Code      string `json:"code" jsonschema:"machine-readable error code"`
	Message   string `json:"message" jsonschema:"what went wrong and what to do about it"`
	Retryable bool   `json:"retryable" jsonschema:"true when the same call may succeed later unchanged"`
	// RetryAfterMS is set on quota_exceeded when it is known when the same call can pass.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty" jsonschema:"milliseconds until the same call can pass, when known"`
	// Kind is the kind of job the error concerns, so no client has to read it out of Message:
	// the kind of the tool called (start_eval, get_export, …), except where a verified handle
	// names a job of another kind, when it is that job's kind (whose tools to use instead).
	// not_found never carries it: that answer is byte-identical for every unknown or invisible
	// job, whichever kind's tool was asked. Absent too on tools of no single kind (list_jobs,
	// list_approvals).
	Kind string `json:"kind,omitempty" jsonschema:"the job kind the error concerns (eval, export); when a handle names a job of another kind, that kind; never on not_found"`
}

func (e *ToolError) Error() string {
	if e.RetryAfterMS > 0 {
		return fmt.Sprintf("%s: %s (retry after %s)", e.Code, e.Message, time.Duration(e.RetryAfterMS)*time.Millisecond)
	}
	return e.Code + ": " + e.Message
}

// ParseResult reads a tool result as clients must: an isError result's tool error from its
// text content (returned as *ToolError), otherwise structuredContent decoded into out. The
// error is for results that fit neither shape.
func ParseResult(res *mcp.CallToolResult, out any) (*ToolError, error) {
	if res == nil {
		return nil, errors.New("no result")
	}
	if res.IsError {
		var te ToolError
		if len(res.Content) == 1 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok && json.Unmarshal([]byte(tc.Text), &te) == nil && te.Code != "" {
				return &te, nil
			}
		}
		return nil, fmt.Errorf("tool error without a jobgate error body: %s", contentText(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("unexpected result %s: %w", raw, err)
	}
	return nil, nil
}

// contentText is a result's text content, its parts joined by spaces.
func contentText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, " ")
}

// ---------------------------------------------------------------- decisions

// MetaSurface is the _meta key of a resume_* tools/call by which a client declares the surface
// it answers from; only SurfaceCLI is taken (anything else records "tool"). It is the word of a
// client holding a valid token, recorded as such, not a proof.
const (
	MetaSurface = "io.jobgate/surface"
	SurfaceCLI  = "cli"
)

// Approver is who answers a job's input request beyond the principal, as the surface that
// carried the answer knows them (the pages' decision): the identity provider that vouched, the
// person's name and email, when and how they last authenticated, which surface and sign-in.
// Every field but Surface is optional ("" or zero when unknown); all go, sealed, to the
// decision record.
type Approver struct {
	Issuer   string
	Name     string
	Email    string
	AuthTime time.Time // auth_time, second precision; zero when unknown
	AMR      []string
	ACR      string
	// Surface is where the decision was made ("page" for the /approvals pages).
	Surface string
	// SignedInWith is how the principal signed in ("oidc-session" for a browser session,
	// "bearer-jwt" for a token).
	SignedInWith string
}

// Decision is a job's accepted answer as get_* shows it (the decision record, without its
// seal: `jobgate verify` checks the seal in the export's manifest.json).
type Decision struct {
	Decision     string    `json:"decision" jsonschema:"approve or reject"`
	By           string    `json:"by" jsonschema:"subject of the principal that answered"`
	Issuer       string    `json:"issuer,omitempty" jsonschema:"identity provider that vouched for the answerer"`
	Name         string    `json:"name,omitempty" jsonschema:"the answerer's name, when their token or session had it"`
	Email        string    `json:"email,omitempty" jsonschema:"the answerer's email, when their token or session had it"`
	At           time.Time `json:"at" jsonschema:"when the answer was accepted"`
	AuthTime     time.Time `json:"auth_time,omitzero" jsonschema:"when the answerer last authenticated, when known"`
	AMR          []string  `json:"amr,omitempty" jsonschema:"how the answerer authenticated (amr), when known"`
	ACR          string    `json:"acr,omitempty" jsonschema:"authentication context class (acr), when known"`
	Surface      string    `json:"surface,omitempty" jsonschema:"where the answer was given: tool, mrtr, tasks, page or cli (cli is declared by the client)"`
	SignedInWith string    `json:"signed_in_with,omitempty" jsonschema:"how the answerer signed in: bearer-jwt or oidc-session"`
	Meaning      string    `json:"meaning,omitempty" jsonschema:"the text the answerer was shown"`
	ScopeDigest  string    `json:"scope_digest" jsonschema:"digest of exactly what was answered"`
	Comment      string    `json:"comment,omitempty" jsonschema:"the answerer's comment"`
	Sealed       bool      `json:"sealed" jsonschema:"true when the record carries the frontend's seal (verify it in manifest.json with jobgate verify)"`
}

// JSONString decodes raw as a JSON string: ok is false when raw is absent or not a string. raw
// is one JSON value as a parsed map holds it (valid, no surrounding space); a plain string —
// no escapes, no control characters, valid UTF-8 — is its bytes, anything else goes through
// encoding/json.
func JSONString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' {
		inner := raw[1 : n-1]
		plain := utf8.Valid(inner)
		for _, c := range inner {
			if c == '\\' || c == '"' || c < 0x20 {
				plain = false
				break
			}
		}
		if plain {
			return string(inner), true
		}
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// ApprovalCardMeta is what a tool result's _meta carries under "io.jobgate/approval-card" for a
// host that renders MCP Apps: per job ID, the nonce the approval card sends with its decision
// (decide_approval). Only jobs whose open request the caller may answer have one; hosts keep
// _meta from the model.
type ApprovalCardMeta struct {
	Nonces map[string]string `json:"nonces"`
}

// ---------------------------------------------------------------- usage

// UsageGroup is what one owner's or kind's finished jobs used (get_usage, jobgate usage).
type UsageGroup struct {
	Key  string `json:"key" jsonschema:"the owner (subject) or kind this row sums"`
	Jobs int    `json:"jobs" jsonschema:"finished jobs summed"`
	// NoUsage counts jobs that ended before jobs recorded their usage: counted, with nothing to add.
	NoUsage int `json:"no_usage,omitempty" jsonschema:"of those, jobs that ended before usage was recorded (nothing to add)"`
	jobstate.Usage
}

// UsageOut is get_usage's result: the tenant's finished jobs in the window, summed by owner or kind.
type UsageOut struct {
	Tenant string       `json:"tenant" jsonschema:"the tenant summed (the caller's)"`
	Since  time.Time    `json:"since" jsonschema:"jobs that finished at or after this time are summed"`
	Until  time.Time    `json:"until" jsonschema:"when the sum was read"`
	By     string       `json:"by" jsonschema:"owner or kind: what each row groups"`
	Total  UsageGroup   `json:"total" jsonschema:"every row summed (key: *)"`
	Groups []UsageGroup `json:"groups" jsonschema:"one row per owner or kind, largest job count first"`
	// Truncated: more jobs finished in the window than one call reads; narrow since.
	Truncated bool `json:"truncated,omitempty" jsonschema:"true when the window held more finished jobs than one call sums (the sums cover the most recently finished); ask for a shorter since"`
}
