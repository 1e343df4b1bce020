package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/frontend/wire/scorehist"
)

// runJobsEpisodes implements "jobgate jobs episodes <handle> [--failed]": an eval's finished
// episodes through list_episodes, every page to the end of what has finished.
func runJobsEpisodes(args []string, stdout, stderr io.Writer) error {
	var (
		failed         bool
		status, cursor string
		pageSize       int
	)
	c := newJobCommand("jobs episodes", "Prints an eval run's finished episodes (list_episodes), in the order they finished:\n"+
		"index, status (passed, failed, errored), score, attempts, duration and error. Readable while the run goes on:\n"+
		"it then ends with a cursor to continue from (--cursor) once more episodes have finished.", stderr)
	c.BoolVar(&failed, "failed", false, "only failed episodes (same as --status failed)")
	c.StringVar(&status, "status", "", "only episodes with this status: passed, failed or errored")
	c.IntVar(&pageSize, "page-size", 100, "episodes per list_episodes call, 1-100")
	c.StringVar(&cursor, "cursor", "", "continue from this cursor (same handle, status and page size)")
	c.jsonHelp("print one JSON object per episode (JSON Lines), as the server sent it")
	h, err := c.handle(args)
	if err != nil {
		return err
	}
	if failed {
		if status != "" && status != "failed" {
			return errors.New("jobs episodes: --failed and --status " + strconv.Quote(status) + " contradict each other")
		}
		status = "failed"
	}
	cl, err := c.conn.connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	var (
		all      []wire.Episode
		complete bool
	)
	for {
		in := map[string]any{"handle": h, "page_size": pageSize}
		if status != "" {
			in["status"] = status
		}
		if cursor != "" {
			in["cursor"] = cursor
		}
		var page wire.ListEpisodesOut
		if _, err := cl.call(context.Background(), "list_episodes", in, &page); err != nil {
			return err
		}
		all = append(all, page.Episodes...)
		complete, cursor = page.Complete, page.NextCursor
		// A short page while the run goes on is the end of what has finished so far.
		if complete || cursor == "" || len(page.Episodes) < pageSize {
			break
		}
	}
	if c.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		for _, e := range all {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
	} else {
		printEpisodes(stdout, all)
	}
	if !complete && cursor != "" {
		fmt.Fprintf(stderr, "the run is still going; continue later with --cursor %s\n", cursor)
	}
	return nil
}

func printEpisodes(w io.Writer, eps []wire.Episode) {
	printTable(w, "no episodes", "INDEX\tSTATUS\tSCORE\tATTEMPTS\tDURATION_MS\tERROR", eps, func(e wire.Episode) string {
		score := "-"
		if e.Score != nil {
			score = strconv.FormatFloat(*e.Score, 'g', -1, 64)
		}
		return fmt.Sprintf("%d\t%s\t%s\t%d\t%d\t%s", e.Index, oneLine(e.Status), score, e.Attempts, e.DurationMS, oneLine(e.Error))
	})
}

// runUsage implements "jobgate usage [--since 720h] [--by owner|kind]" (jobs:admin): what the
// tenant's finished jobs used, through get_usage. (Here beside the episodes' listing: the
// package holds as many files as it may.)
func runUsage(args []string, stdout, stderr io.Writer) error {
	var since, by string
	c := newClientCommand("usage", "Prints what your tenant's finished jobs used (get_usage, jobs:admin): jobs, episodes,\n"+
		"episode-seconds and cost by unit (evals), rows and bytes (exports), by owner or kind. The tenant is your token's.", stderr)
	c.StringVar(&since, "since", "720h", "jobs that finished within this long ago (a Go duration)")
	c.StringVar(&by, "by", "owner", "group by owner or kind")
	c.jsonHelp("print the get_usage result as JSON, unchanged")
	cl, err := c.connect(args)
	if err != nil {
		return err
	}
	defer cl.Close()
	var out wire.UsageOut
	raw, err := cl.call(context.Background(), "get_usage", map[string]any{"since": since, "by": by}, &out)
	if err != nil {
		return err
	}
	if out.Truncated {
		fmt.Fprintln(stderr, "more jobs finished in the window than one call sums; ask for a shorter --since")
	}
	return c.emit(stdout, raw, func() {
		fmt.Fprintf(stdout, "tenant %s, jobs finished %s to %s, by %s\n", out.Tenant,
			out.Since.Format("2006-01-02 15:04Z07:00"), out.Until.Format("2006-01-02 15:04Z07:00"), out.By)
		rows := append(out.Groups, out.Total)
		printTable(stdout, "no finished jobs", "KEY\tJOBS\tEPISODES\tEPISODE_S\tCOST\tROWS\tBYTES", rows, func(g wire.UsageGroup) string {
			return fmt.Sprintf("%s\t%d\t%d\t%.0f\t%s\t%d\t%d", oneLine(g.Key), g.Jobs, g.Episodes, g.EpisodeSeconds, costs(g.Cost), g.Rows, g.Bytes)
		})
	})
}

// costs renders costs by unit ("0.84 usd, 120000 tokens"; "-" for none), units sorted.
func costs(c map[string]float64) string {
	if len(c) == 0 {
		return "-"
	}
	units := make([]string, 0, len(c))
	for u := range c {
		units = append(units, u)
	}
	sort.Strings(units)
	parts := make([]string, len(units))
	for i, u := range units {
		parts[i] = strconv.FormatFloat(c[u], 'f', -1, 64) + " " + oneLine(u)
	}
	return strings.Join(parts, ", ")
}

// evalCLI is the eval kind in the CLI: `jobs get` adds the score distribution as a sparkline.
func evalCLI() cliKind { return cliKind{name: "eval", printMore: printScoreLine} }

// sparkEpisodesMax bounds the episodes `jobs get` reads for the sparkline (list_episodes pages).
const sparkEpisodesMax = 10000

// printScoreLine prints one line: the histogram of the scores of the eval's finished episodes
// (list_episodes, the same bins as the job page's SVG, scorehist), their range and count, and
// passed/failed/errored. While the eval runs it is the distribution so far. Nothing when no
// episode has finished; a read that fails is a note, never the command's failure (the job view
// was printed).
func printScoreLine(ctx context.Context, cl *client, w io.Writer, j *job) {
	var scores []float64
	counts := map[string]int{}
	cursor, read, partial := "", 0, false
	for {
		in := map[string]any{"handle": j.view.Handle, "page_size": wire.ListPageSizeMax}
		if cursor != "" {
			in["cursor"] = cursor
		}
		var page wire.ListEpisodesOut
		if _, err := cl.call(ctx, "list_episodes", in, &page); err != nil {
			// An approver may read the job while it waits for them, not its episodes: nothing.
			if te := (*wire.ToolError)(nil); !errors.As(err, &te) || te.Code != "not_found" {
				fmt.Fprintf(w, "\nscores: not shown (%v)\n", err)
			}
			return
		}
		for _, e := range page.Episodes {
			counts[e.Status]++
			if e.Score != nil {
				scores = append(scores, *e.Score)
			}
		}
		read += len(page.Episodes)
		if page.Complete || page.NextCursor == "" || len(page.Episodes) < wire.ListPageSizeMax {
			break
		}
		if read >= sparkEpisodesMax {
			partial = true
			break
		}
		cursor = page.NextCursor
	}
	if read == 0 {
		return
	}
	h := scorehist.Of(scores, scorehist.Bins)
	of := ""
	if partial {
		of = " (the first " + strconv.Itoa(read) + ")"
	}
	mean := ""
	if h.N > 0 {
		mean = ", mean " + fmtScore(h.Mean)
	}
	fmt.Fprintf(w, "\nscores:   ▕%s▏ %s…%s, %d scored%s%s\n", h.Sparkline(), fmtScore(h.Lo), fmtScore(h.Hi), h.N, of, mean)
	fmt.Fprintf(w, "episodes: %d passed, %d failed, %d errored\n", counts["passed"], counts["failed"], counts["errored"])
}

func fmtScore(f float64) string { return strconv.FormatFloat(f, 'g', 3, 64) }
