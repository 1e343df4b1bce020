package workflows

import (
	"cmp"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
)

// An eval's episode log is kept like an export's artifact: for a time its suite sets
// (episode_retention, default 30 days), then deleted by a child workflow the job leaves behind,
// abandoned so it outlives the job, named after the job instance so a reused job ID never meets
// it. What is deleted is the log in the artifact store (list_episodes, episodes_url and the job
// page read it); the job's history keeps the summary and the log's count and digest.

// EpisodeRetentionWorkflowName is the retention child's workflow type; part of history.
const EpisodeRetentionWorkflowName = "jobgate.EvalEpisodeRetention"

// changeEvalEpisodeRetention gates the retention child: runs recorded before it end without one.
const changeEvalEpisodeRetention = "eval-episode-retention"

// EpisodeRetentionInput names the log to delete and when.
type EpisodeRetentionInput struct {
	JobID      string    `json:"job_id"`
	FirstRunID string    `json:"first_run_id"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// keepEpisodesUntil starts the retention child of the job's episode log once the whole log is
// written (r.log): at the job's end, whatever the end. It returns when the log will be deleted;
// nil without a log (nothing to keep) and in runs recorded before the retention existed.
func (r *evalRun) keepEpisodesUntil(ctx workflow.Context) *time.Time {
	if r.log == nil || workflow.GetVersion(ctx, changeEvalEpisodeRetention, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	ex, firstRun := workflow.GetInfo(ctx).WorkflowExecution, FirstRunID(ctx)
	// Disconnected: a cancelled job keeps its log for the retention too.
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	expires := workflow.Now(ctx).Add(cmp.Or(r.in.Episode.Retention.D(), contract.EpisodeRetentionDefault)).UTC()
	child := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            ex.ID + "/episodes-retention/" + firstRun,
		ParentClosePolicy:     enums.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:         "deletes the episode log of " + ex.ID + " at " + expires.Format(time.RFC3339),
		Priority:              r.in.Fairness.Priority(),
	}), EpisodeRetentionWorkflowName, EpisodeRetentionInput{JobID: ex.ID, FirstRunID: firstRun, ExpiresAt: expires})
	if err := child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("episode log retention not started; the log stays until deleted by hand", "error", err)
		return nil
	}
	return &expires
}

// EpisodeRetention deletes an eval's episode log once it expires.
func EpisodeRetention(ctx workflow.Context, in EpisodeRetentionInput) error {
	return deleteOnExpiry(ctx, in.ExpiresAt, contract.DeleteEpisodesActivityName,
		contract.DeleteEpisodesInput{JobID: in.JobID, FirstRunID: in.FirstRunID})
}
