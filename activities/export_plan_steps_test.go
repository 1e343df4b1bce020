package activities

import (
	"reflect"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

// planInSteps plans j as the workflow does when it overlaps the plan with the first parts: a
// head of steps boundaries, then (when it says More) the rest after its last boundary.
func planInSteps(t testing.TB, h *harness, j job, steps int) (head, rest contract.PlanExportResult, err error) {
	t.Helper()
	in := j.planInput(h)
	in.Steps = steps
	if head, err = h.plan(in); err != nil || !head.More {
		return head, rest, err
	}
	if len(head.Ranges) != steps {
		t.Fatalf("head with More: %d ranges, asked for %d", len(head.Ranges), steps)
	}
	in = j.planInput(h)
	in.After = &head.Ranges[len(head.Ranges)-1].Through
	in.PartsBefore = len(head.Ranges)
	rest, err = h.plan(in)
	return head, rest, err
}

// TestPlanInSteps: a plan cut into a head of a few boundaries and its continuation gives
// exactly the ranges and rows of one whole plan, for every size around the head's; max_rows
// counts the head's parts in the continuation; a continuation that is not one is refused.
func TestPlanInSteps(t *testing.T) {
	for _, mk := range []func(testing.TB) backend{sqliteBackend, postgresBackend} {
		be := mk(t)
		t.Run(be.name, func(t *testing.T) {
			h := newHarness(t, be.datasets)
			keys := tenantKeys(t, be, "acme")
			for _, pr := range []int{1, 7, 700, len(keys) / 2, len(keys) - 1, len(keys), len(keys) + 1} {
				for _, steps := range []int{1, 2, 3} {
					j := job{id: "acme/export/steps", tenant: "acme", dataset: "customers", columns: []string{"id"}, partRows: pr}
					whole, err := h.plan(j.planInput(h))
					if err != nil {
						t.Fatal(err)
					}
					head, rest, err := planInSteps(t, h, j, steps)
					if err != nil {
						t.Fatalf("part_rows %d steps %d: %v", pr, steps, err)
					}
					got, rows := head.Ranges, head.Rows
					if head.More {
						if head.Rows != steps*pr {
							t.Fatalf("part_rows %d steps %d: head rows %d", pr, steps, head.Rows)
						}
						got, rows = append(append([]contract.KeyRange{}, head.Ranges...), rest.Ranges...), rest.Rows
						if rest.More {
							t.Fatalf("part_rows %d steps %d: the continuation says More", pr, steps)
						}
					}
					if wantMore := len(keys) >= steps*pr; head.More != wantMore {
						t.Fatalf("part_rows %d steps %d: More %v for %d keys", pr, steps, head.More, len(keys))
					}
					if rows != whole.Rows || !reflect.DeepEqual(got, whole.Ranges) {
						t.Fatalf("part_rows %d steps %d: %d rows %d ranges; whole plan %d rows %d ranges", pr, steps, rows, len(got), whole.Rows, len(whole.Ranges))
					}
				}
			}

			// max_rows 1,400 is two parts of 700: a head of one part passes, the continuation
			// counts it and refuses the tenant.
			small := be.datasets["customers"]
			small.MaxRows = 1400
			hs := newHarness(t, contract.Datasets{"customers": small})
			j := job{id: "acme/export/big", tenant: "acme", dataset: "customers", columns: []string{"id"}, partRows: 700}
			head, _, err := planInSteps(t, hs, j, 1)
			if !head.More || appErrType(err) != contract.ErrTypeDatasetTooLarge {
				t.Fatalf("over max_rows in steps: head %+v, %v", head, err)
			}

			// A continuation without its key, or a key without the parts before it: refused.
			for _, in := range []contract.PlanExportInput{
				func() contract.PlanExportInput { in := j.planInput(h); in.PartsBefore = 1; return in }(),
				func() contract.PlanExportInput { in := j.planInput(h); in.After = &keys[0]; return in }(),
				func() contract.PlanExportInput { in := j.planInput(h); in.PartsBefore = -1; return in }(),
			} {
				if _, err := h.plan(in); appErrType(err) != contract.ErrTypeExportInvalid {
					t.Fatalf("plan %+v: %v", in, err)
				}
			}
		})
	}
}
