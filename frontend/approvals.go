package frontend

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

const listApprovalsToolName = "list_approvals"

// ListApprovalsIn are list_approvals' arguments.
type ListApprovalsIn struct {
	Kind     string `json:"kind,omitempty" jsonschema:"only jobs of this kind (eval, export); omit for all kinds"`
	PageSize int    `json:"page_size,omitempty" jsonschema:"rows per page, 1-100 (default 20)"`
	Cursor   string `json:"cursor,omitempty" jsonschema:"next_cursor from the previous page, verbatim, with the same kind and page_size; omit for the first page"`
}

func (f *Frontend) listApprovalsTool() toolDef {
	return newTool(f, authz.ActionListApprovals, &mcp.Tool{
		Name:  listApprovalsToolName,
		Title: "List jobs awaiting my approval",
		Description: "For approvers (jobs:approve): your tenant's jobs whose open input request you may answer — waiting for an " +
			"approver other than their owner. Each row's needs_input says who asked (requested_by), what exactly is to be " +
			"approved (scope: dataset, columns, format, purpose …), its scope_digest and when it expires. Answer with resume_* " +
			"(input_id and scope_digest verbatim). Pages like list_jobs.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, f.listApprovals).enum("kind", workflows.KindNames()...).bounds("page_size", 1, ListPageSizeMax)
}

// listApprovals lists awaiting_input jobs of the tenant and keeps those the caller may answer.
// The query selects the tenant's waiting jobs; who may answer is in the memo, so rows are kept
// by the same policy the resume validator applies.
func (f *Frontend) listApprovals(ctx context.Context, p authz.Principal, in ListApprovalsIn) (*ListJobsOut, error) {
	if authz.Decide(p, authz.ActionListApprovals, authz.Job{}) != authz.Allow {
		return nil, toolErr(CodeForbidden, "listing approvals needs jobs:approve")
	}
	lf, err := parseListFilter(ListJobsIn{Kind: in.Kind, PageSize: in.PageSize, Status: string(workflows.StatusAwaitingInput)}, true)
	if err != nil {
		return nil, err
	}
	fp := lf.fingerprint() + "|approvals"
	var token []byte
	if in.Cursor != "" {
		if token, err = f.openListCursor(p, listApprovalsToolName, in.Cursor, fp); err != nil {
			return nil, err
		}
	}
	q, err := buildListQuery(p.Tenant, p.Subject, lf)
	if err != nil {
		return nil, fmt.Errorf("list_approvals query: %w", err)
	}
	return f.listPage(ctx, p, listApprovalsToolName, q, lf.pageSize, token, fp, func(j *job) bool {
		return j.needsInput != nil && j.needsInput.Approver == authz.ApproverApprover &&
			authz.Decide(p, authz.ActionResume, j.policyJob()) == authz.Allow
	})
}
