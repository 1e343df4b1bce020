package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
)

const (
	// exportPlanOverlap marks the change that plans an export in two steps: a head of
	// exportPlanHeadSteps part boundaries, whose parts start at once, while a second plan
	// activity walks the rest (workflow.GetVersion). Recorded runs planned in one activity.
	exportPlanOverlap = "export-plan-overlap"
	// exportPlanHeadSteps is how many parts the head plans: on PostgreSQL, csv, 1M rows the
	// whole walk was 13-24% of a job, and its head of two boundaries is a fifth of that.
	exportPlanHeadSteps = 2
)

// planHead plans the first parts only (contract.PlanExportInput.Steps), when the run takes
// the overlapped plan; otherwise (recorded runs) the whole plan, as before.
func (r *exportRun) planHead(ctx workflow.Context, jobID, digest string, overlap bool) (contract.PlanExportResult, error) {
	in := r.in
	steps := 0
	if overlap {
		steps = min(exportPlanHeadSteps, in.Concurrency)
	}
	var plan contract.PlanExportResult
	err := workflow.ExecuteActivity(r.activityOptions(ctx, "plan: count rows and cut parts", 10*time.Minute, 0), contract.PlanExportActivityName,
		contract.PlanExportInput{JobID: jobID, Tenant: in.Tenant, Dataset: in.Args.Dataset, Columns: in.Args.Columns,
			ConfigDigest: digest, PartRows: in.PartRows, Steps: steps}).Get(ctx, &plan)
	return plan, err
}

// planRest starts the plan of the parts after head's (head.More).
func (r *exportRun) planRest(ctx workflow.Context, jobID, digest string, head contract.PlanExportResult) workflow.Future {
	in := r.in
	after := head.Ranges[len(head.Ranges)-1].Through
	return workflow.ExecuteActivity(r.activityOptions(ctx, "plan: the parts after the first", 10*time.Minute, 0), contract.PlanExportActivityName,
		contract.PlanExportInput{JobID: jobID, Tenant: in.Tenant, Dataset: in.Args.Dataset, Columns: in.Args.Columns,
			ConfigDigest: digest, PartRows: in.PartRows, After: &after, PartsBefore: len(head.Ranges)})
}

// exportPartsPlanning runs the head's parts while rest (the plan of the others) runs, then the
// others as they are known: one activity per key range, at most Concurrency in flight, like
// exportParts. The rest's plan failing (a tenant over max_rows, found only by it) stops new
// parts and is the error; its scope change is changed.
func (r *exportRun) exportPartsPlanning(ctx workflow.Context, jobID, digest string, ranges []contract.KeyRange,
	rest workflow.Future) ([]contract.PartResult, bool, error) {
	in := r.in
	t := r.newPartTally(ctx, len(ranges))
	next := 0
	sel := workflow.NewSelector(ctx)
	planning := true
	sel.AddFuture(rest, func(f workflow.Future) {
		planning = false
		var plan contract.PlanExportResult
		err := f.Get(ctx, &plan)
		switch {
		case err != nil:
			t.fail(err)
		case plan.ScopeChanged:
			t.changed = true
		default:
			ranges = append(ranges, plan.Ranges...)
			t.results = append(t.results, make([]contract.PartResult, len(plan.Ranges))...)
			r.total = plan.Rows
		}
	})
	inflight := 0
	for {
		for inflight < in.Concurrency && next < len(ranges) && ctx.Err() == nil && t.open() {
			i := next
			next++
			inflight++
			summary := fmt.Sprintf("part %d of %d", i+1, len(ranges))
			if planning {
				summary = fmt.Sprintf("part %d (the rest is being planned)", i+1)
			}
			sel.AddFuture(r.startPart(ctx, jobID, digest, summary, i, ranges[i]), func(f workflow.Future) {
				inflight--
				t.take(ctx, r, i, f)
			})
		}
		if inflight == 0 && !planning {
			break
		}
		sel.Select(ctx)
		r.progressEvery(ctx, t)
	}
	return t.end(ctx)
}
