package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

var (
	listRW        = []authz.Scope{authz.ScopeRead, authz.ScopeWrite}
	listAdminRead = []authz.Scope{authz.ScopeRead, authz.ScopeAdmin}
)

// TestListJobs_PaginationWhileStarting pages (page_size 7, alternating replicas) through 25
// stable jobs while 10 more are being started: every job that existed before the first page
// appears exactly once, nothing appears twice, and rows come newest first.
func TestListJobs_PaginationWhileStarting(t *testing.T) {
	b := setup(t)
	p := principal{listTenant(), "ana", listRW}
	css := []*mcp.ClientSession{b.session(p, 0, ""), b.session(p, 1, "")}

	const n = 25
	var before []string
	for i := 0; i < n; i++ {
		// 150 episodes: the demo suite asks for approval, so each job sits in awaiting_input
		// and its visibility row stops changing.
		v := listStart(t, css[i%2], fmt.Sprintf("pre-%02d", i), 150, nil)
		before = append(before, v.JobID)
	}
	eventually(t, 60*time.Second, "all 25 jobs awaiting_input in visibility", func() bool {
		rows := listEverything(t, css, map[string]any{"page_size": 100, "status": "awaiting_input"})
		return len(rows) == n
	})

	// A goroutine starts 10 more jobs while we page. To make sure they really land in the
	// middle of the traversal, the pager waits after each page until 3 more have started and
	// are visible, so new rows keep appearing ahead of the cursor.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var during []string
	var startErr error
	started := make(chan struct{}, 10)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(started)
		cs := b.session(p, 1, "")
		for i := 0; i < 10; i++ {
			id, err := listStartAsync(cs, fmt.Sprintf("during-%02d", i), 150, nil)
			mu.Lock()
			if err != nil && startErr == nil {
				startErr = err
			}
			if id != "" {
				during = append(during, id)
			}
			mu.Unlock()
			started <- struct{}{}
		}
	}()
	waitMore := func(k int) {
		t.Helper()
		for ; k > 0; k-- {
			if _, ok := <-started; !ok {
				break
			}
		}
		mu.Lock()
		want := n + len(during)
		mu.Unlock()
		eventually(t, 30*time.Second, "jobs started during paging to be visible", func() bool {
			return len(listEverything(t, css, map[string]any{"page_size": 100})) >= want
		})
	}

	var rows []jobcore.JobSummary
	args := map[string]any{"page_size": 7}
	pages := 0
	for i := 0; ; i++ {
		page := listMustPage(t, css[i%2], args)
		pages++
		if len(page.Jobs) > 7 {
			t.Fatalf("page %d has %d rows, page_size 7", pages, len(page.Jobs))
		}
		rows = append(rows, page.Jobs...)
		if page.NextCursor == "" {
			break
		}
		args = map[string]any{"page_size": 7, "cursor": page.NextCursor}
		waitMore(3)
	}
	wg.Wait()
	if startErr != nil {
		t.Fatal(startErr)
	}

	seen := map[string]int{}
	for _, r := range rows {
		seen[r.JobID]++
		if r.Owner != "ana" || !strings.HasPrefix(r.JobID, p.tenant+"/eval/") || r.Handle == "" {
			t.Errorf("bad row %+v", r)
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s listed %d times", id, c)
		}
	}
	for _, id := range before {
		if seen[id] != 1 {
			t.Errorf("pre-existing job %s listed %d times", id, seen[id])
		}
	}
	// Newest first: the pre-existing jobs (all running, started one after another) come in
	// reverse start order.
	var order []string
	for _, r := range rows {
		if slices.Contains(before, r.JobID) {
			order = append(order, r.JobID)
		}
	}
	want := slices.Clone(before)
	slices.Reverse(want)
	if !slices.Equal(order, want) {
		t.Errorf("pre-existing jobs not newest first:\n got %v\nwant %v", order, want)
	}
	t.Logf("%d pages, %d rows (%d started during paging, %d of them listed)", pages, len(rows), len(during),
		len(rows)-n)

	// Once visibility caught up, a fresh traversal sees all 35 exactly once.
	waitListed(t, css[0], nil, append(slices.Clone(before), during...))
}

// TestListJobs_Scopes: an owner sees only their jobs, jobs:admin the whole tenant, and no
// one ever sees another tenant's jobs.
func TestListJobs_Scopes(t *testing.T) {
	b := setup(t, setupOpts{noWorker: true})
	tenant, other := listTenant(), listTenant()
	pAna := principal{tenant, "ana", listRW}
	pBo := principal{tenant, "bo", listRW}
	pOps := principal{tenant, "ops", listAdminRead}
	pAdminOnly := principal{tenant, "root", []authz.Scope{authz.ScopeAdmin}}
	pGus := principal{other, "ana", listRW} // same sub, other tenant
	csAna, csBo, csOps, csGus := b.session(pAna, 0, ""), b.session(pBo, 1, ""), b.session(pOps, 0, ""), b.session(pGus, 1, "")

	var anaIDs, boIDs []string
	for i := 0; i < 2; i++ {
		anaIDs = append(anaIDs, listStart(t, csAna, fmt.Sprintf("ana-%d", i), 1, nil).JobID)
		boIDs = append(boIDs, listStart(t, csBo, fmt.Sprintf("bo-%d", i), 1, nil).JobID)
	}
	gusID := listStart(t, csGus, "ana-0", 1, nil).JobID // same key as ana's first job

	all := append(slices.Clone(anaIDs), boIDs...)
	rows := waitListed(t, csOps, nil, all)
	for _, r := range rows {
		if r.Status != workflows.StatusQueued || r.Kind != "eval" || r.Progress.Total != 1 || r.UIURL == "" || r.PollAfterMS == 0 {
			t.Errorf("row %+v", r)
		}
	}
	waitListed(t, csAna, nil, anaIDs)
	waitListed(t, csBo, nil, boIDs)
	waitListed(t, csGus, nil, []string{gusID})
	waitListed(t, b.session(pAdminOnly, 1, ""), nil, all)
	// jobs:read without jobs:write lists the same own jobs.
	waitListed(t, b.session(principal{tenant, "ana", []authz.Scope{authz.ScopeRead}}, 0, ""), nil, anaIDs)

	// Filters narrow; export has no jobs yet.
	waitListed(t, csOps, map[string]any{"kind": "eval"}, all)
	waitListed(t, csOps, map[string]any{"kind": "export"}, nil)
	waitListed(t, csOps, map[string]any{"status": "succeeded"}, nil)

	// Row handles work with get_eval, for the owner (and with the owner's policy only).
	for _, r := range listMustPage(t, csAna, nil).Jobs {
		v := mustView(t, call(t, csAna, "get_eval", map[string]any{"handle": r.Handle}))
		if v.JobID != r.JobID || v.Status != r.Status || v.Owner != r.Owner {
			t.Errorf("get_eval %+v disagrees with row %+v", v, r)
		}
		mustErr(t, call(t, csBo, "get_eval", map[string]any{"handle": r.Handle}), jobcore.CodeNotFound)
		mustErr(t, call(t, csGus, "get_eval", map[string]any{"handle": r.Handle}), jobcore.CodeNotFound)
	}

	// No list scope at all: HTTP 403 before the tool runs.
	csSteward := b.session(principal{tenant, "steward", []authz.Scope{authz.ScopeApprove}}, 0, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := csSteward.CallTool(ctx, &mcp.CallToolParams{Name: "list_jobs", Arguments: map[string]any{}}); err == nil {
		t.Error("list_jobs with only jobs:approve: want an HTTP 403 error")
	}

	// Invalid arguments name the field; nothing hostile reaches a query.
	for _, tc := range []struct {
		args  map[string]any
		field string
	}{
		{map[string]any{"kind": "Eval"}, "kind"},
		{map[string]any{"kind": "eval' OR JobTenant != '"}, "kind"},
		{map[string]any{"status": "done"}, "status"},
		{map[string]any{"status": "running' OR 1=1 --"}, "status"},
		{map[string]any{"page_size": 101}, "page_size"},
		{map[string]any{"page_size": -1}, "page_size"},
		{map[string]any{"page_size": "7"}, "page_size"},
		{map[string]any{"tenant": other}, "tenant"},
		{map[string]any{"owner": "bo"}, "owner"},
	} {
		te := mustListErr(t, csAna, tc.args, jobcore.CodeInvalidArgument)
		if !strings.HasPrefix(te.Message, tc.field+":") {
			t.Errorf("%v: message %q does not name %s", tc.args, te.Message, tc.field)
		}
	}
}

// TestListJobs_CursorMisuse: a cursor is a capability for one traversal by one caller.
func TestListJobs_CursorMisuse(t *testing.T) {
	b := setup(t, setupOpts{noWorker: true})
	tenant := listTenant()
	pAna := principal{tenant, "ana", listRW}
	csAna := b.session(pAna, 0, "")
	var want []string
	for i := 0; i < 3; i++ {
		want = append(want, listStart(t, csAna, fmt.Sprintf("k%d", i), 1, nil).JobID)
	}
	waitListed(t, csAna, nil, want)

	first := listMustPage(t, csAna, map[string]any{"page_size": 1})
	c := first.NextCursor
	if len(first.Jobs) != 1 || c == "" {
		t.Fatalf("first page: %d rows, cursor %q", len(first.Jobs), c)
	}
	if !strings.HasPrefix(c, handle.CursorPrefix+".") {
		t.Fatalf("cursor %q is not a sealed cursor", c)
	}
	args := func(extra map[string]any) map[string]any {
		a := map[string]any{"page_size": 1, "cursor": c}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}
	// The rightful use works, on either replica, more than once (a cursor is a position).
	for i := 0; i < 2; i++ {
		p := listMustPage(t, b.session(pAna, i, ""), args(nil))
		if len(p.Jobs) != 1 || p.Jobs[0].JobID == first.Jobs[0].JobID {
			t.Fatalf("second page via replica %d: %v", i, listIDs(p.Jobs))
		}
	}
	// Same principal with other scopes that do not widen the listing: still the same traversal.
	listMustPage(t, b.session(principal{tenant, "ana", []authz.Scope{authz.ScopeRead}}, 1, ""), args(nil))

	invalid := func(name string, cs *mcp.ClientSession, a map[string]any) {
		t.Helper()
		out, te := listCall(t, cs, a)
		switch {
		case te == nil:
			t.Errorf("%s: want cursor_invalid, got a page of %d rows", name, len(out.Jobs))
		case te.Code != jobcore.CodeCursorInvalid:
			t.Errorf("%s: want cursor_invalid, got %s: %s", name, te.Code, te.Message)
		case te.Retryable:
			t.Errorf("%s: cursor_invalid must not be retryable", name)
		}
	}
	// Other principals.
	invalid("other sub", b.session(principal{tenant, "bo", listRW}, 0, ""), args(nil))
	invalid("admin of the tenant", b.session(principal{tenant, "ops", listAdminRead}, 1, ""), args(nil))
	invalid("ana with jobs:admin (tenant-wide listing)", b.session(principal{tenant, "ana", listAdminRead}, 0, ""), args(nil))
	invalid("same sub, other tenant", b.session(principal{listTenant(), "ana", listRW}, 0, ""), args(nil))
	// Other filters.
	invalid("status added", csAna, args(map[string]any{"status": "queued"}))
	invalid("kind added", csAna, args(map[string]any{"kind": "eval"}))
	invalid("page_size 2", csAna, args(map[string]any{"page_size": 2}))
	invalid("page_size omitted", csAna, map[string]any{"cursor": c})
	// Tampered and truncated.
	for i, pos := range []int{len(handle.CursorPrefix) + 4, len(c) / 2, len(c) - 3} {
		bs := []byte(c)
		if bs[pos] == 'A' {
			bs[pos] = 'B'
		} else {
			bs[pos] = 'A'
		}
		invalid(fmt.Sprintf("tampered #%d", i), csAna, args(map[string]any{"cursor": string(bs)}))
	}
	invalid("truncated", csAna, args(map[string]any{"cursor": c[:len(c)-1]}))
	invalid("truncated to half", csAna, args(map[string]any{"cursor": c[:len(c)/2]}))
	invalid("garbage", csAna, args(map[string]any{"cursor": "page_2"}))
	invalid("a handle", csAna, args(map[string]any{"cursor": first.Jobs[0].Handle}))

	// Sealed with the service's keys but for another tool.
	cur, err := b.keys.OpenCursor(c, time.Now())
	must(t, err)
	other := cur
	other.Tool = "list_exports"
	invalid("other tool", csAna, args(map[string]any{"cursor": b.keys.SealCursor(other)}))

	// Expired: the same cursor re-sealed with an expiry in the past.
	exp := cur
	exp.Expiry = time.Now().Add(-time.Minute)
	expired := b.keys.SealCursor(exp)
	te := mustListErr(t, csAna, args(map[string]any{"cursor": expired}), jobcore.CodeCursorExpired)
	if !strings.Contains(te.Message, "first page") || !strings.Contains(te.Message, "without cursor") {
		t.Errorf("cursor_expired message %q does not say to restart from the first page without cursor", te.Message)
	}
	// An expired cursor of someone else is cursor_invalid (binding is checked first).
	invalid("expired, other sub", b.session(principal{tenant, "bo", listRW}, 1, ""), args(map[string]any{"cursor": expired}))
	invalid("expired, other filters", csAna, args(map[string]any{"cursor": expired, "status": "queued"}))
}

// TestListJobs_StatusMatchesGetEval: after each transition the job is found under the
// matching status filter, its row status equals get_eval's, and other filters miss it.
func TestListJobs_StatusMatchesGetEval(t *testing.T) {
	b := setup(t)
	tenant := listTenant()
	p := principal{tenant, "ana", listRW}
	cs := b.session(p, 0, "")

	check := func(h string, want workflows.Status) {
		t.Helper()
		v := waitStatus(t, cs, h, want, 60*time.Second)
		eventually(t, 30*time.Second, fmt.Sprintf("%s listed as %s", v.JobID, want), func() bool {
			rows := listEverything(t, []*mcp.ClientSession{cs}, map[string]any{"status": string(want)})
			for _, r := range rows {
				if r.JobID == v.JobID {
					return r.Status == want && r.Status == v.Status
				}
			}
			return false
		})
		for _, s := range []workflows.Status{workflows.StatusQueued, workflows.StatusRunning, workflows.StatusAwaitingInput,
			workflows.StatusSucceeded, workflows.StatusFailed, workflows.StatusCancelling, workflows.StatusCancelled} {
			if s == want {
				continue
			}
			for _, r := range listEverything(t, []*mcp.ClientSession{cs}, map[string]any{"status": string(s)}) {
				if r.JobID == v.JobID {
					t.Errorf("%s (%s) also listed under status %s", v.JobID, want, s)
				}
			}
		}
		// Unfiltered, the row agrees too.
		for _, r := range listEverything(t, []*mcp.ClientSession{cs}, nil) {
			if r.JobID == v.JobID && r.Status != want {
				t.Errorf("%s: unfiltered row status %s, get_eval %s", v.JobID, r.Status, want)
			}
		}
	}

	// awaiting_input, then rejected → cancelled.
	wait := listStart(t, cs, "wait", 150, map[string]any{"episode_ms": 0})
	check(wait.Handle, workflows.StatusAwaitingInput)
	v := mustView(t, call(t, cs, "get_eval", map[string]any{"handle": wait.Handle}))
	rows := listMustPage(t, cs, map[string]any{"status": "awaiting_input"}).Jobs
	if len(rows) != 1 || rows[0].NeedsInput == nil || rows[0].NeedsInput.InputID != v.NeedsInput.InputID ||
		rows[0].NeedsInput.ScopeDigest != v.NeedsInput.ScopeDigest {
		t.Fatalf("awaiting_input row lacks needs_input: %+v", rows)
	}

	// running (slow episodes, one at a time), then cancelled.
	slow := listStart(t, cs, "slow", 20, map[string]any{"episode_ms": 60000, "fail_rate": 0})
	check(slow.Handle, workflows.StatusRunning)

	// succeeded and failed.
	ok := listStart(t, cs, "ok", 2, map[string]any{"episode_ms": 0, "fail_rate": 0})
	check(ok.Handle, workflows.StatusSucceeded)
	bad := listStart(t, cs, "bad", 2, map[string]any{"episode_ms": 0, "fail_rate": 1})
	check(bad.Handle, workflows.StatusFailed)
	if r := listMustPage(t, cs, map[string]any{"status": "failed"}).Jobs; len(r) != 1 || r[0].Error == nil || r[0].Error.Code != workflows.ErrCodeAllEpisodesFailed {
		t.Errorf("failed row: %+v", r)
	}

	mustView(t, call(t, cs, "cancel_eval", map[string]any{"handle": slow.Handle}))
	check(slow.Handle, workflows.StatusCancelled)
	mustView(t, call(t, cs, "resume_eval", map[string]any{"handle": wait.Handle, "input_id": v.NeedsInput.InputID,
		"scope_digest": v.NeedsInput.ScopeDigest, "decision": "reject"}))
	check(wait.Handle, workflows.StatusCancelled)

	// The Web UI saved queries of workflows/README.md "Debug a job" are accepted by the server and find what they say.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vis := func(q string) []string {
		t.Helper()
		resp, err := b.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: q})
		must(t, err)
		var out []string
		for _, e := range resp.GetExecutions() {
			out = append(out, e.GetExecution().GetWorkflowId())
		}
		return out
	}
	for _, q := range []string{
		"JobTenant = 'acme' AND JobKind = 'export' AND ExecutionStatus = 'Failed'",
		"JobTenant = 'acme' AND JobKind = 'export' AND ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut')",
		"JobTenant = 'acme' AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'",
	} {
		vis(q)
	}
	if got := vis(fmt.Sprintf("JobTenant = '%s' AND JobKind = 'eval' AND ExecutionStatus = 'Failed'", tenant)); !slices.Equal(got, []string{bad.JobID}) {
		t.Errorf("failed evals query: %v", got)
	}
	if got := vis(fmt.Sprintf("JobTenant = '%s' AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'", tenant)); len(got) != 0 {
		t.Errorf("awaiting approval query after reject: %v", got)
	}
	again := listStart(t, cs, "wait2", 150, nil)
	eventually(t, 30*time.Second, "awaiting approval query finds the job", func() bool {
		got := vis(fmt.Sprintf("JobTenant = '%s' AND ExecutionStatus = 'Running' AND JobStatus = 'awaiting_input'", tenant))
		return slices.Equal(got, []string{again.JobID})
	})
}

// TestListJobs_HostileSubjects: subjects are printable UTF-8 and may hold quotes; each is
// quoted so it matches exactly its own jobs and nothing else. Subjects Temporal's visibility
// cannot match (a backslash or double quote anywhere, a single quote first or last; see
// frontend.ownerMatchable) get forbidden for their own listing, never a wrong answer.
func TestListJobs_HostileSubjects(t *testing.T) {
	b := setup(t, setupOpts{noWorker: true})
	tenant := listTenant()
	subs := []string{"o'brien", `x' OR JobOwner != 'y`, "a''b", "über 名前", "o", "%",
		`back\slash`, `trail\`, `dq"x`, `x\' OR 1=1 OR JobOwner = \'`, "''", "'lead", "trail'"}
	jobs := map[string]string{}
	for i, s := range subs {
		cs := b.session(principal{tenant, s, listRW}, i%2, "")
		jobs[s] = listStart(t, cs, fmt.Sprintf("k%d", i), 1, nil).JobID
	}
	var all []string
	for _, s := range subs {
		all = append(all, jobs[s])
		cs := b.session(principal{tenant, s, listRW}, 0, "")
		if strings.ContainsAny(s, `\"`) || strings.HasPrefix(s, "'") || strings.HasSuffix(s, "'") {
			mustListErr(t, cs, nil, jobcore.CodeForbidden)
			continue
		}
		rows := waitListed(t, cs, nil, []string{jobs[s]})
		if rows[0].Owner != s {
			t.Errorf("owner %q, want %q", rows[0].Owner, s)
		}
	}
	rows := waitListed(t, b.session(principal{tenant, "ops", listAdminRead}, 0, ""), nil, all)
	for _, r := range rows {
		if jobs[r.Owner] != r.JobID {
			t.Errorf("row %s has owner %q", r.JobID, r.Owner)
		}
	}
	// A tenant-wide listing does not depend on the subject.
	waitListed(t, b.session(principal{tenant, `admin\"x`, listAdminRead}, 1, ""), nil, all)
}

// TestListJobs_Order documents the order the SQL visibility store gives (it supports no ORDER
// BY): open executions first, newest start first; then closed ones, most recently closed first.
func TestListJobs_Order(t *testing.T) {
	b := setup(t)
	p := principal{listTenant(), "ana", listRW}
	cs := b.session(p, 0, "")
	fast := map[string]any{"episode_ms": 0, "fail_rate": 0}
	a := listStart(t, cs, "a-finishes-first", 1, fast)
	waitStatus(t, cs, a.Handle, workflows.StatusSucceeded, 30*time.Second)
	w1 := listStart(t, cs, "w1-waits", 150, nil)
	c := listStart(t, cs, "c-finishes-last", 1, fast)
	waitStatus(t, cs, c.Handle, workflows.StatusSucceeded, 30*time.Second)
	w2 := listStart(t, cs, "w2-waits", 150, nil)
	want := []string{w2.JobID, w1.JobID, c.JobID, a.JobID}
	eventually(t, 30*time.Second, "listing order", func() bool {
		rows := listMustPage(t, cs, nil).Jobs
		return slices.Equal(listIDs(rows), want)
	})
	// Paging by one gives the same order.
	if got := listIDs(listEverything(t, []*mcp.ClientSession{cs}, map[string]any{"page_size": 1})); !slices.Equal(got, want) {
		t.Errorf("paged by one: %v, want %v", got, want)
	}
}
