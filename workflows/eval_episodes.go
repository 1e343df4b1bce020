package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
)

// An eval's per-episode results (its episode log, activities/episodes.go). The run keeps the
// outcomes of its own segment in memory (QueryEpisodes reads them while it runs) and has the
// WriteEpisodes activity write them to the artifact store before it continues as new and when
// the job ends. The activity's input names the run and the count only; it reads the outcomes
// through QueryEpisodes itself. So what history holds of the log, in the activity's input, its
// result, across runs and in the job's result, is only the segments' references: number,
// count, digest.

const (
	// QueryEpisodes reads a running eval's episode log position: the written segments and the
	// current segment's finished episodes. Part of the API between frontend and workflow, and
	// how WriteEpisodes reads the segment it writes (cmd/app wires it); never rename it. A query issues no command, so histories replay with or without it.
	QueryEpisodes = "jobgate.episodes"

	// changeEvalEpisodes is the workflow.GetVersion change ID of an eval writing its episode log
	// (the WriteEpisodes activity). Histories from before it replay without the writes.
	changeEvalEpisodes = "eval-episode-log"

	// writeEpisodesTimeout bounds one WriteEpisodes attempt: a segment is at most a few hundred
	// kilobytes, and the final one copies the job's segments into one object.
	writeEpisodesTimeout = 2 * time.Minute
)

// EpisodesQuery asks QueryEpisodes for the current segment's outcomes: from From on when
// Segment is the current segment (a listing resuming inside it), else all of them.
type EpisodesQuery struct {
	Segment int `json:"segment,omitempty"`
	From    int `json:"from,omitempty"`
}

// EpisodesQueryResult is QueryEpisodes' answer.
type EpisodesQueryResult struct {
	// Segment is the current run's segment number (the run number).
	Segment int `json:"segment"`
	// Written are the segments written so far, in order (Count 0: nothing was written).
	Written []contract.EpisodeSegment `json:"written,omitempty"`
	// Episodes are the current segment's finished episodes from offset From on, in the order
	// they finished: the order the segment's object will have.
	Episodes []contract.EpisodeOutcome `json:"episodes,omitempty"`
	From     int                       `json:"from,omitempty"`
}

// registerEpisodesQuery serves QueryEpisodes from the run's memory.
func (r *evalRun) registerEpisodesQuery(ctx workflow.Context) error {
	return workflow.SetQueryHandler(ctx, QueryEpisodes, func(q EpisodesQuery) (EpisodesQueryResult, error) {
		res := EpisodesQueryResult{Segment: r.st.Runs, Written: r.st.Episodes}
		if q.Segment == r.st.Runs && q.From > 0 {
			res.From = min(q.From, len(r.seg))
		}
		res.Episodes = r.seg[res.From:]
		return res, nil
	})
}

// episodeFinalErrTypes are the episode errors the retry policy never retries: what retrying the
// same input cannot change.
func episodeFinalErrTypes() []string {
	return []string{contract.ErrTypeEpisodeFailed, contract.ErrTypeSuiteMissing, contract.ErrTypeEpisodeRejected}
}

// recordEpisode keeps episode i's outcome in the current segment. res is nil when err is not.
// WriteEpisodes reads these outcomes from the run, possibly from a worker that rebuilt them by
// replay, so change how one is derived from history behind workflow.GetVersion like a command:
// a retried write of a running job must read the outcomes its first attempt read. (Should they
// differ, history still names the digest of the bytes the completing attempt left in the store.)
func (r *evalRun) recordEpisode(ctx workflow.Context, i int, opID string, scheduled time.Time, res *contract.EpisodeResult, err error) {
	o := contract.EpisodeOutcome{Index: i, OperationID: opID, Attempts: 1,
		DurationMS: workflow.Now(ctx).Sub(scheduled).Milliseconds()}
	if res != nil {
		score := res.Score
		o.Score, o.Attempts, o.Status = &score, max(1, res.Attempt), contract.EpisodeFailed
		if res.Passed {
			o.Status = contract.EpisodePassed
		}
		// No GetVersion needed: a result recorded before costs carries none, so its outcome
		// is derived exactly as before.
		if res.Cost != nil {
			c := *res.Cost
			o.Cost = &c
		}
		r.seg = append(r.seg, o)
		return
	}
	o.Status = contract.EpisodeErrored
	var (
		ae  *temporal.ApplicationError
		te  *temporal.TimeoutError
		act *temporal.ActivityError
	)
	switch {
	case errors.As(err, &ae):
		if ae.Type() == contract.ErrTypeEpisodeFailed {
			o.Status = contract.EpisodeFailed
		}
		var d contract.EpisodeErrorDetails
		if ae.HasDetails() && ae.Details(&d) == nil && d.Attempt > 0 {
			o.Attempts = d.Attempt
		}
		o.Error = ae.Message()
	case errors.As(err, &te):
		o.Error = fmt.Sprintf("timed out (%s)", te.TimeoutType())
	default:
		// Not ActivityError's own text: it names the worker's identity (host and process).
		o.Error = err.Error()
		if errors.As(err, &act) && act.Unwrap() != nil {
			o.Error = act.Unwrap().Error()
		}
	}
	// An error the retry policy retries reached the workflow only once the attempts ran out.
	final := ae != nil && (ae.NonRetryable() || slices.Contains(episodeFinalErrTypes(), ae.Type()))
	if !final && !(errors.As(err, &act) && act.RetryState() == enumspb.RETRY_STATE_NON_RETRYABLE_FAILURE) {
		o.Attempts = max(o.Attempts, r.in.Episode.MaxAttempts)
	}
	o.Error = contract.BoundEpisodeError(o.Error)
	r.seg = append(r.seg, o)
}

// writeEpisodes writes the current segment (and with final, the whole log) through the
// WriteEpisodes activity, then keeps only its reference. It runs on a disconnected context so a
// cancelled job still records what its episodes did, and retries until it succeeds: a segment
// once given up would leave a hole in every later listing.
func (r *evalRun) writeEpisodes(ctx workflow.Context, final bool) {
	if len(r.seg) == 0 && (!final || len(r.st.Episodes) == 0) {
		return // nothing finished: no segment, and no log to assemble (a job cancelled early)
	}
	if workflow.GetVersion(ctx, changeEvalEpisodes, workflow.DefaultVersion, 1) < 1 {
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	dctx = workflow.WithActivityOptions(dctx, workflow.ActivityOptions{
		StartToCloseTimeout: writeEpisodesTimeout,
		Summary:             fmt.Sprintf("episode log, segment %d", r.st.Runs),
		RetryPolicy:         retryPolicy(0),
	})
	// Only the count: the activity reads the outcomes from this run's query while the run waits
	// for it, so they never enter history (r.seg cannot change meanwhile: every episode of the
	// run has ended).
	ex := workflow.GetInfo(ctx).WorkflowExecution
	in := contract.WriteEpisodesInput{JobID: ex.ID, RunID: ex.RunID, FirstRunID: FirstRunID(ctx),
		Segment: r.st.Runs, Count: len(r.seg), Final: final, Prior: r.st.Episodes}
	var res contract.WriteEpisodesResult
	if err := workflow.ExecuteActivity(dctx, contract.WriteEpisodesActivityName, in).Get(dctx, &res); err != nil {
		// Only a non-retryable error gets here (bad input): the job goes on without its log.
		workflow.GetLogger(ctx).Error("episode log not written", "segment", r.st.Runs, "error", err)
		return
	}
	if !res.Stored {
		return
	}
	// In the same workflow task as the activity's completion: a query sees the segment either
	// in memory or written, never both and never neither.
	r.st.Episodes = append(r.st.Episodes, res.Segment)
	r.seg = nil
	r.log = res.Log
}
