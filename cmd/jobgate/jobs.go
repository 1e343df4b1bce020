package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend"
)

const jobsUsage = `Usage: jobgate jobs list [flags]

Lists jobs through the MCP endpoint, as an MCP client calling list_jobs: your own jobs, or all of
your tenant's with a jobs:admin token. Running jobs come first (newest start first), then
finished jobs (most recently finished first).
`

// jobsCallTimeout bounds each list_jobs call (and the connect).
const jobsCallTimeout = 30 * time.Second

// runJobs implements "jobgate jobs ...".
func runJobs(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, jobsUsage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "list", "ls":
		return runJobsList(args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, jobsUsage)
	return fmt.Errorf("unknown jobs command %q (want: list)", args[0])
}

type jobsListFlags struct {
	url, token, tokenFile string
	kind, status, cursor  string
	pageSize              int
	allPages              bool
}

func runJobsList(args []string, stdout, stderr io.Writer) error {
	var c jobsListFlags
	fs := newFlagSet("jobs list", "Lists jobs via list_jobs on the MCP endpoint and prints a table and the next cursor.", stderr)
	fs.StringVar(&c.url, "url", envOr("JOBGATE_URL", "http://localhost:8080/mcp"), "MCP endpoint (env JOBGATE_URL)")
	fs.StringVar(&c.token, "token", "", "bearer token (default: env JOBGATE_TOKEN); mint one with 'jobgate token'")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token")
	fs.StringVar(&c.kind, "kind", "", "only this kind: eval or export")
	fs.StringVar(&c.status, "status", "", "only this status: queued, running, awaiting_input, succeeded, failed, cancelling, cancelled")
	fs.IntVar(&c.pageSize, "page-size", 0, "rows per page, 1-100 (server default 20)")
	fs.StringVar(&c.cursor, "cursor", "", "continue from this next cursor (same --kind, --status and --page-size)")
	fs.BoolVar(&c.allPages, "all-pages", false, "follow next cursors to the end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("jobs list: unexpected argument %q", fs.Arg(0))
	}
	token, err := c.bearer()
	if err != nil {
		return err
	}
	cs, err := connectMCP(c.url, token)
	if err != nil {
		return err
	}
	defer cs.Close()

	var rows []frontend.JobSummary
	cursor := c.cursor
	for pages := 0; ; pages++ {
		page, err := listJobsPage(cs, c, cursor)
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

// bearer picks the token: --token, then --token-file, then JOBGATE_TOKEN.
func (c jobsListFlags) bearer() (string, error) {
	tok := c.token
	switch {
	case tok != "" && c.tokenFile != "":
		return "", errors.New("jobs list: give --token or --token-file, not both")
	case tok == "" && c.tokenFile != "":
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		tok = string(b)
	case tok == "":
		tok = os.Getenv("JOBGATE_TOKEN")
	}
	tok = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(tok), "Bearer "))
	if tok == "" {
		return "", errors.New("jobs list: no token; pass --token or --token-file, or set JOBGATE_TOKEN (mint one with 'jobgate token')")
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", errors.New("jobs list: the token contains whitespace")
	}
	return tok, nil
}

// bearerTransport adds the Authorization header to every request of the MCP client.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(r)
}

// connectMCP connects a go-sdk MCP client over Streamable HTTP, without the standalone SSE
// stream (the server is stateless and has none).
func connectMCP(endpoint, token string) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: bearerTransport{token: token, base: http.DefaultTransport}, Timeout: jobsCallTimeout}
	c := mcp.NewClient(&mcp.Implementation{Name: "jobgate-cli", Version: frontend.Version}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), jobsCallTimeout)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w%s", endpoint, err, authHint(err))
	}
	return cs, nil
}

func authHint(err error) string {
	switch s := err.Error(); {
	case strings.Contains(s, "401") || strings.Contains(s, "Unauthorized"):
		return " (the token was refused: expired, wrong issuer/audience or secret?)"
	case strings.Contains(s, "403") || strings.Contains(s, "Forbidden"):
		return " (the token lacks jobs:read or jobs:admin)"
	}
	return ""
}

func listJobsPage(cs *mcp.ClientSession, c jobsListFlags, cursor string) (*frontend.ListJobsOut, error) {
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
	ctx, cancel := context.WithTimeout(context.Background(), jobsCallTimeout)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_jobs", Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("list_jobs: %w%s", err, authHint(err))
	}
	var out frontend.ListJobsOut
	te, err := frontend.ParseResult(res, &out)
	if err != nil {
		return nil, fmt.Errorf("list_jobs: %w", err)
	}
	if te != nil {
		return nil, fmt.Errorf("list_jobs: %s: %s", te.Code, te.Message)
	}
	return &out, nil
}

func printJobs(w io.Writer, rows []frontend.JobSummary) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB_ID\tKIND\tSTATUS\tOWNER\tPROGRESS (done/failed/total)\tCREATED_AT")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d/%d\t%s\n", oneLine(r.JobID), r.Kind, r.Status, oneLine(r.Owner),
			r.Progress.Done, r.Progress.Failed, r.Progress.Total, r.CreatedAt.UTC().Format(time.RFC3339))
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

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
