package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobgate/jobgate/frontend/wire"
)

const jobsUsage = `Usage:
  jobgate jobs list [--wide]              your jobs (all of your tenant's with jobs:admin)
  jobgate jobs get <job>                  one job: status, progress, open input request, result (an eval: its scores)
  jobgate jobs watch <job> [--interval d] follow a job until it finishes (exit 0 only if it succeeded)
  jobgate jobs download <job> [-o file]   fetch a succeeded export's file and verify its SHA-256
  jobgate jobs describe <job>             the job's timeline from its history (owner or jobs:admin)
  jobgate jobs episodes <job> [--failed]  an eval's finished episodes: status, score, attempts, error

<job> is the job's ID (the JOB_ID column of 'jobgate jobs list') or its handle (from start_*,
'jobs list --wide' or 'jobgate approvals list'). Every command takes --json: the tool's result as
the server sent it, on stdout. All are MCP clients of --url (env JOBGATE_URL) with your own --token
(env JOBGATE_TOKEN, else your 'jobgate login'). Run 'jobgate jobs <command> -h' for a command's flags.
`

// runJobs implements "jobgate jobs ...".
func runJobs(args []string, stdout, stderr io.Writer) error {
	return runGroup("jobs", jobsUsage, []subcommand{
		{[]string{"list", "ls"}, runJobsList},
		{[]string{"get", "show"}, runJobsGet},
		{[]string{"watch"}, runJobsWatch},
		{[]string{"download"}, runJobsDownload},
		{[]string{"describe"}, runJobsDescribe},
		{[]string{"episodes"}, runJobsEpisodes},
	}, args, stdout, stderr)
}

type jobsListFlags struct {
	kind, status, cursor string
	pageSize             int
	allPages, wide       bool
}

func runJobsList(args []string, stdout, stderr io.Writer) error {
	var c jobsListFlags
	cmd := newClientCommand("jobs list", "Lists jobs via list_jobs on the MCP endpoint and prints a table and the next cursor.", stderr)
	cmd.StringVar(&c.kind, "kind", "", "only this kind: eval or export")
	cmd.StringVar(&c.status, "status", "", "only this status: queued, running, awaiting_input, succeeded, failed, cancelling, cancelled")
	cmd.IntVar(&c.pageSize, "page-size", 0, "rows per page, 1-100 (server default 20)")
	cmd.StringVar(&c.cursor, "cursor", "", "continue from this next cursor (same --kind, --status and --page-size)")
	cmd.BoolVar(&c.allPages, "all-pages", false, "follow next cursors to the end")
	cmd.BoolVar(&c.wide, "wide", false, "also show each job's handle and when it last changed")
	cmd.jsonHelp("print each list_jobs result as JSON, unchanged (with --all-pages, one result per page, in order)")
	cl, err := cmd.connect(args)
	if err != nil {
		return err
	}
	defer cl.Close()

	var rows []wire.JobSummary
	cursor := c.cursor
	for pages := 0; ; pages++ {
		if pages == maxPages {
			return errors.New("jobs list: the server kept paging; stopping")
		}
		page, raw, err := listJobsPage(cl, c, cursor)
		if err != nil {
			return err
		}
		if cmd.asJSON {
			if err := printJSON(stdout, raw); err != nil {
				return err
			}
		}
		rows = append(rows, page.Jobs...)
		if page.NextCursor == cursor && cursor != "" {
			return errors.New("jobs list: the server returned the same cursor again; stopping")
		}
		cursor = page.NextCursor
		if !c.allPages || cursor == "" {
			break
		}
	}
	if cmd.asJSON {
		return nil
	}
	printJobs(stdout, rows, c.wide)
	if cursor != "" {
		fmt.Fprintf(stdout, "\nnext cursor: %s\n", cursor)
	}
	return nil
}

func listJobsPage(cl *client, c jobsListFlags, cursor string) (*wire.ListJobsOut, json.RawMessage, error) {
	args := map[string]any{}
	if c.kind != "" {
		args["kind"] = c.kind
	}
	if c.status != "" {
		args["status"] = c.status
	}
	if c.pageSize != 0 {
		args["page_size"] = c.pageSize
	}
	if cursor != "" {
		args["cursor"] = cursor
	}
	var out wire.ListJobsOut
	raw, err := cl.call(context.Background(), "list_jobs", args, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, raw, nil
}

// printJobs prints list rows. The job ID works wherever a handle is asked (the server resolves
// it for the caller), so it leads; wide adds the handle itself and the last change.
func printJobs(w io.Writer, rows []wire.JobSummary, wide bool) {
	header := "JOB_ID\tKIND\tSTATUS\tOWNER\tPROGRESS (done/failed/total)\tCREATED_AT"
	if wide {
		header += "\tUPDATED_AT\tHANDLE"
	}
	printTable(w, "no jobs", header, rows, func(r wire.JobSummary) string {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%d/%d/%d\t%s", oneLine(r.JobID), r.Kind, r.Status, oneLine(r.Owner),
			r.Progress.Done, r.Progress.Failed, r.Progress.Total, r.CreatedAt.UTC().Format(time.RFC3339))
		if wide {
			line += "\t" + r.UpdatedAt.UTC().Format(time.RFC3339) + "\t" + oneLine(r.Handle)
		}
		return line
	})
}

// printTable is how the client commands print a list: none alone when there are no rows, else
// header and one line per row (tab-separated columns, as row formats them) aligned the same
// way in every table.
func printTable[T any](w io.Writer, none, header string, rows []T, row func(T) string) {
	if len(rows) == 0 {
		fmt.Fprintln(w, none)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, row(r))
	}
	_ = tw.Flush()
}

// oneLine keeps server-supplied text from breaking the table (or the terminal).
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\t' {
			return '?'
		}
		return r
	}, s)
}

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
