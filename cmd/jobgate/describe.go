package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/jobgate/jobgate/frontend/wire"
)

// runJobsDescribe implements "jobgate jobs describe <handle>": the job's timeline from its
// history (describe_job), for engineers without Web UI access.
func runJobsDescribe(args []string, stdout, stderr io.Writer) error {
	var maxLines int
	c := newJobCommand("jobs describe", "Prints a job's timeline from its Temporal history (describe_job): who started it, the\n"+
		"approval it waited for and who answered where, parts or episodes, retries and their errors, the end.\n"+
		"For the job's owner and jobs:admin holders (admins see recorded error messages, owners their types).", stderr)
	c.IntVar(&maxLines, "max-lines", 0, fmt.Sprintf("most timeline lines, %d-%d (server default %d)", wire.StoryLinesMin, wire.StoryLinesMax, wire.StoryLinesDefault))
	return c.printJobRead(args, stdout, "print the describe_job result as JSON, unchanged",
		func(ctx context.Context, cl *client, h string) (json.RawMessage, func(), error) {
			in := map[string]any{"handle": h}
			if maxLines != 0 {
				in["max_lines"] = maxLines
			}
			var out wire.DescribeJobOut
			raw, err := cl.call(ctx, "describe_job", in, &out)
			return raw, func() { printStory(stdout, &out) }, err
		})
}

// printStory prints a timeline: a header, one line per entry with its offset from the start,
// what was cut, and the Web UI link.
func printStory(w io.Writer, d *wire.DescribeJobOut) {
	fmt.Fprintf(w, "%s job %s (owner %s): %s after %s\n", d.Kind, d.JobID, oneLine(d.Owner), d.Status, d.Duration)
	fmt.Fprintf(w, "started %s; %d run(s), %d history events read; error detail: %s\n",
		d.StartedAt.UTC().Format(time.RFC3339), d.Runs, d.Events, d.Detail)
	for _, l := range d.Lines {
		fmt.Fprintf(w, "  %10s  %s\n", offset(l.At.Sub(d.StartedAt)), oneLine(l.Text))
	}
	if d.Cut != "" {
		fmt.Fprintf(w, "cut: %s\n", oneLine(d.Cut))
	}
	if d.UIURL != "" {
		fmt.Fprintf(w, "web ui: %s\n", d.UIURL)
	}
}

// offset renders a duration since the job's start as +h:mm:ss.
func offset(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int(d / time.Second)
	return fmt.Sprintf("+%d:%02d:%02d", s/3600, s/60%60, s%60)
}
