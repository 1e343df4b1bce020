package jobcore

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

// epSrc is a segment of n outcomes whose indexes are seg*1000+i; every third one failed.
func epSrc(seg, n int) episodeSource {
	items := make([]contract.EpisodeOutcome, n)
	for i := range items {
		st := contract.EpisodePassed
		if i%3 == 0 {
			st = contract.EpisodeFailed
		}
		items[i] = contract.EpisodeOutcome{Index: seg*1000 + i, Status: st}
	}
	return episodeSource{seg: seg, load: func(context.Context) ([]contract.EpisodeOutcome, error) { return items, nil }}
}

// epScanAll pages through srcs from the start and returns the indexes and the positions each
// page started at.
func epScanAll(t *testing.T, srcs func() []episodeSource, ef episodesFilter) ([]int, []episodePos) {
	t.Helper()
	var (
		got    []int
		starts []episodePos
		pos    episodePos
	)
	for range 1000 {
		starts = append(starts, pos)
		n := 0
		next, more, err := scanEpisodes(context.Background(), srcs(), pos, ef, func(o contract.EpisodeOutcome) {
			got = append(got, o.Index)
			n++
		})
		if err != nil || n > ef.pageSize {
			t.Fatalf("page at %+v: %d items, %v", pos, n, err)
		}
		if !more {
			return got, starts
		}
		pos = next
	}
	t.Fatal("no end")
	return nil, nil
}

// Every episode once across pages, filters exact, whatever the page size; a segment still in
// the workflow's memory and the same segment once written read the same at every position.
func TestScanEpisodes(t *testing.T) {
	srcs := func() []episodeSource { return []episodeSource{epSrc(1, 7), epSrc(3, 5), epSrc(4, 0), epSrc(5, 2)} }
	var want, wantFailed []int
	for _, s := range srcs() {
		items, _ := s.load(context.Background())
		for _, o := range items {
			want = append(want, o.Index)
			if o.Status == contract.EpisodeFailed {
				wantFailed = append(wantFailed, o.Index)
			}
		}
	}
	for _, size := range []int{1, 2, 3, 5, 14, 100} {
		got, _ := epScanAll(t, srcs, episodesFilter{pageSize: size})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("page size %d: %v, want %v", size, got, want)
		}
		failed, _ := epScanAll(t, srcs, episodesFilter{pageSize: size, status: contract.EpisodeFailed})
		if !reflect.DeepEqual(failed, wantFailed) {
			t.Errorf("page size %d, failed: %v, want %v", size, failed, wantFailed)
		}
	}

	// While segment 5 is live only 1 of its episodes has finished; a listing that reached its
	// end resumes from there after more finished and the segment was written.
	live := func() []episodeSource { return []episodeSource{epSrc(1, 7), epSrc(3, 5), epSrc(5, 1)} }
	var got []int
	next, more, err := scanEpisodes(context.Background(), live(), episodePos{}, episodesFilter{pageSize: 100},
		func(o contract.EpisodeOutcome) { got = append(got, o.Index) })
	if err != nil || more || next != (episodePos{seg: 5, off: 1}) || len(got) != 13 {
		t.Fatalf("live: next %+v more %v err %v, %d items", next, more, err, len(got))
	}
	_, _, _ = scanEpisodes(context.Background(), srcs(), next, episodesFilter{pageSize: 100},
		func(o contract.EpisodeOutcome) { got = append(got, o.Index) })
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("resumed: %v, want %v", got, want)
	}

	// The workflow answers a listing resuming inside its segment with the rest only (base).
	full, _ := epSrc(3, 5).load(context.Background())
	tail := episodeSource{seg: 3, base: 2, load: func(context.Context) ([]contract.EpisodeOutcome, error) { return full[2:], nil }}
	var fromFull, fromTail []int
	n1, _, _ := scanEpisodes(context.Background(), []episodeSource{epSrc(3, 5)}, episodePos{seg: 3, off: 2}, episodesFilter{pageSize: 2},
		func(o contract.EpisodeOutcome) { fromFull = append(fromFull, o.Index) })
	n2, _, _ := scanEpisodes(context.Background(), []episodeSource{tail}, episodePos{seg: 3, off: 2}, episodesFilter{pageSize: 2},
		func(o contract.EpisodeOutcome) { fromTail = append(fromTail, o.Index) })
	if !reflect.DeepEqual(fromFull, fromTail) || n1 != n2 || len(fromTail) != 2 {
		t.Fatalf("from the tail: %v next %+v, from the whole segment: %v next %+v", fromTail, n2, fromFull, n1)
	}
	if _, _, err := scanEpisodes(context.Background(), []episodeSource{tail}, episodePos{seg: 3, off: 1}, episodesFilter{pageSize: 2},
		func(contract.EpisodeOutcome) {}); err == nil {
		t.Fatal("a position before the source's base read as if nothing were missing")
	}

	// A segment that cannot be read is an error, not a short page.
	bad := []episodeSource{{seg: 1, load: func(context.Context) ([]contract.EpisodeOutcome, error) { return nil, fmt.Errorf("gone") }}}
	if _, _, err := scanEpisodes(context.Background(), bad, episodePos{}, episodesFilter{pageSize: 5}, func(contract.EpisodeOutcome) {}); err == nil {
		t.Fatal("unreadable segment read as empty")
	}
}

func TestParseEpisodesFilter(t *testing.T) {
	for _, c := range []struct {
		in    ListEpisodesIn
		field string
	}{
		{ListEpisodesIn{Status: "Passed"}, "status"},
		{ListEpisodesIn{Status: "cancelled"}, "status"},
		{ListEpisodesIn{PageSize: -1}, "page_size"},
		{ListEpisodesIn{PageSize: 101}, "page_size"},
	} {
		_, err := parseEpisodesFilter(c.in)
		te, ok := AsToolError(err)
		if !ok || te.Code != CodeInvalidArgument || te.Message[:len(c.field)+1] != c.field+":" {
			t.Errorf("%+v: %v", c.in, err)
		}
	}
	ef, err := parseEpisodesFilter(ListEpisodesIn{Status: "errored"})
	if err != nil || ef != (episodesFilter{status: contract.EpisodeErrored, pageSize: 20}) {
		t.Fatalf("%+v %v", ef, err)
	}
}

// FuzzEpisodeCursorPos: the page token inside a list_episodes cursor parses only in its one
// canonical spelling, and every position round-trips.
func FuzzEpisodeCursorPos(f *testing.F) {
	for _, s := range []string{"ep1:2:17", "ep1:0:0", "ep1:01:2", "ep1:-1:2", "ep1:1073741824:1", "ep1:2:17:4", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseEpisodePos([]byte(s))
		if err != nil {
			return
		}
		if string(p.token()) != s || p.seg < 0 || p.off < 0 || p.seg > episodePosMax || p.off > episodePosMax {
			t.Fatalf("%q parsed to %+v (token %q)", s, p, p.token())
		}
		if q, err := parseEpisodePos(p.token()); err != nil || q != p {
			t.Fatalf("%+v: round trip %+v %v", p, q, err)
		}
	})
}
