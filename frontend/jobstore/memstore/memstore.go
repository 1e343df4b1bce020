package memstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/temporalstore"
	"github.com/jobgate/jobgate/workflows"
)

// Store is the one in-memory job store of the core's unit tests: jobs by ID in the core's
// terms, and a record of every call. It is the store's edge, not a mock of Temporal: it keeps
// jobstore.Store's contract (ErrAlreadyStarted for a taken ID, ErrJobNotFound for an unknown
// one …), evaluates List's and Count's jobstore.Filter against its runs (the store suite,
// frontend/jobstore/storetest, holds it to what the Temporal store answers), and lets a test
// say what the workflow would do (OnFirstState, OnResume).
type Store struct {
	Mu sync.Mutex

	Jobs            map[string]*jobstore.Job
	Dec             *temporalstore.Store // put's decoder (its needs-input cache lives as long as the store)
	Results         map[string]any       // run ID → the workflow's result
	RetentionAnswer time.Duration        // 0: the store does not say

	// firstState, when set, is what the job's workflow does before its first state (e.g. open
	// its input request); nil means no worker runs: a start that awaits it times out.
	OnFirstState func(j *jobstore.Job)
	// resume, when set, answers Resume as the workflow would; nil accepts every answer.
	OnResume func(j *jobstore.Job, req workflows.ResumeRequest) error

	// earlier are runs before the current ones of m.jobs (closed by continue-as-new), which
	// List and Count select too (continueAsNew makes them).
	earlier []*jobstore.Job
	// jobSlots are the slots indexed at a run's start (workflows.SAJobSlots), by run ID; a run
	// without an entry has none.
	JobSlots map[string]int
	// Scripted failures: listErr fails every List; onCount, when set, runs first in every Count
	// (it may block) and an error it returns is Count's.
	ListErr error
	OnCount func(f jobstore.Filter) error
	// leaked are rows every first List page carries whatever the filter: a visibility store
	// answering outside its query, which the core must drop.
	Leaked []*jobstore.Job
	// slotsIndexed answers SlotsIndexed.
	Indexed bool
	// startErr / describeErr fail Start / Describe when set.
	StartErr, describeErr error

	// The record.
	Starts      []jobstore.StartRequest
	Describes   int
	ResultReads map[string]int // run ID → result reads
	Cancels     []string
	Resumes     []ResumeCall
	Lists       []List
	CountCalls  int
	RunCount    int

	// events counts each job's history events (one per put); wake is closed and replaced on
	// every put, waking WaitHistory.
	events map[string]int64
	wake   chan struct{}
}

type List struct {
	Filter   jobstore.Filter
	PageSize int
	Token    []byte
}

type ResumeCall struct {
	ID, RunID, UpdateID string
	Req                 workflows.ResumeRequest
}

var _ jobstore.Store = (*Store)(nil)

func New() *Store {
	return &Store{Jobs: map[string]*jobstore.Job{}, Dec: temporalstore.InfoDecoder(converter.GetDefaultDataConverter()), Results: map[string]any{},
		ResultReads: map[string]int{}, JobSlots: map[string]int{}}
}

// put stores a job recorded as Temporal keeps it (execInfo), read as the Temporal store reads it.
func (m *Store) Put(info *workflowpb.WorkflowExecutionInfo) *jobstore.Job {
	j := m.Dec.JobFromInfo(info)
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.Jobs[j.ID] = j
	if p := info.GetSearchAttributes().GetIndexedFields()[workflows.SAJobSlots.GetName()]; p != nil {
		var n int
		if err := converter.GetDefaultDataConverter().FromPayload(p, &n); err == nil && n > 0 {
			m.JobSlots[j.RunID] = n
		}
	}
	if m.events == nil {
		m.events = map[string]int64{}
	}
	m.events[j.ID]++
	if m.wake != nil {
		close(m.wake)
	}
	m.wake = make(chan struct{})
	return j
}

// WaitHistory serves the job's history as one event per put: it answers at once while there
// are events after token, and otherwise waits for the next put (or the run being closed).
func (m *Store) WaitHistory(ctx context.Context, id, runID string, token []byte) (jobstore.HistoryPage, error) {
	from, _ := strconv.ParseInt(string(token), 10, 64)
	for {
		m.Mu.Lock()
		j, ok := m.Jobs[id]
		if !ok || (runID != "" && j.RunID != runID) {
			m.Mu.Unlock()
			return jobstore.HistoryPage{}, jobstore.ErrJobNotFound
		}
		n, closed := m.events[id], j.Exec != jobstore.RunRunning
		if m.wake == nil {
			m.wake = make(chan struct{})
		}
		wake := m.wake
		m.Mu.Unlock()
		switch {
		case n > from && closed:
			return jobstore.HistoryPage{Last: n, Relevant: n}, nil
		case n > from:
			return jobstore.HistoryPage{Last: n, Relevant: n, Next: []byte(strconv.FormatInt(n, 10))}, nil
		case closed:
			return jobstore.HistoryPage{}, nil
		}
		select {
		case <-ctx.Done():
			return jobstore.HistoryPage{}, ctx.Err()
		case <-wake:
		}
	}
}

func (m *Store) Start(ctx context.Context, st jobstore.StartRequest) (string, error) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.Starts = append(m.Starts, st)
	if m.StartErr != nil {
		return "", m.StartErr
	}
	if _, ok := m.Jobs[st.ID]; ok {
		return "", jobstore.ErrAlreadyStarted
	}
	m.RunCount++
	j := &jobstore.Job{ID: st.ID, RunID: fmt.Sprintf("run-%d", m.RunCount), Tenant: st.Tenant, Owner: st.Owner, Kind: st.Kind,
		Exec: jobstore.RunRunning, SAStatus: workflows.StatusQueued}
	j.InputHash, _ = st.Memo[workflows.MemoInputHash].(string)
	j.CreatedAt, _ = st.Memo[workflows.MemoCreatedAt].(time.Time)
	j.StartedAt = j.CreatedAt
	j.Progress, _ = st.Memo[workflows.MemoProgress].(workflows.Progress)
	j.Slots, _ = st.Memo[workflows.MemoSlots].(int)
	if u, ok := st.Memo[workflows.MemoUsage].(workflows.Usage); ok {
		j.Usage = &u
	}
	m.Jobs[st.ID] = j
	if st.Slots > 0 && m.Indexed {
		m.JobSlots[j.RunID] = st.Slots
	}
	if st.AwaitFirst {
		if m.OnFirstState == nil {
			return j.RunID, fmt.Errorf("start %s: %w", st.ID, jobstore.ErrFirstStateTimeout)
		}
		m.OnFirstState(j)
	}
	return j.RunID, nil
}

func (m *Store) FirstState(ctx context.Context, id, runID string) error {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	j, ok := m.Jobs[id]
	switch {
	case !ok || j.RunID != runID:
		return jobstore.ErrJobNotFound
	case m.OnFirstState == nil:
		return jobstore.ErrFirstStateTimeout
	}
	if j.SAStatus == workflows.StatusQueued {
		m.OnFirstState(j)
	}
	return nil
}

func (m *Store) Describe(ctx context.Context, id string) (*jobstore.Job, error) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.Describes++
	if m.describeErr != nil {
		return nil, m.describeErr
	}
	j, ok := m.Jobs[id]
	if !ok {
		return nil, jobstore.ErrJobNotFound
	}
	c := *j // callers get a snapshot, as from a Describe
	return &c, nil
}

func (m *Store) Result(ctx context.Context, id, runID string, ptr any) error {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.ResultReads[runID]++
	res, ok := m.Results[runID]
	if !ok {
		return fmt.Errorf("read result of %s: %w", id, jobstore.ErrJobNotFound)
	}
	b, err := json.Marshal(res) // as the data converter stores it
	if err != nil {
		return err
	}
	return json.Unmarshal(b, ptr)
}

func (m *Store) Cancel(ctx context.Context, id, identity, reason string) error {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.Cancels = append(m.Cancels, id)
	j, ok := m.Jobs[id]
	if !ok || j.Exec != jobstore.RunRunning {
		return jobstore.ErrJobNotFound
	}
	j.CancelRequested = true
	return nil
}

func (m *Store) Resume(ctx context.Context, id, runID, updateID string, req workflows.ResumeRequest) error {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.Resumes = append(m.Resumes, ResumeCall{ID: id, RunID: runID, UpdateID: updateID, Req: req})
	j, ok := m.Jobs[id]
	if !ok || j.RunID != runID || j.Exec != jobstore.RunRunning {
		return jobstore.ErrJobNotFound
	}
	if m.OnResume != nil {
		return m.OnResume(j, req)
	}
	j.NeedsInput, j.NeedsInputJSON, j.SAStatus = nil, nil, workflows.StatusRunning
	return nil
}

func (m *Store) List(ctx context.Context, f jobstore.Filter, pageSize int, token []byte) ([]*jobstore.Job, []byte, error) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.Lists = append(m.Lists, List{Filter: f, PageSize: pageSize, Token: token})
	if m.ListErr != nil {
		return nil, nil, m.ListErr
	}
	if err := f.Validate(); err != nil {
		return nil, nil, fmt.Errorf("list: %w", err)
	}
	var after memPos
	if token != nil {
		if err := json.Unmarshal(token, &after); err != nil || after.RunID == "" {
			return nil, nil, fmt.Errorf("list: %w", jobstore.ErrPageToken)
		}
	}
	var page []*jobstore.Job
	for _, j := range m.selectLocked(f) {
		if token != nil && !after.before(posOf(j)) {
			continue
		}
		if len(page) == pageSize {
			break
		}
		c := *j // callers get a snapshot, as from a visibility page
		page = append(page, &c)
	}
	var next []byte
	if len(page) == pageSize && pageSize > 0 {
		// As Temporal's SQL visibility: a full page has a next token, which may lead to an empty
		// page. The token is the last row's position, so rows that change meanwhile move as they
		// do in Temporal (a job finishing while paged can be listed again).
		next, _ = json.Marshal(posOf(page[len(page)-1]))
	}
	if token == nil {
		page = append(page, m.Leaked...)
	}
	return page, next, nil
}

// memPos is a run's position in List's order (the page token).
type memPos struct {
	Closed time.Time // zero while running: running runs come first
	Start  time.Time
	RunID  string
}

func posOf(j *jobstore.Job) memPos {
	return memPos{Closed: j.ClosedAt, Start: j.StartedAt, RunID: j.RunID}
}

// before reports whether p comes before q in Temporal's default order: unfinished first, most
// recently closed first, newest start first, then by run ID.
func (p memPos) before(q memPos) bool {
	switch {
	case p.Closed.IsZero() != q.Closed.IsZero():
		return p.Closed.IsZero()
	case !p.Closed.Equal(q.Closed):
		return p.Closed.After(q.Closed)
	case !p.Start.Equal(q.Start):
		return p.Start.After(q.Start)
	}
	return p.RunID < q.RunID
}

// selectLocked is every run f selects, in List's order.
func (m *Store) selectLocked(f jobstore.Filter) []*jobstore.Job {
	var out []*jobstore.Job
	for _, j := range m.Jobs {
		if m.matchesLocked(f, j) {
			out = append(out, j)
		}
	}
	for _, j := range m.earlier {
		if m.matchesLocked(f, j) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *jobstore.Job) int {
		switch pa, pb := posOf(a), posOf(b); {
		case pa.before(pb):
			return -1
		case pb.before(pa):
			return 1
		}
		return 0
	})
	return out
}

// matchesLocked evaluates f on run j, field by field as jobstore.Filter documents it.
func (m *Store) matchesLocked(f jobstore.Filter, j *jobstore.Job) bool {
	closed := j.Exec != jobstore.RunRunning
	slots, indexed := m.JobSlots[j.RunID]
	switch {
	case j.Tenant != f.Tenant,
		f.Owner != "" && j.Owner != f.Owner,
		len(f.Owners) > 0 && !slices.Contains(f.Owners, j.Owner),
		f.IDs != nil && !slices.Contains(f.IDs, j.ID),
		slices.Contains(f.ExcludeIDs, j.ID),
		f.Runs == jobstore.RunsLatest && j.Exec == jobstore.RunContinuedAsNew,
		f.Runs == jobstore.RunsUnfinished && closed,
		f.Runs == jobstore.RunsContinued && j.Exec != jobstore.RunContinuedAsNew,
		f.Kinds != nil && !slices.Contains(f.Kinds, j.Kind),
		f.Status != "" && memStatus(j) != f.Status,
		!f.StartedSince.IsZero() && j.StartedAt.Before(f.StartedSince),
		!f.StartedBefore.IsZero() && !j.StartedAt.Before(f.StartedBefore),
		!f.ClosedSince.IsZero() && (!closed || j.ClosedAt.Before(f.ClosedSince)),
		f.NoSlots && indexed,
		f.SlotsMin > 0 && (!indexed || slots < f.SlotsMin),
		f.SlotsMax > 0 && (!indexed || slots > f.SlotsMax):
		return false
	}
	if f.Answerers != nil {
		a := memAnswerer(j)
		if !slices.Contains(f.Answerers, a) || a == workflows.AnswererApprover && f.ApproverNot != "" && j.Owner == f.ApproverNot {
			return false
		}
	}
	return true
}

// memStatus is the contract status a store filter sees: how a closed run closed, or the phase
// an unfinished run's workflow reported (not job.status()'s cancelling for an unseen cancel).
func memStatus(j *jobstore.Job) workflows.Status {
	if j.Exec == jobstore.RunRunning {
		return j.SAStatus
	}
	s, _ := jobstore.ClosedStatus(j.Exec) // "" for continued as new: no contract status
	return s
}

// memAnswerer is the run's JobAnswerer as its workflow keeps it (workflows/job.go): its open
// request's answerer while it awaits input, none otherwise.
func memAnswerer(j *jobstore.Job) string {
	if j.Exec != jobstore.RunRunning || j.SAStatus != workflows.StatusAwaitingInput {
		return ""
	}
	return workflows.Answerer(j.NeedsInput)
}

// continueAsNew closes id's current run as continued-as-new at t and makes a new current run
// of it, started at t (the job keeps its memo and attributes, as a workflow's carried state).
func (m *Store) ContinueAsNew(id string, t time.Time) *jobstore.Job {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	old := m.Jobs[id]
	m.RunCount++
	j := *old
	j.RunID, j.StartedAt, j.Exec, j.ClosedAt = fmt.Sprintf("run-%d", m.RunCount), t, jobstore.RunRunning, time.Time{}
	if n, ok := m.JobSlots[old.RunID]; ok {
		m.JobSlots[j.RunID] = n
	}
	old.Exec, old.ClosedAt = jobstore.RunContinuedAsNew, t
	m.earlier = append(m.earlier, old)
	m.Jobs[id] = &j
	return &j
}

func (m *Store) QueryEpisodes(context.Context, string, workflows.EpisodesQuery) (workflows.EpisodesQueryResult, error) {
	return workflows.EpisodesQueryResult{}, jobstore.ErrStoreUnavailable // no workflow runs here
}

func (m *Store) Count(ctx context.Context, f jobstore.Filter) (int, error) {
	m.Mu.Lock()
	m.CountCalls++
	hook := m.OnCount
	m.Mu.Unlock()
	if hook != nil {
		if err := hook(f); err != nil {
			return 0, err
		}
	}
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	m.Mu.Lock()
	defer m.Mu.Unlock()
	return len(m.selectLocked(f)), nil
}

func (m *Store) SlotsIndexed(context.Context) bool { return m.Indexed }

func (m *Store) Retention(context.Context) (time.Duration, bool) {
	return m.RetentionAnswer, m.RetentionAnswer > 0
}

func (m *Store) CheckHealth(context.Context) error { return nil }

// jobsOf reads execution infos as the Temporal store does (for scripted list pages).
func JobsOf(infos ...*workflowpb.WorkflowExecutionInfo) []*jobstore.Job {
	d := temporalstore.InfoDecoder(converter.GetDefaultDataConverter())
	js := make([]*jobstore.Job, len(infos))
	for i, info := range infos {
		js[i] = d.JobFromInfo(info)
	}
	return js
}

// Story: the in-memory store keeps no history (describe_job is tested on real Temporal).
func (m *Store) Story(ctx context.Context, kind workflows.Kind, req jobstore.StoryRequest) (*jobstore.StoryResult, error) {
	return nil, errors.New("memStore: no history")
}

// infoNow is the clock execInfo builds its runs around (an hour before it).
var infoNow = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// payload encodes v as the default data converter does.
func Payload(t testing.TB, v any) *commonpb.Payload {
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// execInfo is a run as Temporal's visibility describes it: id of tenant's owner, of kind, in
// execution state st, its JobStatus saStatus; started an hour before infoNow and, unless it
// runs, closed two minutes later.
func ExecInfo(t testing.TB, id, tenant, owner, kind string, st enumspb.WorkflowExecutionStatus, saStatus workflows.Status) *workflowpb.WorkflowExecutionInfo {
	start := infoNow.Add(-time.Hour)
	info := &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run-" + id},
		Status:    st,
		StartTime: timestamppb.New(start),
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			"JobTenant": Payload(t, tenant), "JobOwner": Payload(t, owner), "JobKind": Payload(t, kind), "JobStatus": Payload(t, string(saStatus)),
		}},
		Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{
			workflows.MemoCreatedAt: Payload(t, start),
			workflows.MemoProgress:  Payload(t, workflows.Progress{Done: 3, Failed: 1, Total: 10, AsOf: start.Add(time.Minute)}),
		}},
	}
	if st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		info.CloseTime = timestamppb.New(start.Add(2 * time.Minute))
	}
	return info
}
