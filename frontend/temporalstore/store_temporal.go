package temporalstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// temporalStore is the job store over a Temporal client: the only code of the frontend that
// calls client.Client. It maps Temporal's errors to the store's error values.
type Store struct {
	c         client.Client
	namespace string
	taskQueue string
	dc        converter.DataConverter
	// needsInputs caches decoded open input requests by memo payload bytes (memocache.go).
	needsInputs *needsInputCache
	// slots remembers whether the namespace has workflows.SAJobSlots (SlotsIndexed).
	slots slotsProbe
}

// slotsProbe is what the last probe of the namespace's JobSlots attribute found: a yes holds
// (an attribute is never removed under a running server), a no is asked again after
// slotsReprobe (an operator may run `jobgate setup` meanwhile).
type slotsProbe struct {
	mu    sync.Mutex
	known bool
	yes   bool
	asked time.Time
}

const slotsReprobe = time.Minute

func (s *Store) SlotsIndexed(ctx context.Context) bool {
	s.slots.mu.Lock()
	known, yes, asked := s.slots.known, s.slots.yes, s.slots.asked
	s.slots.mu.Unlock()
	if known && (yes || time.Since(asked) < slotsReprobe) {
		return yes
	}
	// Asked without the lock: a start never waits on another's probe (concurrent probes while
	// the answer is unknown are harmless, and rare: once at start-up, once a minute on a no).
	// A query naming an attribute the namespace lacks is an InvalidArgument; anything else
	// (unreachable, overloaded) decides nothing and is asked again next time.
	_, err := s.c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: s.namespace,
		Query: workflows.SAJobSlots.GetName() + " = -1"})
	var ia *serviceerror.InvalidArgument
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	switch {
	case err == nil:
		s.slots.known, s.slots.yes = true, true
	case errors.As(err, &ia) && !s.slots.yes: // a yes (another probe's) holds: attributes are never removed
		s.slots.known, s.slots.asked = true, time.Now()
	}
	return s.slots.yes
}

var _ jobstore.Store = (*Store)(nil)

// storeErr wraps err from a call named op: unreachable or overloaded is jobstore.ErrStoreUnavailable.
func storeErr(op string, err error) error {
	if errors.Is(err, payloadcrypt.ErrForgotten) {
		return fmt.Errorf("%s: %w", op, jobstore.ErrTenantForgotten)
	}
	if isTemporalUnavailable(err) {
		return fmt.Errorf("%s: %w: %w", op, jobstore.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isTemporalUnavailable reports Temporal being unreachable or overloaded.
func isTemporalUnavailable(err error) bool {
	var (
		u  *serviceerror.Unavailable
		re *serviceerror.ResourceExhausted
		de *serviceerror.DeadlineExceeded
	)
	if errors.As(err, &u) || errors.As(err, &re) || errors.As(err, &de) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return true
	}
	return false
}

func (s *Store) startWorkflowOptions(ctx context.Context, st jobstore.StartRequest) client.StartWorkflowOptions {
	sas := []temporal.SearchAttributeUpdate{
		workflows.SAJobTenant.ValueSet(st.Tenant), workflows.SAJobOwner.ValueSet(st.Owner),
		workflows.SAJobKind.ValueSet(st.Kind), workflows.SAJobStatus.ValueSet(string(workflows.StatusQueued))}
	if st.Slots > 0 && s.SlotsIndexed(ctx) {
		sas = append(sas, workflows.SAJobSlots.ValueSet(int64(st.Slots)))
	}
	return client.StartWorkflowOptions{
		ID:        st.ID,
		TaskQueue: s.taskQueue,
		// A key names one job ever (while retained): a closed job's ID is not reused, and a
		// running one is not joined — the caller compares it with the request (idempotency).
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(sas...),
		Memo:                                     st.Memo,
		StaticSummary:                            st.Summary,
		StaticDetails:                            st.Details,
		// Workflow tasks are dispatched fairly too; activities carry their own (the input's).
		Priority: st.Fairness.Priority(),
	}
}

func (s *Store) Start(ctx context.Context, st jobstore.StartRequest) (string, error) {
	opts := s.startWorkflowOptions(ctx, st)
	if !st.AwaitFirst {
		run, err := s.c.ExecuteWorkflow(ctx, opts, st.Workflow, st.Input)
		if err != nil {
			var started *serviceerror.WorkflowExecutionAlreadyStarted
			if errors.As(err, &started) {
				return "", jobstore.ErrAlreadyStarted
			}
			return "", storeErr("start "+st.ID, err)
		}
		return run.GetRunID(), nil
	}
	// Update-With-Start: the start and the first-state update in one call. The conflict policy
	// stays FAIL (Update-With-Start needs one set): an ID that names a job already starts
	// nothing and sends it no update, exactly as the plain start. That holds only for an update
	// ID the job has never seen: the server answers an existing job's update of the same ID
	// (running or completed) whatever the policy, so each start sends its own.
	op := s.c.NewWithStartWorkflowOperation(opts, st.Workflow, st.Input)
	h, err := s.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			WorkflowID:   st.ID,
			UpdateID:     firstStateUpdateID + "-" + uuid.NewString(),
			UpdateName:   workflows.UpdateFirstState,
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return "", jobstore.ErrAlreadyStarted
		}
		var timeout *client.WorkflowUpdateServiceTimeoutOrCanceledError
		if errors.As(err, &timeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			// The call ended before the start answered: the job may or may not exist.
			return "", fmt.Errorf("start %s: %w: %w: %w", st.ID, jobstore.ErrFirstStateTimeout, jobstore.ErrStoreUnavailable, err)
		}
		return "", storeErr("start "+st.ID, err)
	}
	// A handle exists only once the start answered, so the operation holds the run.
	run, err := op.Get(context.WithoutCancel(ctx))
	if err != nil {
		return "", storeErr("start "+st.ID, err)
	}
	if err := h.Get(ctx, nil); err != nil {
		// Started; its first state did not arrive (no worker in time, or a worker that does not
		// know the update yet). The caller shows the job as Describe has it.
		return run.GetRunID(), fmt.Errorf("start %s: %w: %w", st.ID, jobstore.ErrFirstStateTimeout, err)
	}
	return run.GetRunID(), nil
}

// firstStateUpdateID is the ID of the first-state update a retried start sends a job it found
// queued (retries are deduplicated by Temporal: one such update per job); each Update-With-Start
// sends its own ID with this prefix.
const firstStateUpdateID = "first-state"

func (s *Store) FirstState(ctx context.Context, id, runID string) error {
	h, err := s.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		RunID:        runID,
		UpdateID:     firstStateUpdateID,
		UpdateName:   workflows.UpdateFirstState,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err != nil {
		return storeErr("first state of "+id, err)
	}
	return nil
}

// Describe answers while no worker runs: everything comes from the server's mutable state
// (status, search attributes, memo), never from a query.
func (s *Store) Describe(ctx context.Context, id string) (*jobstore.Job, error) {
	resp, err := s.c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil, jobstore.ErrJobNotFound
		}
		return nil, storeErr("describe "+id, err)
	}
	j := s.JobFromInfo(resp.GetWorkflowExecutionInfo())
	if j.Forgotten {
		return nil, jobstore.ErrJobNotFound
	}
	j.CancelRequested = resp.GetWorkflowExtendedInfo().GetCancelRequested()
	return j, nil
}

// Result reads the close event, which works with no worker running.
func (s *Store) Result(ctx context.Context, id, runID string, ptr any) error {
	if err := s.c.GetWorkflow(ctx, id, runID).Get(ctx, ptr); err != nil {
		return storeErr("read result of "+id, err)
	}
	return nil
}

// QueryEpisodes queries the job's current run. It needs a worker (one replays the run when it
// is not cached); list_episodes falls back to the artifact store without one.
func (s *Store) QueryEpisodes(ctx context.Context, id string, q workflows.EpisodesQuery) (workflows.EpisodesQueryResult, error) {
	var res workflows.EpisodesQueryResult
	v, err := s.c.QueryWorkflow(ctx, id, "", workflows.QueryEpisodes, q)
	if err == nil {
		err = v.Get(&res)
	}
	if err != nil {
		return res, storeErr("query episodes of "+id, err)
	}
	return res, nil
}

func (s *Store) Cancel(ctx context.Context, id, identity, reason string) error {
	_, err := s.c.WorkflowService().RequestCancelWorkflowExecution(ctx, &workflowservice.RequestCancelWorkflowExecutionRequest{
		Namespace:         s.namespace,
		WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id},
		Identity:          identity,
		RequestId:         uuid.NewString(),
		Reason:            reason,
	})
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return jobstore.ErrJobNotFound
		}
		return storeErr("cancel "+id, err)
	}
	return nil
}

func (s *Store) Resume(ctx context.Context, id, runID, updateID string, req workflows.ResumeRequest) error {
	// Run ID: the update goes to the run the seal names (a newer run would refuse it anyway).
	h, err := s.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		RunID:        runID,
		UpdateID:     updateID,
		UpdateName:   workflows.UpdateResume,
		WaitForStage: client.WorkflowUpdateStageCompleted,
		Args:         []any{req},
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	return resumeStoreErr(id, err)
}

// resumeStoreErr maps what Temporal answered a resume update: the workflow's refusal (an
// application error from its validator or handler) is a *resumeRejected; unreachable, overloaded
// or out of time is errUpdateTimeout; a closed or unknown run is jobstore.ErrJobNotFound.
func resumeStoreErr(id string, err error) error {
	if err == nil {
		return nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return &jobstore.ResumeRejected{Kind: appErr.Type(), Msg: appErr.Message()}
	}
	if isTemporalUnavailable(err) {
		return fmt.Errorf("resume %s: %w: %w", id, jobstore.ErrUpdateTimeout, err)
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return jobstore.ErrJobNotFound
	}
	return fmt.Errorf("resume %s: %w", id, err)
}

func (s *Store) List(ctx context.Context, f jobstore.Filter, pageSize int, token []byte) ([]*jobstore.Job, []byte, error) {
	q, err := VisibilityQuery(f)
	if err != nil {
		return nil, nil, fmt.Errorf("list: %w", err)
	}
	if token != nil && !pageTokenShape(token) {
		return nil, nil, fmt.Errorf("list: %w", jobstore.ErrPageToken)
	}
	resp, err := s.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace:     s.namespace,
		PageSize:      int32(pageSize),
		NextPageToken: token,
		Query:         q,
	})
	if err != nil {
		return nil, nil, listStoreErr(err, token)
	}
	jobs := make([]*jobstore.Job, 0, len(resp.GetExecutions()))
	for _, info := range resp.GetExecutions() {
		if j := s.JobFromInfo(info); !j.Forgotten {
			jobs = append(jobs, j) // a forgotten tenant's job is no job (a page may come out short)
		}
	}
	return jobs, resp.GetNextPageToken(), nil
}

// pageTokenShape reports whether token can be a page token of Temporal's visibility stores
// (SQL and Elasticsearch alike page with a JSON object). Anything else never came from one, and
// the server answers it with an internal error the SDK retries until its deadline (measured:
// 10 s on the embedded server), so it is refused here at once.
func pageTokenShape(token []byte) bool {
	t := bytes.TrimSpace(token)
	return len(t) > 1 && t[0] == '{' && json.Valid(t)
}

// listStoreErr maps a failed visibility page: our query is constant in shape, so an invalid
// argument with a page token is the token (errPageToken), without one the query.
func listStoreErr(err error, token []byte) error {
	var ia *serviceerror.InvalidArgument
	if errors.As(err, &ia) && token != nil {
		return fmt.Errorf("%w: %w", jobstore.ErrPageToken, err)
	}
	return storeErr("list", err)
}

func (s *Store) Count(ctx context.Context, f jobstore.Filter) (int, error) {
	q, err := VisibilityQuery(f)
	if err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	resp, err := s.c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: s.namespace, Query: q})
	if err != nil {
		return 0, storeErr("count", err)
	}
	return int(resp.GetCount()), nil
}

func (s *Store) Retention(ctx context.Context) (time.Duration, bool) {
	resp, err := s.c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.namespace})
	if err != nil || resp.GetConfig().GetWorkflowExecutionRetentionTtl() == nil {
		return 0, false
	}
	return resp.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(), true
}

func (s *Store) CheckHealth(ctx context.Context) error {
	_, err := s.c.CheckHealth(ctx, nil)
	return err
}

// jobFromInfo reads a job from an execution info (Describe and ListWorkflow share the type).
func (s *Store) JobFromInfo(info *workflowpb.WorkflowExecutionInfo) *jobstore.Job {
	dc := s.dc
	j := &jobstore.Job{
		ID:    info.GetExecution().GetWorkflowId(),
		RunID: info.GetExecution().GetRunId(),
		// Empty from servers before first run IDs were reported; the job's episode log is then
		// out of reach (it is scoped by the first run ID).
		FirstRunID: info.GetFirstRunId(),
		Exec:       execStatusOf(info.GetStatus()),
	}
	if t := info.GetStartTime(); t != nil {
		j.StartedAt = t.AsTime()
	}
	if t := info.GetCloseTime(); t != nil {
		j.ClosedAt = t.AsTime()
	}
	sa := info.GetSearchAttributes()
	j.Tenant = decodeKeyword(dc, sa, workflows.SAJobTenant.GetName())
	j.Owner = decodeKeyword(dc, sa, workflows.SAJobOwner.GetName())
	j.Kind = decodeKeyword(dc, sa, workflows.SAJobKind.GetName())
	j.SAStatus = workflows.Status(decodeKeyword(dc, sa, workflows.SAJobStatus.GetName()))
	m := info.GetMemo()
	var err error
	if j.InputHash, _, err = decodeMemoErr[string](dc, m, workflows.MemoInputHash); forgotten(err) {
		// Every jobgate job has an input hash: sealed under a deleted key, the job is a
		// forgotten tenant's, and nothing else of it will open either.
		j.Forgotten = true
		return j
	}
	j.CreatedAt, _ = decodeMemo[time.Time](dc, m, workflows.MemoCreatedAt)
	j.Progress, _ = decodeMemo[workflows.Progress](dc, m, workflows.MemoProgress)
	j.Slots, _ = decodeMemo[int](dc, m, workflows.MemoSlots)
	if u, ok := decodeMemo[workflows.Usage](dc, m, workflows.MemoUsage); ok {
		j.Usage = &u
	}
	if ni, view, ok := s.needsInputs.decode(dc, m); ok && ni != nil && ni.InputID != "" {
		j.NeedsInput, j.NeedsInputJSON = ni, view
	}
	if je, ok := decodeMemo[*workflows.JobError](dc, m, workflows.MemoError); ok && je != nil && je.Code != "" {
		if je.Code == workflows.ErrCodeExportFailed && je.Message != workflows.MsgExportFailed {
			// Recorded before the message was fixed: it held the worker's pid@host and the
			// driver's error (host, user, database). Callers get the fixed text; history keeps it.
			if j.Progress.Message == je.Message {
				j.Progress.Message = workflows.MsgExportFailed
			}
			je.Message = workflows.MsgExportFailed
		}
		j.JobErr = je
	}
	if d, ok := decodeMemo[*workflows.DecisionRecord](dc, m, workflows.MemoDecision); ok && d != nil {
		j.Decision = d
	}
	return j
}

// execStatusOf maps Temporal's execution status to the core's run state, which is the status's
// name in lower case (jobstore.RunState; TestExecStatusOfSpellsTemporalStatus). UNSPECIFIED and
// every status past TIMED_OUT (PAUSED, deprecated and never reported for a job, and any newer
// one) are RunUnknown: protobuf never renumbers an enum value, so the range stays right.
func execStatusOf(st enumspb.WorkflowExecutionStatus) jobstore.RunState {
	if st < enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || st > enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT {
		return jobstore.RunUnknown
	}
	return jobstore.RunState(strings.ToLower(st.String()))
}

// newTemporalStore is the job store of Temporal client c, in namespace, starting jobs on taskQueue.
func New(c client.Client, namespace, taskQueue string, dc converter.DataConverter) *Store {
	return &Store{c: c, namespace: namespace, taskQueue: taskQueue, dc: dc, needsInputs: newNeedsInputCache()}
}

// infoDecoder is a Temporal store without a client: only its decoding of execution infos
// (the in-memory store describes its jobs as Temporal would).
func InfoDecoder(dc converter.DataConverter) *Store {
	return &Store{dc: dc, needsInputs: newNeedsInputCache()}
}
