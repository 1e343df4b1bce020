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
)

// runJobsEpisodes implements "jobgate jobs episodes <handle> [--failed]": an eval's finished
// episodes through list_episodes, every page to the end of what has finished.
func runJobsEpisodes(args []string, stdout, stderr io.Writer) error {
	var (
		failed, asJSON bool
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
	c.BoolVar(&asJSON, "json", false, "print one JSON object per episode (JSON Lines), as the server sent it")
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
	if asJSON {
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
	var (
		since, by string
		asJSON    bool
	)
	c := newClientCommand("usage", "Prints what your tenant's finished jobs used (get_usage, jobs:admin): jobs, episodes,\n"+
		"episode-seconds and cost by unit (evals), rows and bytes (exports), by owner or kind. The tenant is your token's.", stderr)
	c.StringVar(&since, "since", "720h", "jobs that finished within this long ago (a Go duration)")
	c.StringVar(&by, "by", "owner", "group by owner or kind")
	c.BoolVar(&asJSON, "json", false, "print the get_usage result as JSON, unchanged")
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
	if asJSON {
		_, err := fmt.Fprintf(stdout, "%s\n", raw)
		return err
	}
	fmt.Fprintf(stdout, "tenant %s, jobs finished %s to %s, by %s\n", out.Tenant,
		out.Since.Format("2006-01-02 15:04Z07:00"), out.Until.Format("2006-01-02 15:04Z07:00"), out.By)
	rows := append(out.Groups, out.Total)
	printTable(stdout, "no finished jobs", "KEY\tJOBS\tEPISODES\tEPISODE_S\tCOST\tROWS\tBYTES", rows, func(g wire.UsageGroup) string {
		return fmt.Sprintf("%s\t%d\t%d\t%.0f\t%s\t%d\t%d", oneLine(g.Key), g.Jobs, g.Episodes, g.EpisodeSeconds, costs(g.Cost), g.Rows, g.Bytes)
	})
	if out.Truncated {
		fmt.Fprintln(stderr, "more jobs finished in the window than one call sums; ask for a shorter --since")
	}
	return nil
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
