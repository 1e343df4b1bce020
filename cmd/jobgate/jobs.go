package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobgate/jobgate/frontend/wire"
)

const jobsUsage = `Usage:
  jobgate jobs list [flags]                  your jobs (all of your tenant's with jobs:admin)
  jobgate jobs get <handle> [--json]         one job: status, progress, open input request, result
  jobgate jobs watch <handle> [--interval d] follow a job until it finishes (exit 0 only if it succeeded)
  jobgate jobs download <handle> [-o file]   fetch a succeeded export's file and verify its SHA-256
  jobgate jobs describe <handle> [--json]    the job's timeline from its history (owner or jobs:admin)
  jobgate jobs episodes <handle> [--failed]  an eval's finished episodes: status, score, attempts, error

All are MCP clients of --url (env JOBGATE_URL) with your own --token (env JOBGATE_TOKEN, else your 'jobgate login').
Handles come from 'jobgate jobs list', start_* or 'jobgate approvals list'.
Run 'jobgate jobs <command> -h' for a command's flags.
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
	allPages             bool
}

func runJobsList(args []string, stdout, stderr io.Writer) error {
	var c jobsListFlags
	cmd := newClientCommand("jobs list", "Lists jobs via list_jobs on the MCP endpoint and prints a table and the next cursor.", stderr)
	cmd.StringVar(&c.kind, "kind", "", "only this kind: eval or export")
	cmd.StringVar(&c.status, "status", "", "only this status: queued, running, awaiting_input, succeeded, failed, cancelling, cancelled")
	cmd.IntVar(&c.pageSize, "page-size", 0, "rows per page, 1-100 (server default 20)")
	cmd.StringVar(&c.cursor, "cursor", "", "continue from this next cursor (same --kind, --status and --page-size)")
	cmd.BoolVar(&c.allPages, "all-pages", false, "follow next cursors to the end")
	cl, err := cmd.connect(args)
	if err != nil {
		return err
	}
	defer cl.Close()

	var rows []wire.JobSummary
	cursor := c.cursor
	for pages := 0; ; pages++ {
		page, err := listJobsPage(cl, c, cursor)
		if err != nil {
			return err
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
	printJobs(stdout, rows)
	if cursor != "" {
		fmt.Fprintf(stdout, "\nnext cursor: %s\n", cursor)
	}
	return nil
}

func listJobsPage(cl *client, c jobsListFlags, cursor string) (*wire.ListJobsOut, error) {
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
	if _, err := cl.call(context.Background(), "list_jobs", args, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func printJobs(w io.Writer, rows []wire.JobSummary) {
	printTable(w, "no jobs", "JOB_ID\tKIND\tSTATUS\tOWNER\tPROGRESS (done/failed/total)\tCREATED_AT", rows, func(r wire.JobSummary) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%d/%d/%d\t%s", oneLine(r.JobID), r.Kind, r.Status, oneLine(r.Owner),
			r.Progress.Done, r.Progress.Failed, r.Progress.Total, r.CreatedAt.UTC().Format(time.RFC3339))
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
