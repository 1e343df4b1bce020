package contract

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

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
	// Cost is what the episode reported it cost (the suite's cost_unit); last, and absent when
	// none was reported, so the lines of logs written before costs keep their bytes.
	Cost *float64 `json:"cost,omitempty" jsonschema:"what the episode reported it cost, in the suite's cost_unit; absent when it reported none"`
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

// WriteEpisodesResult says what was written.
type WriteEpisodesResult struct {
	// Stored is false when this worker has no artifact store (nothing was written).
	Stored bool `json:"stored"`
	// Segment is this segment's reference (Count 0: no object was written for it).
	Segment EpisodeSegment `json:"segment"`
	// Log is the whole log's reference, when Final.
	Log *EpisodeSegment `json:"log,omitempty"`
}
