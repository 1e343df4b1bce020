package tests

// Where an export's time goes, read from its workflow history: BenchmarkExportVsCopy reports
// each phase's share of jobgate's side, so a change to one of them shows as what it bought.

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/jobgate/jobgate/activities/contract"
)

// exportPhases is one export's wall time split by its history's events.
type exportPhases struct {
	// start: workflow started → the first activity scheduled (the first workflow task).
	start time.Duration
	// plan: the first plan activity scheduled → completed: the plan before any part (all of it,
	// or the head of a plan in two steps).
	plan time.Duration
	// planRest: the second plan activity of a plan in two steps, scheduled → completed; it runs
	// beside the first parts, so it is inside parts too.
	planRest time.Duration
	// parts: the first part scheduled → the last part completed.
	parts time.Duration
	// gap: the last part completed → finalize scheduled (a workflow task).
	gap time.Duration
	// finalize: finalize scheduled → completed.
	finalize time.Duration
	// close: finalize completed → the workflow completed (the retention child's start included).
	close time.Duration
	// total: workflow started → completed.
	total time.Duration
}

func (p *exportPhases) add(q exportPhases) {
	p.start += q.start
	p.plan += q.plan
	p.planRest += q.planRest
	p.parts += q.parts
	p.gap += q.gap
	p.finalize += q.finalize
	p.close += q.close
	p.total += q.total
}

// historyPhases reads the export's history (its latest run) and splits it into phases.
func historyPhases(t testing.TB, c client.Client, jobID string) exportPhases {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, jobID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		must(t, err)
		events = append(events, e)
	}
	typ := map[int64]string{} // scheduled event ID → activity type
	var p exportPhases
	var started, firstSched, partsFirst, partsLast, finSched, finDone, closed time.Time
	var planSched, planDone []time.Time // per plan activity, in order
	for _, e := range events {
		at := e.GetEventTime().AsTime()
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			started = at
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			name := e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
			typ[e.GetEventId()] = name
			if firstSched.IsZero() {
				firstSched = at
			}
			switch name {
			case contract.PlanExportActivityName:
				planSched = append(planSched, at)
			case contract.ExportPartActivityName:
				if partsFirst.IsZero() {
					partsFirst = at
				}
			case contract.FinalizeExportActivityName:
				finSched = at
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			switch typ[e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()] {
			case contract.PlanExportActivityName:
				planDone = append(planDone, at)
			case contract.ExportPartActivityName:
				partsLast = at
			case contract.FinalizeExportActivityName:
				finDone = at
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
			closed = at
		}
	}
	if started.IsZero() || closed.IsZero() || finDone.IsZero() || partsLast.IsZero() {
		t.Fatalf("export %s: history without the events of a finished export", jobID)
	}
	p.start = firstSched.Sub(started)
	if len(planSched) != len(planDone) || len(planSched) > 2 {
		t.Fatalf("export %s: %d plan activities scheduled, %d completed", jobID, len(planSched), len(planDone))
	}
	if len(planSched) > 0 {
		p.plan = planDone[0].Sub(planSched[0])
	}
	if len(planSched) == 2 {
		p.planRest = planDone[1].Sub(planSched[1])
	}
	p.parts = partsLast.Sub(partsFirst)
	p.gap = finSched.Sub(partsLast)
	p.finalize = finDone.Sub(finSched)
	p.close = closed.Sub(finDone)
	p.total = closed.Sub(started)
	return p
}

// report puts each phase's share of the summed wall time of jobgate's side (wall) as metrics,
// and the part of wall outside the workflow (the MCP start, and noticing the end by polling).
func (p exportPhases) report(b *testing.B, wall time.Duration) {
	share := func(d time.Duration) float64 { return 100 * d.Seconds() / wall.Seconds() }
	b.ReportMetric(share(p.start), "start-%")
	b.ReportMetric(share(p.plan), "plan-%")
	b.ReportMetric(share(p.parts), "parts-%")
	b.ReportMetric(share(p.gap+p.finalize+p.close), "finalize-%")
	b.ReportMetric(share(wall-p.total), "outside-%")
	b.Logf("phases (summed over %d exports, wall %s): start %s, plan %s (rest of the plan, beside the parts: %s), parts %s, gap %s, finalize %s, close %s, outside the workflow %s",
		b.N, wall.Round(time.Millisecond), p.start.Round(time.Millisecond), p.plan.Round(time.Millisecond), p.planRest.Round(time.Millisecond),
		p.parts.Round(time.Millisecond), p.gap.Round(time.Millisecond), p.finalize.Round(time.Millisecond),
		p.close.Round(time.Millisecond), (wall - p.total).Round(time.Millisecond))
}
