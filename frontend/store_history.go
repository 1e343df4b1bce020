// store_history.go holds the job store's wait on a run's history: the one Temporal call a job
// event stream (events.go) blocks in.

package frontend

import (
	"context"
	"errors"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
)

// historyPage is one answer of jobStore.WaitHistory.
type historyPage struct {
	// last is the ID of the last event of the page; 0 when the page had none (the wait ended
	// without news, or the page was empty).
	last int64
	// next continues after this page; nil when the run is closed and its history read to the end.
	next []byte
}

// historyPageSize bounds one page of a history read: a stream reading a run from its start
// catches up in pages, and only its last page (the wait) blocks.
const historyPageSize = 1000

// WaitHistory is GetWorkflowExecutionHistory with WaitNewEvent: from token (nil: the run's first
// event) it answers at once while there are events to page through, and once caught up it
// blocks in Temporal until the run's history grows or closes, or Temporal's long-poll
// interval passes (then the page is empty and next is the same position). Temporal does the
// waiting: a stream costs one open call, not a poll loop.
func (s *temporalStore) WaitHistory(ctx context.Context, id, runID string, token []byte) (historyPage, error) {
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
			return historyPage{}, errJobNotFound
		}
		return historyPage{}, storeErr("history "+id, err)
	}
	p := historyPage{next: resp.GetNextPageToken()}
	if ev := resp.GetHistory().GetEvents(); len(ev) > 0 {
		p.last = ev[len(ev)-1].GetEventId()
	}
	return p, nil
}
