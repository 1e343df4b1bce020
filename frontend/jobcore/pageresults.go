package jobcore

import (
	"context"
	"strings"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/pages"
	"github.com/jobgate/jobgate/workflows"
)

// The kinds' results as the job page shows them (servedKind.pageResult).

// exportPageResult is a succeeded export's result on the job page: its manifest, who approved
// it, and a download link bound to p.
func exportPageResult(f *Core, k *exportKind) func(ctx context.Context, p authz.Principal, j *jobstore.Job) pages.Result {
	return func(ctx context.Context, p authz.Principal, j *jobstore.Job) pages.Result {
		var res workflows.ExportResult
		if err := f.readResult(ctx, j, &res); err != nil {
			return pages.Result{}
		}
		m := res.Manifest
		out := pages.Result{Fields: []pages.Field{{Label: "Rows", Value: pages.GroupDigits(int64(m.Rows))}, {Label: "Format", Value: m.Format},
			{Label: "Columns", Value: strings.Join(m.Columns, ", ")}, {Label: "File", Value: m.FileName},
			{Label: "SHA-256", Value: m.SHA256, Code: true}, {Label: "Available until", Value: pages.When(m.ExpiresAt)}}}
		if res.Decision != nil {
			out.Fields = append(out.Fields, DecisionFields(res.Decision)...)
		} else if res.ApprovedBy != "" {
			out.Fields = append(out.Fields, pages.Field{Label: "Approved by", Value: res.ApprovedBy})
		}
		out.Download = pageDownloadPath(f, k, p, j, m.SHA256, m.ExpiresAt)
		return out
	}
}

// evalPageResult is a succeeded eval's result on the job page: the decision that let it run,
// if any (an eval has no manifest: its record stays in the job's history).
func evalPageResult(f *Core) func(ctx context.Context, p authz.Principal, j *jobstore.Job) pages.Result {
	return func(ctx context.Context, p authz.Principal, j *jobstore.Job) pages.Result {
		var res workflows.EvalResult
		if err := f.readResult(ctx, j, &res); err != nil || res.Decision == nil {
			return pages.Result{}
		}
		fields := DecisionFields(res.Decision)
		if n := len(fields) - 1; fields[n].Label == "Record" {
			fields[n].Value = "sealed; kept in the job's history"
		}
		return pages.Result{Fields: fields}
	}
}

// pageDownloadPath seals a download link to job j's artifact (digest, expiring at expires) for
// p, or "" when p may not download it or there is none.
func pageDownloadPath(f *Core, k *exportKind, p authz.Principal, j *jobstore.Job, digest string, expires time.Time) string {
	now := f.Opts.Now()
	if k.opts.Artifacts == nil || !now.Before(expires) || authz.Decide(p, authz.ActionDownload, j.PolicyJob()) != authz.Allow {
		return ""
	}
	link, _ := f.downloadLink(pages.PathDownload, p, j, digest, now, k.opts.DownloadTTL)
	return link
}

// decisionFields are the decision record in words for the job page: who answered (and who
// vouched for them), when and how, what they were shown, their comment, and where the sealed
// copy is.
func DecisionFields(d *workflows.DecisionRecord) []pages.Field {
	who := d.By
	if d.Name != "" {
		who = d.Name + " (" + d.By + ")"
	}
	if d.Email != "" {
		who += " <" + d.Email + ">"
	}
	if d.Issuer != "" {
		who += ", signed in at " + d.Issuer
	}
	how := "via " + d.Surface
	if d.SignedInWith != "" {
		how += " (" + d.SignedInWith + ")"
	}
	if !d.AuthTime.IsZero() {
		how += ", authenticated " + pages.When(d.AuthTime)
	}
	if len(d.AMR) > 0 {
		how += " with " + strings.Join(d.AMR, ", ")
	}
	verb := map[string]string{workflows.DecisionApprove: "Approved by", workflows.DecisionReject: "Rejected by"}[d.Decision]
	if verb == "" {
		verb = "Answered by"
	}
	rows := []pages.Field{{Label: verb, Value: who}, {Label: "Decided", Value: pages.When(d.At) + ", " + how}}
	what, comment, scope, seal := "What was approved", "Approver's comment", "Approved scope",
		"sealed; check it with jobgate verify on the export's manifest.json"
	if d.Decision == workflows.DecisionReject { // no artifact, no manifest: the record is in the job's history
		what, comment, scope, seal = "What was rejected", "Reason given", "Rejected scope", "sealed; kept in the job's history"
	}
	if d.Prompt != "" {
		rows = append(rows, pages.Field{Label: what, Value: strings.ReplaceAll(d.Prompt, "**", "")})
	}
	if d.Comment != "" {
		rows = append(rows, pages.Field{Label: comment, Value: d.Comment})
	}
	rows = append(rows, pages.Field{Label: scope, Value: d.ScopeDigest})
	if d.Seal != "" {
		rows = append(rows, pages.Field{Label: "Record", Value: seal})
	}
	return rows
}
