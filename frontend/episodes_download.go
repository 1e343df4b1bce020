package frontend

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// An eval's episode log as one download: get_eval's episodes_url, GET /episodes/<token>. The
// token is an export download's (handle.Download: tenant, job, principal, the SHA-256 of the
// bytes, a short expiry) and the rules are the export's: the request must also carry that
// principal's bearer token or a tenant admin's, and anything wrong is the same bare 404. A
// token of one route never serves on the other: each checks the job's kind, and the digest
// names other bytes.

// episodesLink adds the episode log and its download link for p to a succeeded eval's view.
func (k *evalKind) episodesLink(f *Frontend, p authz.Principal, j *jobstore.Job, log *contract.EpisodeSegment, v *EvalResultView) {
	if log == nil {
		return
	}
	v.EpisodesCount, v.EpisodesSHA256 = log.Count, log.SHA256
	if k.opts.Artifacts == nil || authz.Decide(p, authz.ActionDownload, j.PolicyJob()) != authz.Allow {
		return
	}
	exp := f.opts.Now().Add(k.opts.DownloadTTL).Truncate(time.Second)
	tok := f.opts.Keys.SealDownload(handle.Download{Tenant: j.Tenant, WorkflowID: j.ID, Subject: p.Subject,
		Digest: log.SHA256, Expiry: exp})
	if tok != "" {
		v.EpisodesURL = f.publicBase() + "/episodes/" + url.PathEscape(tok)
		v.EpisodesURLExpiresAt = &exp
	}
}

// downloadEpisodes serves GET /episodes/{token} behind the bearer middleware.
func (k *evalKind) downloadEpisodes(f *Frontend, w http.ResponseWriter, r *http.Request) {
	p, ok := principalFromRequest(r)
	notFound := refuseDownload(f, w, r, p, "episodes download refused")
	d, opened := openDownload(f, r, p, ok, notFound)
	if !opened {
		return
	}
	unavailable := func(what string, err error) {
		f.logger(r.Context()).Error("episodes download: "+what, zap.String("job_id", d.WorkflowID), zap.Error(err))
		http.Error(w, "the job store or artifact store is unreachable; retry shortly", http.StatusServiceUnavailable)
	}
	j, err := f.describe(r.Context(), d.WorkflowID)
	if err != nil {
		var te *ToolError
		if errors.As(err, &te) && te.Code == CodeNotFound {
			notFound("no such job")
			return
		}
		unavailable("describe", err)
		return
	}
	if j.Tenant != p.Tenant || j.Kind != workflows.KindEval || j.Status() != workflows.StatusSucceeded ||
		authz.Decide(p, authz.ActionDownload, j.PolicyJob()) != authz.Allow || k.opts.Artifacts == nil {
		notFound("job not downloadable by caller")
		return
	}
	var res workflows.EvalResult
	if err := f.readResult(r.Context(), j, &res); err != nil {
		unavailable("read result", err)
		return
	}
	if res.EpisodeLog == nil || res.EpisodeLog.SHA256 != d.Digest {
		notFound("link names other bytes")
		return
	}
	rd, err := k.opts.Artifacts.OpenEpisodeLog(r.Context(), j.ID, j.FirstRunID)
	if errors.Is(err, contract.ErrArtifactGone) {
		notFound("episode log gone")
		return
	}
	if err != nil {
		unavailable("open episode log", err)
		return
	}
	defer rd.Close()
	sum, err := hex.DecodeString(d.Digest)
	if err != nil {
		notFound("bad digest")
		return
	}
	name := "episodes.jsonl"
	h := w.Header()
	h.Set("Content-Type", "application/jsonl")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	h.Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum)+":") // RFC 9530
	h.Set("ETag", strconv.Quote(d.Digest))
	h.Set("Cache-Control", "private, no-store")
	f.logger(r.Context()).Info("episodes download", zap.String("tenant", p.Tenant), zap.String("sub", p.Subject), zap.String("job_id", j.ID))
	http.ServeContent(w, r, name, j.ClosedAt, rd)
}
