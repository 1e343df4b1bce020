package tests

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/workflows"
)

// TestListApprovals_HiddenJobsLeaveNoTrace: an approver's list_approvals over a tenant where
// waiting jobs it may not answer (others' owner-only requests, its own exports without
// self-approval) are interleaved with answerable ones. The query selects only answerable rows:
// every page is full until the last, the number of pages is exactly ceil(answerable/page_size),
// and no cursor decodes to anything readable — no workflow ID, run ID, tenant, subject or JSON.
func TestListApprovals_HiddenJobsLeaveNoTrace(t *testing.T) {
	t.Parallel()
	db := demoDB(t)
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t,
		demoDataset(db, nil), // sensitive email, four eyes
		demoDataset(db, func(d *contract.Dataset) { d.Name, d.AllowSelfApproval = "customers_self", true }))})
	tenant := listTenant()
	anaT := principal{tenant, "ana", listRW}
	boT := principal{tenant, "bo", listRW}
	carl := principal{tenant, "carl", []authz.Scope{authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove}}
	opsT := principal{tenant, "ops", listAdminRead}
	cs := map[string]*mcp.ClientSession{"ana": b.session(anaT, 0, ""), "bo": b.session(boT, 1, ""), "carl": b.session(carl, 0, "")}

	export := func(who, dataset string) *jobcore.JobView {
		return mustView(t, call(t, cs[who], "start_export", map[string]any{"idempotency_key": uniqueKey(t), "dataset": dataset,
			"format": "csv", "columns": []string{"id", "email"}, "purpose": "list_approvals test"}))
	}
	ownerEval := func(who string) *jobcore.JobView { // > 100 episodes: asks its owner first
		return mustView(t, call(t, cs[who], "start_eval", startArgs(uniqueKey(t), 101, map[string]any{"episode_ms": 30000})))
	}
	// Started interleaved, so hidden rows sit between answerable ones in visibility order.
	type started struct {
		v          *jobcore.JobView
		owner      string
		answerable bool
	}
	var jobs []started
	add := func(v *jobcore.JobView, owner string, answerable bool) {
		jobs = append(jobs, started{v, owner, answerable})
	}
	add(export("ana", "customers"), "ana", true)
	add(ownerEval("ana"), "ana", false)             // the owner's to answer
	add(export("carl", "customers"), "carl", false) // carl's own, four eyes
	add(export("bo", "customers"), "bo", true)
	add(export("carl", "customers"), "carl", false)
	add(export("carl", "customers_self"), "carl", true) // self-approval allowed
	add(ownerEval("bo"), "bo", false)
	add(export("ana", "customers"), "ana", true)
	add(export("carl", "customers"), "carl", false)
	add(export("bo", "customers_self"), "bo", true)
	add(ownerEval("ana"), "ana", false)
	add(export("bo", "customers"), "bo", true)
	add(export("carl", "customers_self"), "carl", true)

	var want, secrets []string
	for _, j := range jobs {
		get := "get_export"
		if strings.Contains(j.v.JobID, "/eval/") {
			get = "get_eval"
		}
		eventually(t, 30*time.Second, j.v.JobID+" awaiting input", func() bool {
			return mustView(t, call(t, cs[j.owner], get, map[string]any{"handle": j.v.Handle})).Status == workflows.StatusAwaitingInput
		})
		d, err := b.temporal.DescribeWorkflowExecution(context.Background(), j.v.JobID, "")
		must(t, err)
		secrets = append(secrets, j.v.JobID, d.GetWorkflowExecutionInfo().GetExecution().GetRunId())
		if j.answerable {
			want = append(want, j.v.JobID)
		}
	}
	slices.Sort(want)
	// Visibility is eventually consistent: wait until the tenant's admin sees all of them waiting.
	eventually(t, 30*time.Second, "all jobs awaiting_input in visibility", func() bool {
		rows := listEverything(t, []*mcp.ClientSession{b.session(opsT, 0, "")}, map[string]any{"status": "awaiting_input", "page_size": 100})
		return len(rows) == len(jobs)
	})

	const pageSize = 3
	secrets = append(secrets, tenant, "carl", "list_approvals", `"t":"`, `"s":"`, `"p":"`)
	var pages []*jobcore.ListJobsOut
	eventually(t, 30*time.Second, "list_approvals shows exactly the answerable jobs", func() bool {
		pages = nil
		var got []string
		args := map[string]any{"page_size": pageSize}
		for len(pages) < 50 {
			p := mustPage(t, cs["carl"], "list_approvals", args)
			pages = append(pages, p)
			for _, r := range p.Jobs {
				got = append(got, r.JobID)
			}
			if p.NextCursor == "" {
				break
			}
			args = map[string]any{"page_size": pageSize, "cursor": p.NextCursor}
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	})
	wantPages := (len(want) + pageSize - 1) / pageSize
	if len(pages) != wantPages {
		t.Errorf("%d pages for %d answerable jobs at page_size %d, want %d (hidden jobs are counted)", len(pages), len(want), pageSize, wantPages)
	}
	for i, p := range pages {
		if last := i == len(pages)-1; !last && len(p.Jobs) != pageSize {
			t.Errorf("page %d of %d has %d rows, want %d", i+1, len(pages), len(p.Jobs), pageSize)
		}
		if p.NextCursor == "" {
			continue
		}
		for _, blob := range cursorDecodings(p.NextCursor) {
			if json.Valid(blob) {
				t.Errorf("page %d: cursor decodes to JSON: %q", i+1, blob)
			}
			for _, s := range secrets {
				if bytes.Contains(blob, []byte(s)) {
					t.Errorf("page %d: cursor decodes to bytes holding %q", i+1, s)
				}
			}
		}
	}

	// JobAnswerer follows the request: set while it is open, gone once it is answered.
	first := jobs[0].v // ana's export, answerable by carl
	answerer := func() string {
		d, err := b.temporal.DescribeWorkflowExecution(context.Background(), first.JobID, "")
		must(t, err)
		p := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[workflows.SAJobAnswerer.GetName()]
		if p == nil {
			return ""
		}
		return string(p.GetData())
	}
	if got := answerer(); got != `"`+workflows.AnswererApprover+`"` {
		t.Fatalf("open approver request: JobAnswerer %s", got)
	}
	w := mustView(t, call(t, cs["ana"], "get_export", map[string]any{"handle": first.Handle}))
	mustView(t, exResume(t, cs["carl"], w, "reject"))
	eventually(t, 30*time.Second, "JobAnswerer cleared after the answer", func() bool { return answerer() == "" })
}

// cursorDecodings is every reading of a cursor an attacker would try: the string itself and
// each dot-separated part (and the whole) under every base64 alphabet that accepts it.
func cursorDecodings(c string) [][]byte {
	out := [][]byte{[]byte(c)}
	encs := []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding}
	for _, part := range append(strings.Split(c, "."), c) {
		for _, enc := range encs {
			if d, err := enc.DecodeString(part); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}
