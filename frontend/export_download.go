package frontend

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"mime"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

// download serves the export kind's GET /artifacts/<token> behind the bearer middleware (a missing or invalid
// bearer token is a 401 challenge, which says nothing about any artifact). Everything else
// that is wrong — tampered or expired link, another tenant, another principal, a job the
// caller may not read, a link to other bytes — is the same bare 404; an artifact past its
// retention is 410.
func (k *exportKind) download(f *Frontend, w http.ResponseWriter, r *http.Request) {
	p, ok := principalFromRequest(r)
	k.serveDownload(f, w, r, p, ok)
}

// serveDownload is download for principal p (ok: there is one), however p was authenticated:
// the bearer token of /artifacts, or the session of the pages' /jobs/download (the same rule
// and the same bare 404s either way).
func (k *exportKind) serveDownload(f *Frontend, w http.ResponseWriter, r *http.Request, p authz.Principal, ok bool) {
	notFound := refuseDownload(f, w, r, p, "download refused")
	d, opened := openDownload(f, r, p, ok, notFound)
	if !opened {
		return
	}
	j, err := f.describe(r.Context(), d.WorkflowID)
	if err != nil {
		var te *ToolError
		if errors.As(err, &te) && te.Code == CodeNotFound {
			notFound("no such job")
			return
		}
		f.logger(r.Context()).Error("download: describe", zap.String("job_id", d.WorkflowID), zap.Error(err))
		http.Error(w, "the job store is unreachable; retry shortly", http.StatusServiceUnavailable)
		return
	}
	if j.Tenant != p.Tenant || j.Kind != workflows.KindExport || j.Status() != workflows.StatusSucceeded ||
		authz.Decide(p, authz.ActionDownload, j.PolicyJob()) != authz.Allow {
		notFound("job not downloadable by caller")
		return
	}
	var res workflows.ExportResult
	if err := f.readResult(r.Context(), j, &res); err != nil {
		f.logger(r.Context()).Error("download: read result", zap.String("job_id", j.ID), zap.Error(err))
		http.Error(w, "the job store is unreachable; retry shortly", http.StatusServiceUnavailable)
		return
	}
	m := res.Manifest
	if m.SHA256 != d.Digest {
		notFound("link names other bytes")
		return
	}
	gone := func() {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusGone)
		_, _ = w.Write([]byte("the artifact was deleted after its retention period\n"))
	}
	if !f.opts.Now().Before(m.ExpiresAt) {
		gone()
		return
	}
	if k.opts.Artifacts == nil {
		notFound("no artifact store")
		return
	}
	rd, err := k.opts.Artifacts.OpenArtifact(r.Context(), m)
	if errors.Is(err, contract.ErrArtifactGone) {
		gone()
		return
	}
	if err != nil {
		f.logger(r.Context()).Error("download: open artifact", zap.String("job_id", j.ID), zap.Error(err))
		http.Error(w, "the artifact store is unreachable; retry shortly", http.StatusServiceUnavailable)
		return
	}
	defer rd.Close()
	sum, err := hex.DecodeString(m.SHA256)
	if err != nil {
		f.logger(r.Context()).Error("download: manifest digest", zap.String("job_id", j.ID), zap.Error(err))
		http.Error(w, "bad manifest", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": m.FileName}))
	h.Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum)+":") // RFC 9530
	h.Set("ETag", strconv.Quote(m.SHA256))
	h.Set("Cache-Control", "private, no-store")
	f.logger(r.Context()).Info("download", zap.String("tenant", p.Tenant), zap.String("sub", p.Subject), zap.String("job_id", j.ID),
		zap.String("range", r.Header.Get("Range")))
	// ServeContent answers Range (206 with Content-Range) and sets Content-Length.
	http.ServeContent(w, r, m.FileName, m.CreatedAt, rd)
}

func principalFromRequest(r *http.Request) (authz.Principal, bool) {
	return principalFrom(auth.TokenInfoFromContext(r.Context()))
}

// refuseDownload answers a refused download: a bare 404, whatever the reason, with the reason
// only in the log.
func refuseDownload(f *Frontend, w http.ResponseWriter, r *http.Request, p authz.Principal, msg string) func(why string) {
	return func(why string) {
		f.logger(r.Context()).Info(msg, zap.String("tenant", p.Tenant), zap.String("sub", p.Subject), zap.String("why", why))
		http.NotFound(w, r)
	}
}

// openDownload opens the request's download token for principal p (ok: there is one): the
// link's tenant and principal must be p's (or p a tenant admin), and it must not have expired.
// Every refusal goes to notFound; opened is false then. Export and episode-log downloads share it.
func openDownload(f *Frontend, r *http.Request, p authz.Principal, ok bool, notFound func(string)) (d handle.Download, opened bool) {
	if !ok {
		notFound("no principal")
		return d, false
	}
	d, err := f.opts.Keys.OpenDownload(r.PathValue("token"), f.opts.Now())
	switch {
	case err != nil && !errors.Is(err, handle.ErrExpired):
		notFound("malformed link")
	case d.Tenant != p.Tenant:
		notFound("other tenant")
	case d.Subject != p.Subject && !authz.ListAll(p):
		notFound("other principal")
	case err != nil:
		notFound("link expired")
	default:
		return d, true
	}
	return d, false
}
