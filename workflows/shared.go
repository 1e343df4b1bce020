package workflows

import (
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows/jobstate"
)

// TaskQueueDefault is the task queue jobgate workers poll unless configured otherwise.
const TaskQueueDefault = "jobgate"

// Update names are part of history; never rename them (each kind's file names its workflows).
const (
	// UpdateResume is the update every job's open input request is answered by.
	UpdateResume = "jobgate.resume"
	// UpdateFirstState answers the run's first status past queued (awaiting_input, running,
	// cancelling or an end) once it is set: start_* sends it with the start (Update-With-Start)
	// so a job that at once asks its owner is answered with that request, with no polling.
	UpdateFirstState = "jobgate.first_state"
)

// Kind is one kind of job as the worker runs it. Each kind declares itself once, in its own
// file (its name, workflow names, evalKind/exportKind/FixtureKind); Kinds lists them, and
// nothing else enumerates kinds. A registered kind is one Kinds lists; which of them a
// deployment serves when it names none are the default ones (DefaultKindNames).
type Kind struct {
	Name string // KindEval, …: the middle of the job ID and the JobKind search attribute
	// OnRequest: a deployment serves the kind only when it names it (the conformance fixtures'
	// kind: `jobgate dev --conformance-fixtures`); every other kind is a default one.
	OnRequest    bool
	WorkflowName string // registered workflow type
	// Workflow returns the workflow function of w to register under WorkflowName.
	Workflow func(w *Workflows) any
	Unit     string // what progress counts: "episodes", "rows"
	// Versioning is how the kind's workflow meets a new worker version (Temporal Worker
	// Deployments, `jobgate worker --deployment-name/--build-id`): Pinned, a running job
	// finishes on the build it started on; AutoUpgrade, its next task runs on whatever version
	// is current. Ignored by an unversioned worker (dev). Required: the SDK refuses to register
	// a workflow without one on a versioned worker.
	Versioning workflow.VersioningBehavior
	// Auxiliary are the further workflows the kind starts (children such as the export's
	// retention), by registered name.
	Auxiliary map[string]any
	// AuxiliaryVersioning is each auxiliary workflow's versioning behaviour, by the same name.
	AuxiliaryVersioning map[string]workflow.VersioningBehavior
	// Activities are the *activities.Activities methods the kind's workflows execute, by name
	// (contract.*ActivityName): a worker serving the kind (jobgate worker --kinds) registers
	// exactly these, so an eval-only worker runs no export activity. Each method belongs to
	// exactly one kind (checked by a test).
	Activities []string
	// Story is how the kind's jobs read in a job's timeline (story.go).
	Story Story
}

// Kinds returns the registry of job kinds, in the order tools and flags list them: the worker
// registers each kind it serves (Kind.Register) and the frontend serves a tool family per kind.
// It is a function returning fresh values, not a package variable, so no caller (or test) can
// change what another sees.
func Kinds() []Kind { return []Kind{evalKind(), exportKind(), FixtureKind()} }

// DefaultKindNames lists, in registry order, the kinds a deployment serves when it names none
// (every kind but those served on request).
func DefaultKindNames() []string {
	var out []string
	for _, k := range Kinds() {
		if !k.OnRequest {
			out = append(out, k.Name)
		}
	}
	return out
}

// LookupKind finds a registered kind by name.
func LookupKind(name string) (Kind, bool) {
	for _, k := range Kinds() {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Status is the job status the contract exposes. It and Progress and JobError are defined in
// the leaf package jobstate, so clients read them without linking workflows.
type Status = jobstate.Status

const (
	StatusQueued        = jobstate.StatusQueued
	StatusRunning       = jobstate.StatusRunning
	StatusAwaitingInput = jobstate.StatusAwaitingInput
	StatusSucceeded     = jobstate.StatusSucceeded
	StatusFailed        = jobstate.StatusFailed
	StatusCancelling    = jobstate.StatusCancelling
	StatusCancelled     = jobstate.StatusCancelled
)

// Keyword search attributes every job carries; they drive list_jobs and the Temporal UI.
var (
	SAJobTenant = temporal.NewSearchAttributeKeyKeyword("JobTenant")
	SAJobOwner  = temporal.NewSearchAttributeKeyKeyword("JobOwner")
	SAJobKind   = temporal.NewSearchAttributeKeyKeyword("JobKind")
	SAJobStatus = temporal.NewSearchAttributeKeyKeyword("JobStatus")
	// SAJobAnswerer says who may answer the job's open input request (one of the Answerer*
	// values); absent while none is open. list_approvals selects on it in its visibility query,
	// so rows the caller may not answer never reach a page or a cursor.
	SAJobAnswerer = temporal.NewSearchAttributeKeyKeyword("JobAnswerer")
)

// SAJobSlots is the episode concurrency a job of a slot-holding kind (an eval) holds while
// unfinished, set by the frontend at its start (the memo "slots" holds the same number); a
// continue-as-new run keeps it. The quota check sums it by visibility counts alone (how many
// running evals hold slots in a range), never by listing them. Absent on jobs of other kinds
// and on evals started before it existed.
var SAJobSlots = temporal.NewSearchAttributeKeyInt64("JobSlots")

// SearchAttributeNames lists the custom Keyword search attributes to register in a namespace,
// read from the keys above so that there is one list.
func SearchAttributeNames() []string {
	keys := []temporal.SearchAttributeKeyKeyword{SAJobTenant, SAJobOwner, SAJobKind, SAJobStatus, SAJobAnswerer}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.GetName()
	}
	return out
}

// SearchAttributeTypes is every custom search attribute to register in a namespace, with its
// type: the Keyword ones of SearchAttributeNames and JobSlots (Int).
func SearchAttributeTypes() map[string]enumspb.IndexedValueType {
	sas := map[string]enumspb.IndexedValueType{SAJobSlots.GetName(): enumspb.INDEXED_VALUE_TYPE_INT}
	for _, n := range SearchAttributeNames() {
		sas[n] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	return sas
}

// JobAnswerer values.
const (
	AnswererOwner           = "owner"             // only the job's owner
	AnswererApprover        = "approver"          // a jobs:approve holder other than the owner
	AnswererApproverOrOwner = "approver-or-owner" // any jobs:approve holder, the owner too (self-approval allowed)
)

// Answerer is the JobAnswerer value for an open request n ("" for none or an unknown approver).
func Answerer(n *NeedsInput) string {
	if n == nil {
		return ""
	}
	switch n.Approver {
	case authz.ApproverOwner:
		return AnswererOwner
	case authz.ApproverApprover:
		if n.AllowSelf {
			return AnswererApproverOrOwner
		}
		return AnswererApprover
	}
	return ""
}

// Memo keys. The memo is what get_* reads when no worker is running.
const (
	MemoInputHash  = "input_hash"  // string: idempotency fingerprint of the start arguments
	MemoCreatedAt  = "created_at"  // time: first start of the job (survives continue-as-new)
	MemoProgress   = "progress"    // Progress
	MemoNeedsInput = "needs_input" // *NeedsInput, nil once answered
	MemoError      = "error"       // *JobError on failed/cancelled jobs
	MemoDecision   = "decision"    // *DecisionRecord of the answer that rejected the job
	MemoSlots      = "slots"       // int: episode concurrency an eval holds while unfinished (quotas)
	MemoUsage      = "usage"       // Usage: what the job used, written when it ends (get_usage)
)

// Usage is what a finished job used (jobstate.Usage).
type Usage = jobstate.Usage

// Progress is the job's progress as of its last memo update (jobstate.Progress).
type Progress = jobstate.Progress

// EvalSummary is the head of an eval's result (EvalResult), shared with its view
// (jobstate.EvalSummary).
type EvalSummary = jobstate.EvalSummary

// NeedsInput is an open input request: a durable workflow wait, answered by UpdateResume.
type NeedsInput struct {
	InputID      string         `json:"input_id"`
	Prompt       string         `json:"prompt"`
	AnswerSchema map[string]any `json:"answer_schema"`
	ScopeDigest  string         `json:"scope_digest"`
	// Scope is what is being approved (kind-specific), shown to whoever answers.
	Scope       map[string]any `json:"scope,omitempty"`
	Approver    authz.Approver `json:"approver"`
	AllowSelf   bool           `json:"allow_self,omitempty"`
	RequestedBy string         `json:"requested_by,omitempty"`
	ExpiresAt   time.Time      `json:"expires_at"`
}

// MsgExportFailed is the whole caller-visible message of ErrCodeExportFailed. The cause (a
// driver error names host, port, user and database; an activity error names the worker as
// pid@host) goes to the worker's log and stays in the job's history, never to the caller.
const MsgExportFailed = "the export failed on the worker; the operator's logs and the job's history have the details"

// JobError is the machine-readable reason a job failed or was cancelled (jobstate.JobError).
type JobError = jobstate.JobError

// Job error codes set by workflows.
const (
	ErrCodeRejected          = "rejected"
	ErrCodeInputExpired      = "input_expired"
	ErrCodeAllEpisodesFailed = "all_episodes_failed"
	ErrCodeCancelled         = "cancelled"
	ErrCodeDatasetChanged    = "dataset_changed"
	ErrCodeDatasetTooLarge   = "dataset_too_large"
	ErrCodeDatasetMissing    = "dataset_missing"
	// ErrCodeTenantMismatch: the input's tenant is not the workflow ID's (never started by a frontend).
	ErrCodeTenantMismatch = "tenant_mismatch"
	ErrCodeExportFailed   = "export_failed"
	// ErrCodeInternal: the job failed on a fault while executing, not as an outcome of its work
	// (a Tasks client sees the task failed, with a JSON-RPC error). Only the conformance
	// fixture protocol_error_job sets it.
	ErrCodeInternal = "internal"
)

// Update validator rejection types; the frontend maps them to tool error codes.
const (
	RejectInputNotExpected = "input_not_expected"
	RejectForbidden        = "forbidden"
	RejectNotFound         = "not_found"
	RejectInvalidArgument  = "invalid_argument"
	// RejectUnsealed: the answer has no valid resume seal for this run and request (not sent by
	// a frontend, tampered with, expired, or the worker has no resume keys).
	RejectUnsealed = "resume_unsealed"
)

// Decisions a resume may carry.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// ResumeRequest answers an open input request. Principal comes from the verified token of the
// request that carried it, never from tool arguments; the frontend seals the whole request
// (Seal) and the validator accepts it only if the seal binds exactly these fields to this run.
// Histories recorded before seals have requests without Seal, Surface and SignedInWith; they
// replay because validators do not run on replay.
type ResumeRequest struct {
	Principal   authz.Principal `json:"principal"`
	InputID     string          `json:"input_id"`
	ScopeDigest string          `json:"scope_digest"`
	Decision    string          `json:"decision"`
	Comment     string          `json:"comment,omitempty"`
	// Surface is how the answer reached the frontend (SurfaceTool, …) and SignedInWith how its
	// principal signed in (SignedInBearerJWT); both are sealed and go to the decision record.
	Surface      string `json:"surface,omitempty"`
	SignedInWith string `json:"signed_in_with,omitempty"`
	// Identity is what the token or session says of the approver beyond the principal (issuer,
	// name, email, auth_time, amr, acr; each optional), sealed and recorded.
	Identity
	// Meaning is the text the approver was shown for the request (its prompt), sealed by
	// digest and recorded; the validator refuses an answer shown another meaning than the open
	// request's (a page left open while the request changed). "" when the surface showed none.
	Meaning string `json:"meaning,omitempty"`
	// ExtendBy raises an eval's budget when approving its budget request (nil: by the
	// request's approve_extends_by). Sealed (ExtendByText).
	ExtendBy *Budget `json:"extend_by,omitempty"`
	// Seal is the frontend's resume seal over all of the above, the workflow and run ID and an
	// expiry (frontend/handle, jgr1); opaque here, opened by the injected ResumeVerifier.
	Seal string `json:"seal,omitempty"`
	// Signature is the frontend's Ed25519 signature over the same fields as Seal (frontend/handle,
	// jgds1): the seal is what lets the answer in, the signature is what lets an auditor holding
	// only the published public keys check the decision record it becomes. The validator does
	// not need it (the seal already proves a frontend sent the answer); a frontend without
	// signing keys sends none, and `jobgate verify` then fails the record.
	Signature string `json:"signature,omitempty"`
}

// Identity is contract.Identity (the approver beyond the principal).
type Identity = contract.Identity

// ResumeResult is what an accepted resume returns.
type ResumeResult struct {
	Decision string `json:"decision"`
	By       string `json:"by"`
}

// Digest returns "sha256:<hex>" of v's canonical JSON (encoding/json sorts map keys).
func Digest(v any) string {
	digest, err := contract.JSONDigest(v)
	if err != nil {
		panic(err) // only ever called on our own plain structs
	}
	return digest
}

// Duration is contract.Duration, jobgate's one duration type: "24h0m0s" in workflow inputs,
// so the Web UI shows it readably, and it reads the nanosecond numbers of histories recorded
// before that. An alias, so values pass between activities, workflows and the frontend
// without conversions.
type Duration = contract.Duration

// Fairness is how a job's tasks share worker slots with other tenants' (Temporal task queue
// fairness): the tenant is the key, its configured weight the weight. Resolved when the job
// starts and recorded in its input. On a server without fairness it is carried and ignored.
type Fairness struct {
	Key    string  `json:"key,omitempty"`
	Weight float32 `json:"weight,omitempty"`
}

// Priority is the Temporal priority carrying f (zero: the server's defaults).
func (f Fairness) Priority() temporal.Priority {
	return temporal.Priority{FairnessKey: f.Key, FairnessWeight: f.Weight}
}
