package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/jobgate/jobgate/activities/contract"
	"go.temporal.io/sdk/temporal"
	"gocloud.dev/blob"
)

// Per-episode results of an eval (its "episode log") live in the artifact store, never in the
// workflow's carried state: one JSON Lines object per continue-as-new segment, written by
// WriteEpisodes before the run continues as new and when the job ends, and at the end one
// object of all of them, the one get_eval's episodes_url serves. A line is one EpisodeOutcome,
// in the order the workflow saw the episodes finish, so a position in the log (segment,
// offset) names the same episode for as long as the job exists: listing pages stay stable
// while the job runs.

// EpisodesPrefix is the key prefix of one eval job instance's episode log, scoped like
// ExportPrefix by the job's first run ID (a reused workflow ID never meets an old log).
func EpisodesPrefix(jobID, firstRunID string) string {
	return "episodes/runs/" + url.PathEscape(firstRunID) + "/" + url.PathEscape(jobID) + "/"
}

// episodeSegmentKey is segment n's object; zero-padded so keys sort in segment order.
func episodeSegmentKey(jobID, firstRunID string, n int) string {
	return fmt.Sprintf("%sseg-%06d.jsonl", EpisodesPrefix(jobID, firstRunID), n)
}

func episodeLogKey(jobID, firstRunID string) string {
	return EpisodesPrefix(jobID, firstRunID) + "episodes.jsonl"
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// SegmentEpisodesFunc reads the outcomes a running eval run holds in memory for its current
// segment, in the order they finished, and that segment's number: cmd/app answers it with the
// run's jobgate.episodes query through the worker's Temporal client. The run is blocked on
// WriteEpisodes while it is asked (every episode of the segment has ended), so every attempt
// reads the same outcomes, and a worker that has to replay the run rebuilds the same ones.
type SegmentEpisodesFunc func(ctx context.Context, jobID, runID string) (segment int, outcomes []contract.EpisodeOutcome, err error)

// WriteEpisodes writes one segment of an eval's episode log (and with Final the whole log).
// It reads the segment's outcomes from the run (SegmentEpisodes), checks they are the segment
// and the count history named, and encodes them deterministically, so a retried write puts the
// same bytes under the same key; a blob write is atomic (visible only once complete), so a
// reader never meets half a segment. Without an artifact store it writes (and reads) nothing,
// as before; with one but no SegmentEpisodes it fails (retryably, so a correctly wired worker
// can take the write over): a misconfigured worker must not leave a hole in the log.
func (a *Activities) WriteEpisodes(ctx context.Context, in contract.WriteEpisodesInput) (contract.WriteEpisodesResult, error) {
	if in.JobID == "" || in.RunID == "" || in.FirstRunID == "" || in.Segment < 1 || in.Count < 0 {
		return contract.WriteEpisodesResult{}, temporal.NewNonRetryableApplicationError(
			"write episodes: job_id, run_id, first_run_id, segment (>= 1) and count (>= 0) are required", contract.ErrTypeEpisodeLogInvalid, nil)
	}
	res := contract.WriteEpisodesResult{Segment: contract.EpisodeSegment{Segment: in.Segment, Count: in.Count}}
	if a.Artifacts == nil {
		return res, nil
	}
	episodes, err := a.segmentEpisodes(ctx, in)
	if err != nil {
		return contract.WriteEpisodesResult{}, err
	}
	res.Stored = true
	b, err := contract.EncodeEpisodes(episodes)
	if err != nil {
		return contract.WriteEpisodesResult{}, err
	}
	res.Segment.SHA256 = sha256Hex(b)
	if len(episodes) > 0 {
		if err := a.Artifacts.b.WriteAll(ctx, episodeSegmentKey(in.JobID, in.FirstRunID, in.Segment), b,
			&blob.WriterOptions{ContentType: "application/jsonl"}); err != nil {
			return contract.WriteEpisodesResult{}, fmt.Errorf("write episode segment %d: %w", in.Segment, err)
		}
	}
	if !in.Final {
		return res, nil
	}
	var all bytes.Buffer
	count := 0
	for _, s := range in.Prior {
		if s.Count == 0 {
			continue
		}
		sb, err := a.Artifacts.ReadEpisodeSegment(ctx, in.JobID, in.FirstRunID, s.Segment)
		if err != nil {
			return contract.WriteEpisodesResult{}, err
		}
		if got := sha256Hex(sb); got != s.SHA256 {
			return contract.WriteEpisodesResult{}, fmt.Errorf("episode segment %d: digest %s, history recorded %s", s.Segment, got, s.SHA256)
		}
		all.Write(sb)
		count += s.Count
	}
	all.Write(b)
	count += len(episodes)
	res.Log = &contract.EpisodeSegment{Segment: in.Segment, Count: count, SHA256: sha256Hex(all.Bytes())}
	if err := a.Artifacts.b.WriteAll(ctx, episodeLogKey(in.JobID, in.FirstRunID), all.Bytes(),
		&blob.WriterOptions{ContentType: "application/jsonl"}); err != nil {
		return contract.WriteEpisodesResult{}, fmt.Errorf("write episode log: %w", err)
	}
	return res, nil
}

// segmentEpisodes reads in's outcomes from the run: none to read when the count is 0 (a final
// write after an empty last run); else exactly Count of them, of in's segment.
func (a *Activities) segmentEpisodes(ctx context.Context, in contract.WriteEpisodesInput) ([]contract.EpisodeOutcome, error) {
	if in.Count == 0 {
		return nil, nil
	}
	if a.SegmentEpisodes == nil {
		return nil, errors.New("write episodes: this worker has an artifact store but no SegmentEpisodes (the run's episodes query); it cannot read the segment")
	}
	seg, episodes, err := a.SegmentEpisodes(ctx, in.JobID, in.RunID)
	if err != nil {
		return nil, fmt.Errorf("write episodes: read segment %d of run %s: %w", in.Segment, in.RunID, err)
	}
	if seg != in.Segment || len(episodes) != in.Count {
		return nil, fmt.Errorf("write episodes: run %s holds %d outcomes of segment %d, history names %d of segment %d",
			in.RunID, len(episodes), seg, in.Count, in.Segment)
	}
	return episodes, nil
}

// ReadEpisodeSegment reads segment n's bytes; ErrArtifactGone when it is not in the store.
func (s *ArtifactStore) ReadEpisodeSegment(ctx context.Context, jobID, firstRunID string, n int) ([]byte, error) {
	b, err := s.b.ReadAll(ctx, episodeSegmentKey(jobID, firstRunID, n))
	if err != nil {
		return nil, gone(err)
	}
	return b, nil
}

// EpisodeSegments lists the segment numbers written for a job instance, in order.
func (s *ArtifactStore) EpisodeSegments(ctx context.Context, jobID, firstRunID string) ([]int, error) {
	prefix := EpisodesPrefix(jobID, firstRunID)
	it := s.b.List(&blob.ListOptions{Prefix: prefix + "seg-"})
	var out []int
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list episode segments: %w", err)
		}
		var n int
		if _, err := fmt.Sscanf(strings.TrimPrefix(obj.Key, prefix), "seg-%06d.jsonl", &n); err != nil || n < 1 ||
			obj.Key != episodeSegmentKey(jobID, firstRunID, n) {
			continue // a temporary file of an interrupted write, or not ours
		}
		out = append(out, n)
	}
}

// OpenEpisodeLog opens a finished job's whole episode log; the reader seeks (ranges).
// ErrArtifactGone when it is not in the store.
func (s *ArtifactStore) OpenEpisodeLog(ctx context.Context, jobID, firstRunID string) (io.ReadSeekCloser, error) {
	r, err := s.b.NewReader(ctx, episodeLogKey(jobID, firstRunID), nil)
	if err != nil {
		return nil, gone(err)
	}
	return r, nil
}
