package activities

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"unicode/utf8"

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

// Episode statuses (list_episodes' status filter).
const (
	// EpisodePassed: the episode returned a score at or above the suite's pass threshold.
	EpisodePassed = "passed"
	// EpisodeFailed: the episode returned a score below the threshold, or the suite said it
	// failed (ErrTypeEpisodeFailed, a final verdict).
	EpisodeFailed = "failed"
	// EpisodeErrored: the episode ended without a verdict: a timeout, a crash, a rejection by
	// the receiver or retries exhausted.
	EpisodeErrored = "errored"
)

// ErrTypeEpisodeLogInvalid is WriteEpisodes' error for an input it can never act on (a field
// missing): final, the workflow goes on without the log.
const ErrTypeEpisodeLogInvalid = "EpisodeLogInvalid"

// EpisodeErrorMax bounds an outcome's error message in bytes (UTF-8 kept whole).
const EpisodeErrorMax = 512

// ParseEpisodeStatus checks a status filter value: one of passed, failed, errored. It returns
// the package's own constant, so nothing the caller typed is kept.
func ParseEpisodeStatus(s string) (string, error) {
	switch s {
	case EpisodePassed:
		return EpisodePassed, nil
	case EpisodeFailed:
		return EpisodeFailed, nil
	case EpisodeErrored:
		return EpisodeErrored, nil
	}
	return "", errors.New("must be passed, failed or errored")
}

// EpisodeOutcome is one finished episode: one line of an episode log. Its field order is its
// encoding's (encoding/json), so equal outcomes encode to equal bytes.
type EpisodeOutcome struct {
	Index       int    `json:"index" jsonschema:"the episode's index in the run, 0-based"`
	OperationID string `json:"operation_id" jsonschema:"the episode's operation ID (its idempotency key at commands and receivers)"`
	Status      string `json:"status" jsonschema:"passed, failed or errored"`
	// Score is absent when the episode returned none (failed by the suite, or errored).
	Score *float64 `json:"score,omitempty" jsonschema:"the score the episode returned; absent when it returned none"`
	// Attempts counts the attempts the outcome took, retries included.
	Attempts int `json:"attempts" jsonschema:"attempts the episode took, retries included"`
	// DurationMS runs from the episode's scheduling to its outcome (retries and backoff
	// included), as the workflow saw it.
	DurationMS int64  `json:"duration_ms" jsonschema:"milliseconds from scheduling to the outcome, retries included"`
	Error      string `json:"error,omitempty" jsonschema:"why it failed or errored (at most 512 bytes); absent when it passed or scored"`
}

// BoundEpisodeError trims msg to EpisodeErrorMax bytes without splitting a UTF-8 sequence.
func BoundEpisodeError(msg string) string {
	msg = strings.ToValidUTF8(msg, "�")
	if len(msg) <= EpisodeErrorMax {
		return msg
	}
	cut := EpisodeErrorMax - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// EpisodeSegment is what history keeps of one written segment (or of the whole log): its
// number, how many outcomes it holds and the SHA-256 of its bytes.
type EpisodeSegment struct {
	Segment int    `json:"segment"`
	Count   int    `json:"count"`
	SHA256  string `json:"sha256"`
}

// EncodeEpisodes is the JSON Lines encoding of outcomes: deterministic, one line each.
func EncodeEpisodes(outcomes []EpisodeOutcome) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range outcomes {
		if err := enc.Encode(&outcomes[i]); err != nil {
			return nil, fmt.Errorf("episode %d: %w", outcomes[i].Index, err)
		}
	}
	return buf.Bytes(), nil
}

// DecodeEpisodes reads a JSON Lines episode log.
func DecodeEpisodes(b []byte) ([]EpisodeOutcome, error) {
	var out []EpisodeOutcome
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		var o EpisodeOutcome
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			return nil, fmt.Errorf("episode log line %d: %w", len(out)+1, err)
		}
		out = append(out, o)
	}
	return out, sc.Err()
}

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

// WriteEpisodesInput names one segment of an eval's episode log: which run's outcomes to
// write and how many there are, never the outcomes themselves (history keeps references and
// digests, CONTRACT.md; a segment of 1,000 outcomes is ~700 KB). The activity reads them from
// the run (Activities.SegmentEpisodes).
type WriteEpisodesInput struct {
	JobID string `json:"job_id"`
	// RunID is the run whose segment this is: the run that scheduled the write, and waits for it.
	RunID      string `json:"run_id"`
	FirstRunID string `json:"first_run_id"`
	// Segment is the run number (1 for the job's first run).
	Segment int `json:"segment"`
	// Count is how many outcomes the run holds for the segment; the outcomes read back must be
	// exactly that many.
	Count int `json:"count"`
	// Final: the job ends after this segment; the whole log is written too, from Prior and
	// this segment.
	Final bool `json:"final,omitempty"`
	// Prior are the segments written before this one, in order (checked against their digests
	// when the whole log is assembled).
	Prior []EpisodeSegment `json:"prior,omitempty"`
}

// SegmentEpisodesFunc reads the outcomes a running eval run holds in memory for its current
// segment, in the order they finished, and that segment's number: cmd/app answers it with the
// run's jobgate.episodes query through the worker's Temporal client. The run is blocked on
// WriteEpisodes while it is asked (every episode of the segment has ended), so every attempt
// reads the same outcomes, and a worker that has to replay the run rebuilds the same ones.
type SegmentEpisodesFunc func(ctx context.Context, jobID, runID string) (segment int, outcomes []EpisodeOutcome, err error)

// WriteEpisodesResult says what was written.
type WriteEpisodesResult struct {
	// Stored is false when this worker has no artifact store (nothing was written).
	Stored bool `json:"stored"`
	// Segment is this segment's reference (Count 0: no object was written for it).
	Segment EpisodeSegment `json:"segment"`
	// Log is the whole log's reference, when Final.
	Log *EpisodeSegment `json:"log,omitempty"`
}

// WriteEpisodes writes one segment of an eval's episode log (and with Final the whole log).
// It reads the segment's outcomes from the run (SegmentEpisodes), checks they are the segment
// and the count history named, and encodes them deterministically, so a retried write puts the
// same bytes under the same key; a blob write is atomic (visible only once complete), so a
// reader never meets half a segment. Without an artifact store it writes (and reads) nothing,
// as before; with one but no SegmentEpisodes it fails (retryably, so a correctly wired worker
// can take the write over): a misconfigured worker must not leave a hole in the log.
func (a *Activities) WriteEpisodes(ctx context.Context, in WriteEpisodesInput) (WriteEpisodesResult, error) {
	if in.JobID == "" || in.RunID == "" || in.FirstRunID == "" || in.Segment < 1 || in.Count < 0 {
		return WriteEpisodesResult{}, temporal.NewNonRetryableApplicationError(
			"write episodes: job_id, run_id, first_run_id, segment (>= 1) and count (>= 0) are required", ErrTypeEpisodeLogInvalid, nil)
	}
	res := WriteEpisodesResult{Segment: EpisodeSegment{Segment: in.Segment, Count: in.Count}}
	if a.Artifacts == nil {
		return res, nil
	}
	episodes, err := a.segmentEpisodes(ctx, in)
	if err != nil {
		return WriteEpisodesResult{}, err
	}
	res.Stored = true
	b, err := EncodeEpisodes(episodes)
	if err != nil {
		return WriteEpisodesResult{}, err
	}
	res.Segment.SHA256 = sha256Hex(b)
	if len(episodes) > 0 {
		if err := a.Artifacts.b.WriteAll(ctx, episodeSegmentKey(in.JobID, in.FirstRunID, in.Segment), b,
			&blob.WriterOptions{ContentType: "application/jsonl"}); err != nil {
			return WriteEpisodesResult{}, fmt.Errorf("write episode segment %d: %w", in.Segment, err)
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
			return WriteEpisodesResult{}, err
		}
		if got := sha256Hex(sb); got != s.SHA256 {
			return WriteEpisodesResult{}, fmt.Errorf("episode segment %d: digest %s, history recorded %s", s.Segment, got, s.SHA256)
		}
		all.Write(sb)
		count += s.Count
	}
	all.Write(b)
	count += len(episodes)
	res.Log = &EpisodeSegment{Segment: in.Segment, Count: count, SHA256: sha256Hex(all.Bytes())}
	if err := a.Artifacts.b.WriteAll(ctx, episodeLogKey(in.JobID, in.FirstRunID), all.Bytes(),
		&blob.WriterOptions{ContentType: "application/jsonl"}); err != nil {
		return WriteEpisodesResult{}, fmt.Errorf("write episode log: %w", err)
	}
	return res, nil
}

// segmentEpisodes reads in's outcomes from the run: none to read when the count is 0 (a final
// write after an empty last run); else exactly Count of them, of in's segment.
func (a *Activities) segmentEpisodes(ctx context.Context, in WriteEpisodesInput) ([]EpisodeOutcome, error) {
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
func (s *ArtifactStore) OpenEpisodeLog(ctx context.Context, jobID, firstRunID string) (*blob.Reader, error) {
	r, err := s.b.NewReader(ctx, episodeLogKey(jobID, firstRunID), nil)
	if err != nil {
		return nil, gone(err)
	}
	return r, nil
}
