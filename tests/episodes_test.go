package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// epCall calls list_episodes and decodes a page or a tool error (never both); raw is the
// result's text.
func epCall(t testing.TB, cs *mcp.ClientSession, args map[string]any) (*wire.ListEpisodesOut, *jobcore.ToolError, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_episodes", Arguments: args})
	must(t, err)
	if len(res.Content) != 1 {
		t.Fatalf("list_episodes: want one text content, got %d", len(res.Content))
	}
	raw := res.Content[0].(*mcp.TextContent).Text
	var out wire.ListEpisodesOut
	te, err := jobcore.ParseResult(res, &out)
	must(t, err)
	if te != nil {
		return nil, te, raw
	}
	if out.Episodes == nil {
		t.Fatalf("list_episodes: episodes must be an array: %s", raw)
	}
	return &out, nil, raw
}

func epPage(t testing.TB, cs *mcp.ClientSession, args map[string]any) *wire.ListEpisodesOut {
	t.Helper()
	out, te, _ := epCall(t, cs, args)
	if te != nil {
		t.Fatalf("list_episodes %v: %s: %s", args, te.Code, te.Message)
	}
	return out
}

// epPageRecord is one page: the cursor that asked for it and what it held.
type epPageRecord struct {
	cursor string
	page   []wire.Episode
}

// epListAll pages through h's episodes with filter status ("" all) on alternating replicas
// until complete. It records every page with the cursor that asked for it.
func epListAll(t *testing.T, css []*mcp.ClientSession, h, status string, pageSize int) (all []wire.Episode, pages []epPageRecord) {
	t.Helper()
	args := func(cursor string) map[string]any {
		a := map[string]any{"handle": h, "page_size": pageSize}
		if status != "" {
			a["status"] = status
		}
		if cursor != "" {
			a["cursor"] = cursor
		}
		return a
	}
	cursor := ""
	for i := 0; ; i++ {
		out := epPage(t, css[i%len(css)], args(cursor))
		all = append(all, out.Episodes...)
		pages = append(pages, epPageRecord{cursor: cursor, page: out.Episodes})
		if out.Complete {
			if out.NextCursor != "" {
				t.Fatalf("complete page with a next_cursor")
			}
			return all, pages
		}
		if out.NextCursor == "" {
			t.Fatalf("page %d: neither complete nor a next_cursor", i)
		}
		if len(out.Episodes) < pageSize {
			// The end of what has finished so far: wait until the same cursor reads more.
			eventually(t, 3*time.Minute, "more episodes or the end", func() bool {
				o := epPage(t, css[0], args(out.NextCursor))
				return len(o.Episodes) > 0 || o.Complete
			})
		}
		cursor = out.NextCursor
	}
}

// TestListEpisodes runs a 2,000-episode demo eval (approved by its owner; the workflow
// continues as new after 1,000) and reads its episodes while it runs and after.
func TestListEpisodes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ana0, ana1 := b.session(ana, 0, ""), b.session(ana, 1, "")
	const n, failRate = 2000, 0.1
	v := mustView(t, call(t, ana0, "start_eval", acStartArgs(uniqueKey(t), "demo", n, 64,
		map[string]any{"episode_ms": 1, "fail_rate": failRate})))
	w := acAwaitInput(t, ana0, v.Handle, authz.ApproverOwner)

	// Another principal's handle, before and while the job runs: not_found, byte for byte an
	// unknown job's.
	unknown := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/no-such-job", Kind: "eval", Expiry: time.Now().Add(time.Hour)})
	_, te, unknownRaw := epCall(t, b.session(bo, 0, ""), map[string]any{"handle": unknown})
	if te == nil || te.Code != "not_found" {
		t.Fatalf("unknown handle: %+v", te)
	}
	for _, p := range []principal{bo, gus} {
		_, te, raw := epCall(t, b.session(p, 1, ""), map[string]any{"handle": v.Handle})
		if te == nil || raw != unknownRaw {
			t.Fatalf("%s on ana's handle: %s, want %s", p.sub, raw, unknownRaw)
		}
	}
	// Nothing has run: an empty page, with a cursor to come back with.
	if out := epPage(t, ana0, map[string]any{"handle": v.Handle}); len(out.Episodes) != 0 || out.Complete || out.NextCursor == "" {
		t.Fatalf("before approval: %+v", out)
	}
	mustView(t, call(t, ana0, "resume_eval", acResumeArgs(w, "approve", nil)))

	// A first full page while the job runs.
	var firstPage *wire.ListEpisodesOut
	eventually(t, 3*time.Minute, "a full first page", func() bool {
		firstPage = epPage(t, ana1, map[string]any{"handle": v.Handle, "page_size": 100})
		return len(firstPage.Episodes) == 100
	})
	if st := mustView(t, call(t, ana0, "get_eval", map[string]any{"handle": v.Handle})).Status; st != workflows.StatusRunning {
		t.Fatalf("after the first full page the job is %s, want running (the test reads while it runs)", st)
	}
	all, pages := epListAll(t, []*mcp.ClientSession{ana0, ana1}, v.Handle, "", 100)
	end := waitStatus(t, ana0, v.Handle, workflows.StatusSucceeded, time.Minute)
	if !reflect.DeepEqual(pages[0].page, firstPage.Episodes) {
		t.Fatalf("the first page changed while the job ran")
	}

	// Every episode exactly once.
	seen := make(map[int]bool, n)
	for _, e := range all {
		if seen[e.Index] {
			t.Fatalf("episode %d listed twice", e.Index)
		}
		seen[e.Index] = true
	}
	if len(all) != n {
		t.Fatalf("listed %d episodes, want %d", len(all), n)
	}

	// The run continued as new, and each outcome is the demo's for its operation ID.
	d, err := b.temporal.DescribeWorkflowExecution(context.Background(), end.JobID, "")
	must(t, err)
	first := d.GetWorkflowExecutionInfo().GetFirstRunId()
	if first == "" || first == d.GetWorkflowExecutionInfo().GetExecution().GetRunId() {
		t.Fatalf("the job did not continue as new (first run %q)", first)
	}
	wantFailed := map[int]bool{}
	for _, e := range all {
		fails, score := contract.DemoOutcome(workflows.OperationID(end.JobID, first, e.Index), failRate)
		want := contract.EpisodePassed
		if fails || score < contract.PassThresholdDefault {
			want = contract.EpisodeFailed
			wantFailed[e.Index] = true
		}
		if e.OperationID != workflows.OperationID(end.JobID, first, e.Index) || e.Status != want || e.Attempts != 1 {
			t.Fatalf("episode %+v: want status %s, attempts 1", e, want)
		}
		if fails != (e.Score == nil) || fails != (e.Error != "") {
			t.Fatalf("episode %+v: simulated failure %v, but score/error disagree", e, fails)
		}
	}

	// The failed filter is exact.
	failed, _ := epListAll(t, []*mcp.ClientSession{ana1}, v.Handle, "failed", 37)
	got := map[int]bool{}
	for _, e := range failed {
		if got[e.Index] || e.Status != "failed" {
			t.Fatalf("failed filter: %+v (twice or other status)", e)
		}
		got[e.Index] = true
	}
	if !reflect.DeepEqual(got, wantFailed) || len(wantFailed) == 0 {
		t.Fatalf("failed filter: %d episodes, want %d", len(got), len(wantFailed))
	}

	// Every page, most read while the job ran, starts the same now: a position never names
	// another episode (a page that was short at the end of what had finished has grown since).
	for _, r := range pages {
		args := map[string]any{"handle": v.Handle, "page_size": 100}
		if r.cursor != "" {
			args["cursor"] = r.cursor
		}
		if again := epPage(t, ana1, args); len(again.Episodes) < len(r.page) || !reflect.DeepEqual(again.Episodes[:len(r.page)], r.page) {
			t.Fatalf("the page at cursor %.20q… changed after the job ended", r.cursor)
		}
	}

	// Every page while the job ran read the workflow's own segment from it, not only the store.
	if n := b.logs.FilterMessageSnippet("list_episodes: the workflow did not answer").Len(); n != 0 {
		t.Fatalf("%d listings fell back to the written segments", n)
	}
	full := 0
	for _, r := range pages {
		if len(r.page) == 100 {
			full++
		}
	}
	t.Logf("%d episodes in %d pages (%d full), %d failed", len(all), len(pages), full, len(got))

	epAssertHistoryHoldsNoOutcomes(t, b, end.JobID, first, n)

	// The download: every line once, in list order, its digest the result's and the listing's.
	res := acResult(t, end)
	var view jobcore.EvalResultView
	raw, _ := json.Marshal(end.Result)
	must(t, json.Unmarshal(raw, &view))
	if view.EpisodesURL == "" || view.EpisodesCount != n || view.EpisodesSHA256 == "" || res.Episodes != n {
		t.Fatalf("get_eval result: %s", raw)
	}
	var listed bytes.Buffer
	enc := json.NewEncoder(&listed)
	enc.SetEscapeHTML(false)
	for _, e := range all {
		must(t, enc.Encode(e))
	}
	url := b.onReplica(view.EpisodesURL, 1)
	resp, body := exGet(t, url, b.token(ana), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %d %s", resp.StatusCode, body)
	}
	sum := sha256.Sum256(body)
	if lines := bytes.Count(body, []byte("\n")); lines != n {
		t.Fatalf("download has %d lines, want %d", lines, n)
	}
	if hex.EncodeToString(sum[:]) != view.EpisodesSHA256 || !bytes.Equal(body, listed.Bytes()) {
		t.Fatalf("download digest %x, result says %s; equal to the listing: %v", sum, view.EpisodesSHA256, bytes.Equal(body, listed.Bytes()))
	}
	if got, want := resp.Header.Get("Repr-Digest"), "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":"; got != want {
		t.Fatalf("Repr-Digest %q, want %q", got, want)
	}
	if resp, part := exGet(t, url, b.token(ana), map[string]string{"Range": "bytes=0-99"}); resp.StatusCode != http.StatusPartialContent ||
		!bytes.Equal(part, body[:100]) {
		t.Fatalf("range: %d, %d bytes", resp.StatusCode, len(part))
	}
	tampered := []byte(url)
	tampered[len(tampered)-5] ^= 1
	if resp, _ := exGet(t, string(tampered), b.token(ana), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("tampered link: %d", resp.StatusCode)
	}
	// The link alone, another principal's bearer or another tenant's: refused, saying nothing.
	if resp, _ := exGet(t, url, "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no bearer: %d", resp.StatusCode)
	}
	for _, p := range []principal{bo, gus} {
		if resp, body := exGet(t, url, b.token(p), nil); resp.StatusCode != http.StatusNotFound || string(body) != "404 page not found\n" {
			t.Fatalf("%s's bearer: %d %q", p.sub, resp.StatusCode, body)
		}
	}
	if resp, _ := exGet(t, url, b.token(ops), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("tenant admin's bearer: %d", resp.StatusCode)
	}
	// A cursor is bound to its caller, job and filters, and expires.
	cur := epPage(t, ana0, map[string]any{"handle": v.Handle, "page_size": 100}).NextCursor
	for _, c := range []struct {
		cs   *mcp.ClientSession
		args map[string]any
	}{
		{b.session(ops, 0, ""), map[string]any{"handle": v.Handle, "page_size": 100}}, // a tenant admin, who may read the job
		{ana0, map[string]any{"handle": v.Handle, "page_size": 100, "status": "failed"}},
		{ana0, map[string]any{"handle": v.Handle, "page_size": 50}},
	} {
		c.args["cursor"] = cur
		if _, te, _ := epCall(t, c.cs, c.args); te == nil || te.Code != "cursor_invalid" {
			t.Fatalf("cursor reused with %v: %+v", c.args, te)
		}
	}
	if out := epPage(t, b.session(ops, 1, ""), map[string]any{"handle": v.Handle}); len(out.Episodes) != 20 {
		t.Fatalf("tenant admin's first page: %d episodes", len(out.Episodes))
	}
	defer func() {
		b.clock.advanceTo(time.Now().Add(jobcore.CursorTTLDefault + time.Minute))
		_, te, _ := epCall(t, ana0, map[string]any{"handle": v.Handle, "page_size": 100, "cursor": cur})
		if te == nil || te.Code != "cursor_expired" {
			t.Fatalf("expired cursor: %+v", te)
		}
	}()

	// Nor does the link serve on the export route.
	if resp, _ := exGet(t, b.onReplica(fmt.Sprintf("http://localhost/artifacts/%s", view.EpisodesURL[len("http://localhost/episodes/"):]), 0),
		b.token(ana), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("episodes link on /artifacts: %d", resp.StatusCode)
	}
}

// TestCLIJobsEpisodes: `jobgate jobs episodes <handle> --failed` prints exactly list_episodes'
// failed episodes; without --json a table.
func TestCLIJobsEpisodes(t *testing.T) {
	testenv.Heavy(t, "runs the jobgate CLI binary")
	t.Parallel()
	b := setup(t)
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", acStartArgs(uniqueKey(t), "demo", 40, 8,
		map[string]any{"episode_ms": 1, "fail_rate": 0.3})))
	waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, 2*time.Minute)
	failed, _ := epListAll(t, []*mcp.ClientSession{cs}, v.Handle, "failed", 100)
	if len(failed) == 0 {
		t.Fatal("no failed episodes to print")
	}
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	for _, e := range failed {
		must(t, enc.Encode(e))
	}
	tok := b.token(ana)
	r := runCLI(t, b, tok, "jobs", "episodes", v.Handle, "--failed", "--json")
	r.mustSucceed(t, "jobs episodes --failed --json")
	if r.stdout != want.String() {
		t.Fatalf("CLI printed\n%s\nwant\n%s", r.stdout, want.String())
	}
	r = runCLI(t, b, tok, "jobs", "episodes", v.Handle)
	r.mustSucceed(t, "jobs episodes")
	if lines := strings.Count(r.stdout, "\n"); !strings.HasPrefix(r.stdout, "INDEX") || lines != 41 {
		t.Fatalf("table of %d lines:\n%s", lines, r.stdout)
	}
	if r := runCLI(t, b, b.token(bo), "jobs", "episodes", v.Handle); r.code == 0 || !strings.Contains(r.stderr, "no such job") {
		t.Fatalf("bo: exit %d %s", r.code, r.stderr)
	}
}

// epAssertHistoryHoldsNoOutcomes follows the job's runs from its first and checks, against
// their stored histories, that no episode outcome entered history through the episode log:
// each run's WriteEpisodes was scheduled with its run and count only (a small payload naming
// no operation ID; the worker read the outcomes with the run's query), and the counts its
// writes completed with add up to the job's n episodes.
func epAssertHistoryHoldsNoOutcomes(t *testing.T, b *testBundle, jobID, firstRunID string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dc := b.converter()
	runs, scheduled, written, biggest := 0, 0, 0, 0
	for runID := firstRunID; runID != ""; runs++ {
		it := b.temporal.GetWorkflowHistory(ctx, jobID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		next, names := "", map[int64]string{}
		for it.HasNext() {
			ev, err := it.Next()
			must(t, err)
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				a := ev.GetActivityTaskScheduledEventAttributes()
				names[ev.GetEventId()] = a.GetActivityType().GetName()
				if a.GetActivityType().GetName() != "WriteEpisodes" {
					continue
				}
				scheduled++
				data := a.GetInput().GetPayloads()[0].GetData()
				biggest = max(biggest, len(data))
				if len(data) > 1024 || bytes.Contains(data, []byte("operation_id")) {
					t.Fatalf("run %s: WriteEpisodes scheduled with %d bytes of input: %.300s", runID, len(data), data)
				}
				var in contract.WriteEpisodesInput
				must(t, dc.FromPayloads(a.GetInput(), &in))
				if in.RunID != runID || in.Count < 1 {
					t.Fatalf("run %s: WriteEpisodes input %+v", runID, in)
				}
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
				a := ev.GetActivityTaskCompletedEventAttributes()
				if names[a.GetScheduledEventId()] != "WriteEpisodes" {
					continue
				}
				var res contract.WriteEpisodesResult
				must(t, dc.FromPayloads(a.GetResult(), &res))
				if !res.Stored || res.Segment.SHA256 == "" {
					t.Fatalf("run %s: WriteEpisodes result %+v", runID, res)
				}
				written += res.Segment.Count
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
				next = ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
			}
		}
		runID = next
	}
	if runs < 2 || scheduled != runs || written != n {
		t.Fatalf("%d runs, %d WriteEpisodes scheduled, %d outcomes written; want one write per run, %d outcomes", runs, scheduled, written, n)
	}
	t.Logf("history: %d runs, each WriteEpisodes input at most %d bytes for %d outcomes in all", runs, biggest, written)
}
