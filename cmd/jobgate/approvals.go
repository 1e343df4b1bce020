package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend/wire"
)

const approvalsUsage = `Usage:
  jobgate approvals list [--kind export|eval] [--json]   jobs waiting for your approval
  jobgate approvals approve <handle> [--comment text]    approve the job's open request
  jobgate approvals reject <handle> [--comment text]     reject it

For approvers (a token with jobs:approve): MCP clients of --url (env JOBGATE_URL) with your own
--token (env JOBGATE_TOKEN, else your 'jobgate login'). approve and reject first read the job and print exactly what is
being answered; the answer is bound to that scope (its scope_digest), so a request that changed
in between is refused, never approved unseen. The job's owner cannot approve their own request
(four eyes) unless the dataset allows self-approval.
Run 'jobgate approvals <command> -h' for a command's flags.
`

// runApprovals implements "jobgate approvals ...".
func runApprovals(args []string, stdout, stderr io.Writer) error {
	answer := func(decision string) func([]string, io.Writer, io.Writer) error {
		return func(args []string, stdout, stderr io.Writer) error {
			return runApprovalsAnswer(args, decision, stdout, stderr)
		}
	}
	return runGroup("approvals", approvalsUsage, []subcommand{
		{[]string{"list", "ls"}, runApprovalsList},
		{[]string{"approve"}, answer("approve")},
		{[]string{"reject"}, answer("reject")},
	}, args, stdout, stderr)
}

// maxPages bounds any "all pages" loop against a server that never stops paging.
const maxPages = 10000

func runApprovalsList(args []string, stdout, stderr io.Writer) error {
	var kind string
	c := newClientCommand("approvals list", "Lists the jobs of your tenant whose open input request you may answer (list_approvals, all pages):\n"+
		"who asked, what exactly (dataset, columns, purpose, …), the prompt and when it expires.", stderr)
	c.StringVar(&kind, "kind", "", "only this kind: export or eval")
	c.jsonHelp("print the rows as JSON (the list_approvals rows of every page, unchanged, in one array)")
	cl, err := c.connect(args)
	if err != nil {
		return err
	}
	defer cl.Close()

	// Rows are decoded twice: as summaries for the text view, and raw for --json so that
	// fields this CLI does not know are kept.
	type page struct {
		Jobs       []json.RawMessage `json:"jobs"`
		NextCursor string            `json:"next_cursor"`
	}
	var rows []wire.JobSummary
	var raws []json.RawMessage
	cursor := ""
	for pages := 0; ; pages++ {
		if pages == maxPages {
			return errors.New("approvals list: the server kept paging; stopping")
		}
		args := map[string]any{"page_size": wire.ListPageSizeMax}
		if kind != "" {
			args["kind"] = kind
		}
		if cursor != "" {
			args["cursor"] = cursor
		}
		var out wire.ListJobsOut
		raw, err := cl.call(context.Background(), "list_approvals", args, &out)
		if err != nil {
			return err
		}
		var p page
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("list_approvals: %w", err)
		}
		rows = append(rows, out.Jobs...)
		raws = append(raws, p.Jobs...)
		if out.NextCursor != "" && out.NextCursor == cursor {
			return errors.New("approvals list: the server returned the same cursor again; stopping")
		}
		if cursor = out.NextCursor; cursor == "" {
			break
		}
	}
	if c.asJSON {
		if raws == nil {
			raws = []json.RawMessage{}
		}
		return printJSONValue(stdout, raws)
	}
	if len(rows) == 0 {
		fmt.Fprintln(stdout, "no jobs await your approval")
		return nil
	}
	printApprovals(stdout, rows, cl.tenant(), time.Now())
	return nil
}

func runApprovalsAnswer(args []string, decision string, stdout, stderr io.Writer) error {
	var comment string
	name := "approvals " + decision
	c := newJobCommand(name, "Reads the job (get_*), prints the open input request being answered, then answers it\n"+
		"(resume_*) with decision "+decision+" for exactly that input_id and scope_digest.", stderr)
	c.StringVar(&comment, "comment", "", "note recorded with your decision (at most 1000 characters)")
	c.jsonHelp("print the resume_* result as JSON, unchanged (what is being answered goes to stderr)")
	// Not c.handle: the handle goes to the server as given, untrimmed.
	pos, err := parseInterspersed(c.FlagSet, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		c.Usage()
		return fmt.Errorf("%s: want exactly one handle, got %d arguments", name, len(pos))
	}
	h := pos[0]
	cl, err := c.conn.connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := context.Background()

	j, err := cl.getJob(ctx, h)
	if err != nil {
		return err
	}
	v := &j.view
	ni := v.NeedsInput
	if v.Status != "awaiting_input" || ni == nil {
		return &exitError{code: 1, err: fmt.Errorf("%s: %s job %s is not waiting for input (status %s)", name, j.kind, clean(v.JobID), v.Status)}
	}
	verb := map[string]string{"approve": "approving", "reject": "rejecting"}[decision]
	human := c.info(stdout) // under --json stdout holds the resume_* result alone
	fmt.Fprintf(human, "%s the open input request of %s job %s (owner %s):\n", verb, j.kind, clean(v.JobID), clean(v.Owner))
	var f fields
	addNeedsInput(&f, ni, cl.tenant(), time.Now())
	f.add("scope digest", clean(ni.ScopeDigest))
	f.write(human, "  ")

	args2 := map[string]any{"handle": v.Handle, "input_id": ni.InputID, "scope_digest": ni.ScopeDigest, "decision": decision}
	if comment != "" {
		args2["comment"] = comment
	}
	var after wire.JobView
	// The decision record says the answer came from the CLI: declared in _meta, which the
	// server takes as the client's word (any holder of a valid token could say it).
	meta := mcp.Meta{wire.MetaSurface: wire.SurfaceCLI}
	raw, err := cl.callMeta(ctx, "resume_"+j.kind, args2, meta, &after)
	if err != nil {
		return err
	}
	return c.emit(stdout, raw, func() {
		past := map[string]string{"approve": "approved", "reject": "rejected"}[decision]
		fmt.Fprintf(stdout, "%s: %s job %s is now %s\n", past, j.kind, clean(after.JobID), after.Status)
		if after.Error != nil {
			fmt.Fprintf(stdout, "  %s: %s\n", clean(after.Error.Code), clean(after.Error.Message))
		}
	})
}

// printApprovals prints the jobs awaiting the caller's answer (tenant: the caller's), each
// with its open request and what approving it means.
func printApprovals(w io.Writer, rows []wire.JobSummary, tenant string, now time.Time) {
	if len(rows) == 1 {
		fmt.Fprintln(w, "1 job awaits your approval:")
	} else {
		fmt.Fprintf(w, "%d jobs await your approval:\n", len(rows))
	}
	for i := range rows {
		r := &rows[i]
		fmt.Fprintln(w)
		var f fields
		f.add("handle", r.Handle)
		f.add("job", clean(r.JobID)+" ("+clean(r.Kind)+")")
		if r.NeedsInput != nil {
			addNeedsInput(&f, r.NeedsInput, tenant, now)
		} else {
			f.add("status", string(r.Status)+" (no open input request any more)")
		}
		f.add("answer", "jobgate approvals approve|reject "+r.Handle+" [--comment text]")
		f.write(w, "  ")
	}
}
