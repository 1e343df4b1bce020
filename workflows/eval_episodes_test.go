package workflows

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
)

// episodeLogHarness gives acts the worker's way to read a run's segment: cmd/app sends the
// run's own QueryEpisodes; the test environment has no client to send one with, so the
// activity asks the environment the same query. It returns the WriteEpisodes inputs started.
func episodeLogHarness(h *harness, acts *activities.Activities) *[]contract.WriteEpisodesInput {
	var writes []contract.WriteEpisodesInput
	h.onStarted = func(typ string, args converter.EncodedValues) {
		if typ == "WriteEpisodes" {
			var in contract.WriteEpisodesInput
			require.NoError(h.t, args.Get(&in))
			writes = append(writes, in)
		}
	}
	acts.SegmentEpisodes = func(_ context.Context, jobID, runID string) (int, []contract.EpisodeOutcome, error) {
		if jobID != testJobID || runID != testRunID {
			return 0, nil, errors.New("asked another run")
		}
		v, err := h.env.QueryWorkflow(QueryEpisodes, EpisodesQuery{})
		if err != nil {
			return 0, nil, err
		}
		var q EpisodesQueryResult
		err = v.Get(&q)
		return q.Segment, q.Episodes, err
	}
	return &writes
}

// A run that continues as new writes its segment first, read from the run itself: the next
// run's input carries the reference (count and the digest of exactly the stored bytes), and the
// stored segment holds the episodes the run finished.
func TestEval_EpisodeLogContinueAsNew(t *testing.T) {
	store, err := activities.OpenArtifactStore(context.Background(), "mem://")
	require.NoError(t, err)
	defer store.Close()
	acts := &activities.Activities{Suites: contract.DefaultCatalog(), Artifacts: store}
	h := &harness{jobHarness: newJobHarness(t, KindEval, testJobID, testWorkflows, acts, nil)}
	writes := episodeLogHarness(h, acts)
	in := evalInput(5, 2)
	in.EpisodesPerRun = 3
	h.execute(in)
	require.True(t, h.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, h.env.GetWorkflowError(), &can)
	var next EvalInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	assert.Equal(t, []contract.WriteEpisodesInput{{JobID: testJobID, RunID: testRunID, FirstRunID: testRunID,
		Segment: 1, Count: 3}}, *writes)

	b, err := store.ReadEpisodeSegment(context.Background(), testJobID, testRunID, 1)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	require.Equal(t, []contract.EpisodeSegment{{Segment: 1, Count: 3, SHA256: hex.EncodeToString(sum[:])}}, next.State.Episodes)
	got, err := contract.DecodeEpisodes(b)
	require.NoError(t, err)
	var indices []int
	for _, o := range got {
		indices = append(indices, o.Index)
		_, score := contract.DemoOutcome(o.OperationID, 0)
		want := contract.EpisodePassed
		if score < contract.PassThresholdDefault {
			want = contract.EpisodeFailed
		}
		assert.Equal(t, OperationID(testJobID, testRunID, o.Index), o.OperationID)
		assert.Equal(t, want, o.Status, "episode %d", o.Index)
		require.NotNil(t, o.Score)
		assert.Equal(t, score, *o.Score)
	}
	assert.ElementsMatch(t, []int{0, 1, 2}, indices)
}

// Each episode's outcome reaches the episode log as it ended: a score at or above the
// threshold passed, below it failed, the suite's EpisodeFailed failed (no score), anything
// else errored with its message; attempts count retries. The query shows the written segment
// and nothing twice.
func TestEval_EpisodeLog(t *testing.T) {
	store, err := activities.OpenArtifactStore(context.Background(), "mem://")
	require.NoError(t, err)
	defer store.Close()
	acts := &activities.Activities{Suites: contract.DefaultCatalog(), Artifacts: store}
	h := &harness{jobHarness: newJobHarness(t, KindEval, testJobID, testWorkflows, acts, nil)}
	writes := episodeLogHarness(h, acts)
	var tries sync.Map // index -> *atomic.Int32
	h.env.OnActivity(acts.RunEpisode, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in contract.EpisodeInput) (contract.EpisodeResult, error) {
			v, _ := tries.LoadOrStore(in.Index, new(atomic.Int32))
			n := v.(*atomic.Int32).Add(1)
			attempt := int(activity.GetInfo(ctx).Attempt)
			switch in.Index {
			case 0: // fails once, then passes
				if n == 1 {
					return contract.EpisodeResult{}, errors.New("worker hiccup")
				}
				return contract.EpisodeResult{Score: 0.9, Passed: true, Attempt: attempt}, nil
			case 1: // broken on every attempt
				return contract.EpisodeResult{}, errors.New("always broken")
			case 2: // the suite's verdict
				return contract.EpisodeResult{}, temporal.NewNonRetryableApplicationError("judge said no",
					contract.ErrTypeEpisodeFailed, nil, contract.EpisodeErrorDetails{Attempt: attempt})
			}
			return contract.EpisodeResult{Score: 0.25, Attempt: attempt}, nil
		})
	// The retention child (abandoned, so it runs on in this environment, its 30-day timer
	// skipped): its delete is recorded here, leaving the log to read below.
	var deletes []contract.DeleteEpisodesInput
	h.env.OnActivity(acts.DeleteEpisodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in contract.DeleteEpisodesInput) error {
		deletes = append(deletes, in)
		return nil
	})
	h.execute(evalInput(4, 1))
	res := h.result()
	assert.Equal(t, []contract.DeleteEpisodesInput{{JobID: testJobID, FirstRunID: testRunID}}, deletes, "the log's retention child deletes it once expired")
	assert.Equal(t, []contract.WriteEpisodesInput{{JobID: testJobID, RunID: testRunID, FirstRunID: testRunID,
		Segment: 1, Count: 4, Final: true}}, *writes, "one write, naming the run and the count, never the outcomes")
	require.NotNil(t, res.EpisodeLog)
	assert.Equal(t, 4, res.EpisodeLog.Count)

	rd, err := store.OpenEpisodeLog(context.Background(), testJobID, testRunID)
	require.NoError(t, err)
	defer rd.Close()
	b := make([]byte, 64<<10)
	n, _ := rd.Read(b)
	got, err := contract.DecodeEpisodes(b[:n])
	require.NoError(t, err)
	require.Len(t, got, 4)
	byIndex := map[int]contract.EpisodeOutcome{}
	for _, o := range got {
		byIndex[o.Index] = o
		assert.Equal(t, OperationID(testJobID, testRunID, o.Index), o.OperationID)
	}
	assert.Equal(t, contract.EpisodePassed, byIndex[0].Status)
	assert.Equal(t, 2, byIndex[0].Attempts)
	assert.Equal(t, 0.9, *byIndex[0].Score)
	assert.Equal(t, contract.EpisodeErrored, byIndex[1].Status)
	assert.Equal(t, 3, byIndex[1].Attempts, "retries exhausted: MaxAttempts")
	assert.Equal(t, "always broken", byIndex[1].Error)
	assert.Nil(t, byIndex[1].Score)
	assert.Equal(t, contract.EpisodeFailed, byIndex[2].Status)
	assert.Equal(t, 1, byIndex[2].Attempts)
	assert.Equal(t, "judge said no", byIndex[2].Error)
	assert.Equal(t, contract.EpisodeFailed, byIndex[3].Status)
	assert.Equal(t, 0.25, *byIndex[3].Score)
	assert.Empty(t, byIndex[3].Error)

	v, err := h.env.QueryWorkflow(QueryEpisodes, EpisodesQuery{})
	require.NoError(t, err)
	var q EpisodesQueryResult
	require.NoError(t, v.Get(&q))
	assert.Equal(t, 1, q.Segment)
	assert.Empty(t, q.Episodes, "a written segment is not also in memory")
	require.Len(t, q.Written, 1)
	assert.Equal(t, 4, q.Written[0].Count)
}
