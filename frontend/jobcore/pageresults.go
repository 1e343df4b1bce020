package jobcore

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities/contract"
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
		if j.Status() != workflows.StatusSucceeded || f.readResult(ctx, j, &res) != nil {
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
		for _, part := range m.Parts {
			out.Parts = append(out.Parts, pages.Part{Part: part.Part, Rows: part.Rows, Bytes: part.Bytes, SHA256: part.SHA256})
		}
		return out
	}
}

// evalPageResult is an eval's page beyond its view: its episode log, drawn (while it runs
// too), and once it succeeded the decision that let it run, if any (an eval has no manifest:
// its record stays in the job's history).
func evalPageResult(f *Core, k *evalKind) func(ctx context.Context, p authz.Principal, j *jobstore.Job) pages.Result {
	return func(ctx context.Context, p authz.Principal, j *jobstore.Job) pages.Result {
		out := pages.Result{Episodes: k.pageEpisodes(ctx, f, j)}
		var res workflows.EvalResult
		if j.Status() != workflows.StatusSucceeded || f.readResult(ctx, j, &res) != nil || res.Decision == nil {
			return out
		}
		fields := DecisionFields(res.Decision)
		if n := len(fields) - 1; fields[n].Label == "Record" {
			fields[n].Value = "sealed; kept in the job's history"
		}
		out.Fields = fields
		return out
	}
}

// pageEpisodes reads the first pages.EpisodesShown episodes of j's log for its page, the way
// list_episodes reads them (the written segments, and the running segment from the workflow);
// nil when there is no artifact store, no episode yet or the log cannot be read (logged: the
// page shows the job without pictures).
func (k *evalKind) pageEpisodes(ctx context.Context, f *Core, j *jobstore.Job) *pages.Episodes {
	if k.opts.Artifacts == nil {
		return nil
	}
	srcs, err := k.episodeSources(ctx, f, j, !j.Status().Terminal(), episodePos{})
	out := &pages.Episodes{Total: j.Progress.Total}
	if err == nil {
		_, out.Cut, err = scanEpisodes(ctx, srcs, episodePos{}, episodesFilter{pageSize: pages.EpisodesShown}, func(o contract.EpisodeOutcome) {
			out.Outcomes = append(out.Outcomes, pages.Outcome{Status: o.Status, Score: o.Score})
		})
	}
	if err != nil {
		f.Logger(ctx).Warn("job page: reading the episode log", zap.String("job_id", j.ID), zap.Error(err))
		return nil
	}
	if len(out.Outcomes) == 0 && out.Total == 0 {
		return nil
	}
	return out
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
