package workflows

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/activities/contract"
)

// steppedPlan answers PlanExport as the activity does for a tenant of n full parts: a head of
// in.Steps ranges with More, then the rest after in.After.
func steppedPlan(n int) func(int, contract.PlanExportInput) (contract.PlanExportResult, error) {
	return func(_ int, in contract.PlanExportInput) (contract.PlanExportResult, error) {
		whole := planOf(in.ConfigDigest, n)
		if in.After != nil {
			rest := whole
			rest.Ranges = whole.Ranges[in.PartsBefore:]
			return rest, nil
		}
		if in.Steps > 0 && in.Steps < n {
			head := whole
			head.Ranges, head.Rows, head.More = whole.Ranges[:in.Steps], in.Steps*rowsPerPart, true
			return head, nil
		}
		return whole, nil
	}
}

// TestExport_PlanOverlap: the plan's head gives the first parts, which start before the rest
// is planned; the rest's parts follow, numbered on; the artifact holds every part and the
// progress total is the whole plan's. A tenant the rest's plan finds over max_rows fails the job
// with dataset_too_large and deletes what the head's parts wrote.
func TestExport_PlanOverlap(t *testing.T) {
	t.Run("AllParts", func(t *testing.T) {
		h := newExportHarness(t)
		stepped := steppedPlan(7)
		partStarted := make(chan struct{})
		var once sync.Once
		h.plan = func(n int, in contract.PlanExportInput) (contract.PlanExportResult, error) {
			if in.After != nil {
				// The rest's plan answers only once a head part runs: parts overlap it.
				select {
				case <-partStarted:
				case <-time.After(10 * time.Second):
					t.Error("no part started while the rest was being planned")
				}
			}
			return stepped(n, in)
		}
		h.part = func(in contract.ExportPartInput) (contract.PartResult, error) {
			once.Do(func() { close(partStarted) })
			return contract.PartResult{Part: in.Part, Chunks: 1, Rows: rowsPerPart, Bytes: 100}, nil
		}
		in := exportInput(false)
		h.execute(in)
		res := h.result()
		assert.Equal(t, 7*rowsPerPart, res.Manifest.Rows)
		assert.Equal(t, 7*rowsPerPart, h.lastProgress().Total)

		require.Len(t, h.plans, 2)
		assert.Equal(t, exportPlanHeadSteps, h.plans[0].Steps)
		assert.Nil(t, h.plans[0].After)
		if assert.NotNil(t, h.plans[1].After) {
			assert.Equal(t, planOf(cfg1, 7).Ranges[exportPlanHeadSteps-1].Through, *h.plans[1].After)
		}
		assert.Equal(t, exportPlanHeadSteps, h.plans[1].PartsBefore)
		assert.Zero(t, h.plans[1].Steps)

		whole := planOf(cfg1, 7)
		require.Len(t, h.parts, 7)
		sort.Slice(h.parts, func(i, j int) bool { return h.parts[i].Part < h.parts[j].Part })
		for i, p := range h.parts {
			assert.Equal(t, i+1, p.Part)
			assert.Equal(t, whole.Ranges[i], p.Range)
		}
		require.Len(t, h.finalizes, 1)
		assert.Len(t, h.finalizes[0].Parts, 7)
	})

	t.Run("RestOverMaxRows", func(t *testing.T) {
		h := newExportHarness(t)
		stepped := steppedPlan(7)
		h.plan = func(n int, in contract.PlanExportInput) (contract.PlanExportResult, error) {
			if in.After != nil {
				return contract.PlanExportResult{}, temporal.NewApplicationError("dataset \"customers\": over max_rows", contract.ErrTypeDatasetTooLarge)
			}
			return stepped(n, in)
		}
		h.execute(exportInput(false))
		requireAppErrType(t, h.env.GetWorkflowError(), ErrCodeDatasetTooLarge)
		assert.Equal(t, 2, h.count("PlanExport"), "the rest's plan is not retried")
		assert.Equal(t, 0, h.count("FinalizeExport"))
		assert.Equal(t, []contract.DeleteExportInput{{JobID: exportJobID, FirstRunID: testRunID}}, h.deletes)
		assert.LessOrEqual(t, len(h.parts), exportPlanHeadSteps, "no part of the rest's ranges ran")
	})
}
