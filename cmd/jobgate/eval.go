package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/frontend/wire/scorehist"
)

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
