package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
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
	"Budget":         "eval_budget.json",
	"Precision1":     "eval_precision_run1.json",
	"Precision2":     "eval_precision_run2.json",
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
	"Budget":         "acme/eval/replay-budget",
	"Precision1":     "acme/eval/replay-precision",
	"Precision2":     "acme/eval/replay-precision",
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
// run writes its segment once, before it continues as new or ends, naming only its run and
// count (the outcomes never enter history: WriteEpisodes read them with the run's query); what
// history carries on is the segment's reference, and the result holds the whole log's. The log
// genhistory read back from the store has that count and digest, and its lines are the
// episodes each run scheduled, segment by segment.
func TestEval_RecordedEpisodeLog(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	var (
		carried []contract.EpisodeSegment
		written contract.EpisodeSegment // the last write's segment reference
		log     *contract.EpisodeSegment
		ran     [][]int // per run, the indices of the episodes it scheduled
	)
	for run, file := range []string{"eval_episodes_run1.json", "eval_episodes_run2.json"} {
		writes, names := 0, map[int64]string{}
		ran = append(ran, nil)
		hist := loadHistory(t, file)
		runID := hist.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetOriginalExecutionRunId()
		for _, ev := range hist.GetEvents() {
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				a := ev.GetActivityTaskScheduledEventAttributes()
				names[ev.GetEventId()] = a.GetActivityType().GetName()
				if a.GetActivityType().GetName() == "RunEpisode" {
					var in contract.EpisodeInput
					require.NoError(t, dc.FromPayloads(a.GetInput(), &in))
					ran[run] = append(ran[run], in.Index)
					continue
				}
				writes++
				payload := a.GetInput().GetPayloads()[0].GetData()
				assert.NotContains(t, string(payload), "operation_id", "an outcome in WriteEpisodes' input")
				assert.Less(t, len(payload), 512, "WriteEpisodes' input is a reference, not the segment")
				var in contract.WriteEpisodesInput
				require.NoError(t, dc.FromPayloads(a.GetInput(), &in))
				assert.Equal(t, runID, in.RunID)
				assert.Equal(t, run+1, in.Segment)
				assert.Equal(t, run == 1, in.Final)
				assert.Equal(t, carried, in.Prior)
				assert.Equal(t, []int{3, 2}[run], in.Count)
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
				a := ev.GetActivityTaskCompletedEventAttributes()
				if names[a.GetScheduledEventId()] != "WriteEpisodes" {
					continue
				}
				var res contract.WriteEpisodesResult
				require.NoError(t, dc.FromPayloads(a.GetResult(), &res))
				require.True(t, res.Stored)
				assert.Equal(t, []int{3, 2}[run], res.Segment.Count)
				written = res.Segment
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
				var next EvalInput
				require.NoError(t, dc.FromPayloads(ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetInput(), &next))
				require.Equal(t, []contract.EpisodeSegment{written}, next.State.Episodes)
				carried = next.State.Episodes
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
				var res EvalResult
				require.NoError(t, dc.FromPayloads(ev.GetWorkflowExecutionCompletedEventAttributes().GetResult(), &res))
				require.NotNil(t, res.EpisodeLog)
				assert.Equal(t, 5, res.EpisodeLog.Count)
				log = res.EpisodeLog
			}
		}
		assert.Equal(t, 1, writes, "%s: one segment write", file)
	}
	require.NotNil(t, log)

	b, err := os.ReadFile(filepath.Join("testdata", "eval_episodes_log.jsonl"))
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	assert.Equal(t, log.SHA256, hex.EncodeToString(sum[:]), "the stored log is the one history names")
	lines := strings.SplitAfter(string(b), "\n")
	seg1 := strings.Join(lines[:3], "")
	sum = sha256.Sum256([]byte(seg1))
	assert.Equal(t, carried[0].SHA256, hex.EncodeToString(sum[:]), "its first 3 lines are segment 1")
	got, err := contract.DecodeEpisodes(b)
	require.NoError(t, err)
	require.Len(t, got, 5)
	for seg, idx := range [][]contract.EpisodeOutcome{got[:3], got[3:]} {
		var indices []int
		for _, o := range idx {
			indices = append(indices, o.Index)
		}
		assert.ElementsMatch(t, ran[seg], indices, "segment %d holds the episodes run %d ran", seg+1, seg+1)
	}
}
