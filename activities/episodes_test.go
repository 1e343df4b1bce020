package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jobgate/jobgate/activities/contract"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
)

func epOutcomes() []contract.EpisodeOutcome {
	s1, s2 := 0.75, 0.125
	return []contract.EpisodeOutcome{
		{Index: 3, OperationID: "acme/eval/ana/k#run1#3", Status: contract.EpisodePassed, Score: &s1, Attempts: 1, DurationMS: 12},
		{Index: 0, OperationID: "acme/eval/ana/k#run1#0", Status: contract.EpisodeFailed, Score: &s2, Attempts: 2, DurationMS: 1040},
		{Index: 1, OperationID: "acme/eval/ana/k#run1#1", Status: contract.EpisodeErrored, Attempts: 3, DurationMS: 30001,
			Error: "timed out <StartToClose> & \"quoted\" — ünïcode"},
	}
}

// epWrite runs WriteEpisodes as the worker runs it (a Temporal test activity environment).
func epWrite(t *testing.T, a *Activities, in contract.WriteEpisodesInput) contract.WriteEpisodesResult {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quietLogger)
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	v, err := env.ExecuteActivity(a.WriteEpisodes, in)
	if err != nil {
		t.Fatalf("WriteEpisodes: %v", err)
	}
	var res contract.WriteEpisodesResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// A retried segment write (the worker died after writing, or the completion was lost) puts the
// same bytes under the same key and reports the same reference, whatever the key held before;
// the final write assembles the whole log from the segments history names, checking their
// digests.
func TestWriteEpisodes_RetryIsByteIdentical(t *testing.T) {
	ctx := context.Background()
	store, err := OpenArtifactStore(ctx, "file://"+filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const job, first = "acme/eval/ana/k", "run1"
	// The runs' segments, as their queries answer: run1 holds segment 1, run3 segment 3.
	held := map[string][]contract.EpisodeOutcome{"run1": epOutcomes(), "run3": epOutcomes()[:1]}
	var asked []string
	a := &Activities{Artifacts: store, SegmentEpisodes: func(_ context.Context, jobID, runID string) (int, []contract.EpisodeOutcome, error) {
		if jobID != job {
			t.Errorf("asked job %q", jobID)
		}
		asked = append(asked, runID)
		return int(runID[len(runID)-1] - '0'), held[runID], nil
	}}
	in := contract.WriteEpisodesInput{JobID: job, RunID: "run1", FirstRunID: first, Segment: 1, Count: 3}

	r1 := epWrite(t, a, in)
	b1, err := store.ReadEpisodeSegment(ctx, job, first, 1)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b1)
	if !r1.Stored || r1.Segment != (contract.EpisodeSegment{Segment: 1, Count: 3, SHA256: hex.EncodeToString(sum[:])}) || r1.Log != nil {
		t.Fatalf("first write: %+v", r1)
	}
	if bytes.Count(b1, []byte("\n")) != 3 || !strings.Contains(string(b1), `<StartToClose> & \"quoted\"`) {
		t.Fatalf("segment bytes: %s", b1)
	}
	// Whatever an interrupted attempt left under the key, the retry replaces it byte for byte.
	if err := store.Bucket().WriteAll(ctx, episodeSegmentKey(job, first, 1), []byte("half a li"), nil); err != nil {
		t.Fatal(err)
	}
	r2 := epWrite(t, a, in)
	b2, err := store.ReadEpisodeSegment(ctx, job, first, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) || !reflect.DeepEqual(r1, r2) {
		t.Fatalf("retry differs: %+v vs %+v\n%s\n%s", r1, r2, b1, b2)
	}
	back, err := contract.DecodeEpisodes(b2)
	if err != nil || !reflect.DeepEqual(back, epOutcomes()) {
		t.Fatalf("decode: %v %+v", err, back)
	}

	// The final segment, twice (a retry), assembles the same log.
	last := contract.WriteEpisodesInput{JobID: job, RunID: "run3", FirstRunID: first, Segment: 3, Final: true,
		Count: 1, Prior: []contract.EpisodeSegment{r1.Segment, {Segment: 2}}}
	f1 := epWrite(t, a, last)
	f2 := epWrite(t, a, last)
	rd, err := store.OpenEpisodeLog(ctx, job, first)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	if _, err := all.ReadFrom(rd); err != nil {
		t.Fatal(err)
	}
	rd.Close()
	b3, _ := store.ReadEpisodeSegment(ctx, job, first, 3)
	want := append(append([]byte{}, b1...), b3...)
	wsum := sha256.Sum256(want)
	if !reflect.DeepEqual(f1, f2) || f1.Log == nil || *f1.Log != (contract.EpisodeSegment{Segment: 3, Count: 4, SHA256: hex.EncodeToString(wsum[:])}) ||
		!bytes.Equal(all.Bytes(), want) {
		t.Fatalf("final: %+v / %+v, log %q", f1, f2, all.Bytes())
	}
	if segs, err := store.EpisodeSegments(ctx, job, first); err != nil || !reflect.DeepEqual(segs, []int{1, 3}) {
		t.Fatalf("segments %v %v (segment 2 had no episodes: no object)", segs, err)
	}

	// A segment whose bytes are not those history recorded stops the final write.
	if err := store.Bucket().WriteAll(ctx, episodeSegmentKey(job, first, 1), []byte("{}\n"), nil); err != nil {
		t.Fatal(err)
	}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quietLogger)
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	if _, err := env.ExecuteActivity(a.WriteEpisodes, last); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("tampered segment: %v", err)
	}

	if !reflect.DeepEqual(asked, []string{"run1", "run1", "run3", "run3", "run3"}) {
		t.Fatalf("runs asked for their segment: %v", asked)
	}

	// Without an artifact store nothing is written (nor read), and the workflow is told so.
	asked = nil
	if r := epWrite(t, &Activities{SegmentEpisodes: a.SegmentEpisodes}, in); r.Stored || r.Segment.Count != 3 || r.Segment.SHA256 != "" || asked != nil {
		t.Fatalf("no store: %+v, asked %v", r, asked)
	}
}

// WriteEpisodes writes only what the run holds for the segment history names, exactly as many
// as history counted; a worker with a store but no way to read the run fails rather than
// writing an empty segment; an empty final segment needs no read.
func TestWriteEpisodes_ReadsTheRun(t *testing.T) {
	ctx := context.Background()
	store, err := OpenArtifactStore(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	answer := func(seg int, out []contract.EpisodeOutcome, err error) SegmentEpisodesFunc {
		return func(context.Context, string, string) (int, []contract.EpisodeOutcome, error) { return seg, out, err }
	}
	in := contract.WriteEpisodesInput{JobID: "acme/eval/ana/k", RunID: "r1", FirstRunID: "r1", Segment: 1, Count: 3}
	for _, c := range []struct {
		name  string
		read  SegmentEpisodesFunc
		in    contract.WriteEpisodesInput
		want  string
		final bool // non-retryable
	}{
		{"no reader", nil, in, "no SegmentEpisodes", false},
		{"query fails", answer(0, nil, errors.New("no poller")), in, "read segment 1 of run r1: no poller", false},
		{"fewer outcomes", answer(1, epOutcomes()[:2], nil), in, "holds 2 outcomes of segment 1, history names 3 of segment 1", false},
		{"another segment", answer(2, epOutcomes(), nil), in, "holds 3 outcomes of segment 2", false},
		{"no run ID", answer(1, epOutcomes(), nil), contract.WriteEpisodesInput{JobID: "j", FirstRunID: "f", Segment: 1, Count: 3}, "run_id", true},
		{"negative count", answer(1, epOutcomes(), nil), contract.WriteEpisodesInput{JobID: "j", RunID: "r", FirstRunID: "f", Segment: 1, Count: -1}, "count", true},
	} {
		var s testsuite.WorkflowTestSuite
		s.SetLogger(quietLogger)
		env := s.NewTestActivityEnvironment()
		a := &Activities{Artifacts: store, SegmentEpisodes: c.read}
		env.RegisterActivity(a)
		_, err := env.ExecuteActivity(a.WriteEpisodes, c.in)
		var ae *temporal.ApplicationError
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ae) || ae.NonRetryable() != c.final {
			t.Errorf("%s: %v, want %q (non-retryable %v)", c.name, err, c.want, c.final)
		}
	}
	if segs, _ := store.EpisodeSegments(ctx, in.JobID, in.FirstRunID); len(segs) != 0 {
		t.Fatalf("a refused write left segments %v", segs)
	}
	// The last run finished no episode: no read, no segment object, a log of the prior ones.
	empty := contract.WriteEpisodesInput{JobID: "acme/eval/ana/k", RunID: "r2", FirstRunID: "r1", Segment: 2, Final: true}
	if r := epWrite(t, &Activities{Artifacts: store}, empty); !r.Stored || r.Log == nil || r.Log.Count != 0 {
		t.Fatalf("empty final segment: %+v", r)
	}
}

func TestBoundEpisodeError(t *testing.T) {
	long := strings.Repeat("é", 400) // 800 bytes
	got := contract.BoundEpisodeError(long)
	if len(got) > contract.EpisodeErrorMax || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Fatalf("%d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if contract.BoundEpisodeError("short") != "short" || contract.BoundEpisodeError("a\xffb") != "a�b" {
		t.Fatal("short or invalid UTF-8 message changed wrongly")
	}
}

// FuzzDecodeEpisodes: an episode log never panics the reader, and what it reads re-encodes to
// a log that reads back the same; status filters accept exactly three words.
func FuzzDecodeEpisodes(f *testing.F) {
	b, _ := contract.EncodeEpisodes(epOutcomes())
	f.Add(string(b))
	f.Add("{}\n\n")
	f.Add(`{"index":-1,"score":null}` + "\n")
	f.Add("passed")
	f.Fuzz(func(t *testing.T, s string) {
		if st, err := contract.ParseEpisodeStatus(s); (err == nil) != (s == "passed" || s == "failed" || s == "errored") || (err == nil && st != s) {
			t.Fatalf("status %q: %q %v", s, st, err)
		}
		if m := contract.BoundEpisodeError(s); len(m) > contract.EpisodeErrorMax || !utf8.ValidString(m) {
			t.Fatalf("bounded error of %q: %q", s, m)
		}
		got, err := contract.DecodeEpisodes([]byte(s))
		if err != nil {
			return
		}
		enc, err := contract.EncodeEpisodes(got)
		if err != nil {
			t.Fatal(err)
		}
		again, err := contract.DecodeEpisodes(enc)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("round trip: %v %+v vs %+v", err, again, got)
		}
	})
}
