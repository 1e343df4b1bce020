package workflows

import (
	"errors"
	"fmt"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// The export's part loops share partTally: exportParts here (the whole plan known), and
// exportPartsPlanning (export_overlap.go, the rest still being planned).

// exportParts runs one activity per key range with bounded concurrency. changed reports that a
// part found the dataset's config changed (nothing was read under the stale approval).
func (r *exportRun) exportParts(ctx workflow.Context, jobID, digest string, ranges []contract.KeyRange) ([]contract.PartResult, bool, error) {
	t := r.newPartTally(ctx, len(ranges))
	next := 0
	more := func() bool { return next < len(ranges) && ctx.Err() == nil && t.open() }
	start := func() (workflow.Future, func(workflow.Future)) {
		i := next
		next++
		f := r.startPart(ctx, jobID, digest, fmt.Sprintf("part %d of %d", i+1, len(ranges)), i, ranges[i])
		return f, func(f workflow.Future) { t.take(ctx, r, i, f) }
	}
	fanOut(ctx, r.in.Concurrency, more, start, func() { r.progressEvery(ctx, t) })
	return t.end(ctx)
}

// partTally is what the part loops (exportParts, exportPartsPlanning) know of their parts: each
// one's result, whether one found the scope changed, the first error, and when progress was
// last written.
type partTally struct {
	results      []contract.PartResult
	changed      bool
	err          error
	lastProgress time.Time
}

// newPartTally writes the "exporting" progress and starts the tally of n parts.
func (r *exportRun) newPartTally(ctx workflow.Context, n int) *partTally {
	r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "exporting")})
	return &partTally{results: make([]contract.PartResult, n), lastProgress: workflow.Now(ctx)}
}

// open: no part found the scope changed and nothing failed, so more parts may start.
func (t *partTally) open() bool { return !t.changed && t.err == nil }

// fail keeps the first error.
func (t *partTally) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// take records part i's outcome from its future.
func (t *partTally) take(ctx workflow.Context, r *exportRun, i int, f workflow.Future) {
	var res contract.PartResult
	err := f.Get(ctx, &res)
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		t.results[i] = res
		r.rows += res.Rows
	case errors.As(err, &appErr) && appErr.Type() == contract.ErrTypeScopeChanged:
		t.changed = true
	default:
		t.fail(err)
	}
}

// end is the loop's answer: the results and whether the scope changed, or the first error.
func (t *partTally) end(ctx workflow.Context) ([]contract.PartResult, bool, error) {
	if ctx.Err() != nil {
		return nil, false, ctx.Err()
	}
	if t.err != nil {
		return nil, false, t.err
	}
	return t.results, t.changed, nil
}

// startPart schedules the export of part i+1 (range rng) with the activity summary given.
func (r *exportRun) startPart(ctx workflow.Context, jobID, digest, summary string, i int, rng contract.KeyRange) workflow.Future {
	in := r.in
	actx := r.activityOptions(ctx, summary, exportPartStartToCloseDefault, in.PartHeartbeatTimeout.D())
	return workflow.ExecuteActivity(actx, contract.ExportPartActivityName, contract.ExportPartInput{JobID: jobID, FirstRunID: r.firstRun,
		Tenant: in.Tenant, Dataset: in.Args.Dataset, Columns: in.Args.Columns, Format: in.Args.Format, ConfigDigest: digest,
		Part: i + 1, Range: rng, PageRows: in.PageRows})
}

// progressEvery writes the "exporting" progress when ProgressEveryDefault has passed since the last.
func (r *exportRun) progressEvery(ctx workflow.Context, t *partTally) {
	if now := workflow.Now(ctx); now.Sub(t.lastProgress) >= ProgressEveryDefault {
		t.lastProgress = now
		r.upsertMemo(ctx, map[string]any{MemoProgress: r.progress(ctx, "exporting")})
	}
}
