// store_history.go holds the job store's wait on a run's history: the one Temporal call a job
// event stream (events.go) blocks in.

package temporalstore

import (
	"context"
	"errors"

	"github.com/jobgate/jobgate/frontend/jobstore"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
)

// viewEvent: an event of this type can change what a job view shows — the run starting or
// closing (continued as new included), a memo or search attribute upsert (progress, status,
// input request, error, decision), a cancellation request. Everything else (workflow and
// activity tasks, timers, updates before their effect is upserted) cannot, so a stream does not
// re-read the job for it.
func viewEvent(t enumspb.EventType) bool {
	switch t {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, enumspb.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
		enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED:
		return true
	}
	return false
}

// historyPageSize bounds one page of a history read: a stream reading a run from its start
// catches up in pages, and only its last page (the wait) blocks.
const historyPageSize = 1000

// WaitHistory is GetWorkflowExecutionHistory with WaitNewEvent: from token (nil: the run's first
// event) it answers at once while there are events to page through, and once caught up it
// blocks in Temporal until the run's history grows or closes, or Temporal's long-poll
// interval passes (then the page is empty and next is the same position). Temporal does the
// waiting: a stream costs one open call, not a poll loop.
func (s *Store) WaitHistory(ctx context.Context, id, runID string, token []byte) (jobstore.HistoryPage, error) {
	resp, err := s.c.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
		Namespace:              s.namespace,
		Execution:              &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID},
		MaximumPageSize:        historyPageSize,
		NextPageToken:          token,
		WaitNewEvent:           true,
		HistoryEventFilterType: enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT,
		SkipArchival:           true,
	})
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return jobstore.HistoryPage{}, jobstore.ErrJobNotFound
		}
		return jobstore.HistoryPage{}, storeErr("history "+id, err)
	}
	p := jobstore.HistoryPage{Next: resp.GetNextPageToken()}
	ev := resp.GetHistory().GetEvents()
	for _, e := range ev {
		if viewEvent(e.GetEventType()) {
			p.Relevant = e.GetEventId()
		}
	}
	if len(ev) > 0 {
		p.Last = ev[len(ev)-1].GetEventId()
	}
	p.Full = len(ev) >= historyPageSize
	if len(resp.GetRawHistory()) > 0 {
		// A server sending raw history (a namespace setting) gives no decoded events: every
		// page may matter.
		p.Relevant, p.Full = max(p.Last, 1), false
	}
	return p, nil
}
