package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/activities"
)

// The histories in testdata were recorded by a real (embedded) Temporal server running this
// workflow; see testdata/genhistory. Replaying them catches non-deterministic changes.
var replayHistories = map[string]string{
	"Small":          "eval_small.json",
	"Approved":       "eval_approved.json",
	"Rejected":       "eval_rejected.json",
	"ApprovedV2":     "eval_approved_v2.json",
	"RejectedV2":     "eval_rejected_v2.json",
	"Cancelled":      "eval_cancelled.json",
	"ContinueAsNew1": "eval_can_run1.json",
	"ContinueAsNew2": "eval_can_run2.json",
	"Progress1":      "eval_progress_run1.json",
	"Progress2":      "eval_progress_run2.json",
	"EpisodeLog1":    "eval_episodes_run1.json",
	"EpisodeLog2":    "eval_episodes_run2.json",
}

// replayIDs are the workflow IDs the histories were recorded under (genhistory); the replayer's
// default ID would fail the tenant check every job makes at start.
var replayIDs = map[string]string{
	"Small":          "acme/eval/replay-small",
	"Approved":       "acme/eval/replay-approved",
	"Rejected":       "acme/eval/replay-rejected",
	"ApprovedV2":     "acme/eval/replay-approved",
	"RejectedV2":     "acme/eval/replay-rejected",
	"Cancelled":      "acme/eval/replay-cancelled",
	"ContinueAsNew1": "acme/eval/replay-can",
	"ContinueAsNew2": "acme/eval/replay-can",
	"Progress1":      "acme/eval/replay-progress",
	"Progress2":      "acme/eval/replay-progress",
	"EpisodeLog1":    "acme/eval/replay-episodes",
	"EpisodeLog2":    "acme/eval/replay-episodes",
}

func TestEval_Replay(t *testing.T) {
	for name, file := range replayHistories {
		t.Run(name, func(t *testing.T) {
			// Validators do not run on replay: a worker without resume keys replays the
			// recorded (unsealed) approvals all the same.
			replay(t, file, replayIDs[name], EvalWorkflowName, (&Workflows{}).Eval)
		})
	}
}

// TestEval_RecordedApprovalHistory checks semantics 3 of CONTRACT.md on a real server's history:
// the recorder sent a resume with a wrong scope_digest before the owner's approval; the validator
// rejected it, so it left no event, and no episode was scheduled before the accepted approval.
func TestEval_RecordedApprovalHistory(t *testing.T) {
	hist := loadHistory(t, "eval_approved.json")
	accepted, scheduledBefore, scheduled := 0, 0, 0
	for _, ev := range hist.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			accepted++
			var req ResumeRequest
			payloads := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetArgs()
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(payloads, &req))
			assert.Equal(t, "ann", req.Principal.Subject)
			assert.NotEqual(t, "sha256:00", req.ScopeDigest, "the rejected resume must not be in history")
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_REJECTED:
			t.Errorf("a rejected resume reached history (event %d)", ev.GetEventId())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			scheduled++
			if accepted == 0 {
				scheduledBefore++
			}
		}
	}
	assert.Equal(t, 1, accepted)
	assert.Zero(t, scheduledBefore, "episodes scheduled before the approval")
	assert.Equal(t, 6, scheduled)
}

// TestEval_RecordedEpisodeLog checks the episode log's shape on a real server's history: each
// run writes its segment once, before it continues as new or ends; what history carries on is
// the segment's reference (count and digest of exactly the bytes the outcomes encode to), and
// the result holds the whole log's.
func TestEval_RecordedEpisodeLog(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	var (
		carried []activities.EpisodeSegment
		written string // hex SHA-256 of the last write's outcomes, encoded
	)
	for run, file := range []string{"eval_episodes_run1.json", "eval_episodes_run2.json"} {
		writes := 0
		for _, ev := range loadHistory(t, file).GetEvents() {
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				a := ev.GetActivityTaskScheduledEventAttributes()
				if a.GetActivityType().GetName() != "WriteEpisodes" {
					continue
				}
				writes++
				var in activities.WriteEpisodesInput
				require.NoError(t, dc.FromPayloads(a.GetInput(), &in))
				assert.Equal(t, run+1, in.Segment)
				assert.Equal(t, run == 1, in.Final)
				assert.Equal(t, carried, in.Prior)
				assert.Len(t, in.Episodes, []int{3, 2}[run])
				b, err := activities.EncodeEpisodes(in.Episodes)
				require.NoError(t, err)
				sum := sha256.Sum256(b)
				written = hex.EncodeToString(sum[:])
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
				var next EvalInput
				require.NoError(t, dc.FromPayloads(ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetInput(), &next))
				require.Len(t, next.State.Episodes, 1)
				assert.Equal(t, 3, next.State.Episodes[0].Count)
				assert.Equal(t, written, next.State.Episodes[0].SHA256)
				carried = next.State.Episodes
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
				var res EvalResult
				require.NoError(t, dc.FromPayloads(ev.GetWorkflowExecutionCompletedEventAttributes().GetResult(), &res))
				require.NotNil(t, res.EpisodeLog)
				assert.Equal(t, 5, res.EpisodeLog.Count)
			}
		}
		assert.Equal(t, 1, writes, "%s: one segment write", file)
	}
}
