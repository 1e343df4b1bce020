package jobcore

// Downloads: the short-lived links a job view carries to a succeeded job's bytes (an export's
// artifact, GET /artifacts/<token>; an eval's episode log, GET /episodes/<token>) and what every
// such route does before it serves them: open the link for the caller, find the job it names,
// refuse with the same bare 404 whatever is wrong, and set the headers of the answer.

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
	"go.uber.org/zap"
)

// downloadLink is p's link to the bytes of job j with digest: route (where they are served:
// <public base>/artifacts/, the pages' download path, …) followed by a download token sealed
// for p, valid for ttl (a kind's DownloadTTL option; DownloadTTLDefault when not positive) from
// now, to the second as sealed. It returns the link ("" if no token can be sealed) and its
// expiry.
func (f *Core) downloadLink(route string, p authz.Principal, j *jobstore.Job, digest string, now time.Time, ttl time.Duration) (string, time.Time) {
	if ttl <= 0 {
		ttl = DownloadTTLDefault
	}
	exp := now.Add(ttl).Truncate(time.Second)
	tok := f.Opts.Keys.SealDownload(handle.Download{Tenant: j.Tenant, WorkflowID: j.ID, Subject: p.Subject,
		Digest: digest, Expiry: exp})
	if tok == "" {
		return "", exp
	}
	return route + url.PathEscape(tok), exp
}

// publicBase is scheme://host of the resource URI: where /artifacts and /episodes are served.
func (f *Core) publicBase() string {
	u, err := url.Parse(f.Opts.ResourceURI)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// A download is a download request that passed the checks every download shares
// (openDownloadJob): its link, the job the link names, and its two ways to answer a failure.
type download struct {
	link handle.Download
	job  *jobstore.Job
	// notFound is the bare 404 of every refusal, the reason only in the log.
	notFound func(why string)
	// unavailable is the 503 of a store that did not answer (see downloadUnavailable).
	unavailable func(what string, err error)
}

// openDownloadJob is every download's start (exports' and episode logs'): the request's link
// (openDownload), then the job it names, which must be p's tenant's, of kind, succeeded and
// downloadable by p. msg names the download in the log ("download", "episodes download"), store
// the store a 503 names. On false it has answered (the bare 404, or a 503 when the job store did
// not answer).
func openDownloadJob(f *Core, w http.ResponseWriter, r *http.Request, p authz.Principal, ok bool, kind, msg, store string) (download, bool) {
	notFound := refuseDownload(f, w, r, p, msg+" refused")
	d, opened := openDownload(f, r, p, ok, notFound)
	if !opened {
		return download{}, false
	}
	dl := download{link: d, notFound: notFound, unavailable: downloadUnavailable(f, w, r, msg, d.WorkflowID, store)}
	j, err := f.Describe(r.Context(), d.WorkflowID)
	if err != nil {
		var te *ToolError
		if errors.As(err, &te) && te.Code == CodeNotFound {
			notFound("no such job")
		} else {
			dl.unavailable("describe", err)
		}
		return download{}, false
	}
	if j.Tenant != p.Tenant || j.Kind != kind || j.Status() != workflows.StatusSucceeded ||
		authz.Decide(p, authz.ActionDownload, j.PolicyJob()) != authz.Allow {
		notFound("job not downloadable by caller")
		return download{}, false
	}
	dl.job = j
	return dl, true
}

// downloadUnavailable answers a download whose store (its name in the answer: "job store", …)
// did not answer: a 503 saying to retry, with the error in the log as "<msg>: <what>".
func downloadUnavailable(f *Core, w http.ResponseWriter, r *http.Request, msg, jobID, store string) func(what string, err error) {
	return func(what string, err error) {
		f.Logger(r.Context()).Error(msg+": "+what, zap.String("job_id", jobID), zap.Error(err))
		http.Error(w, "the "+store+" is unreachable; retry shortly", http.StatusServiceUnavailable)
	}
}

// setDownloadHeaders sets the headers of a download's answer: an attachment named name of
// mediaType, never cached, whose RFC 9530 Repr-Digest and ETag are sum's (hex SHA-256, the
// digest the link binds). It sets none if sum is not hex.
func setDownloadHeaders(w http.ResponseWriter, name, mediaType, sum string) error {
	raw, err := hex.DecodeString(sum)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", mediaType)
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	h.Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(raw)+":") // RFC 9530
	h.Set("ETag", strconv.Quote(sum))
	h.Set("Cache-Control", "private, no-store")
	return nil
}

// refuseDownload answers a refused download: a bare 404, whatever the reason, with the reason
// only in the log.
func refuseDownload(f *Core, w http.ResponseWriter, r *http.Request, p authz.Principal, msg string) func(why string) {
	return func(why string) {
		f.Logger(r.Context()).Info(msg, zap.String("tenant", p.Tenant), zap.String("sub", p.Subject), zap.String("why", why))
		http.NotFound(w, r)
	}
}

// openDownload opens the request's download token for principal p (ok: there is one): the
// link's tenant and principal must be p's (or p a tenant admin), and it must not have expired.
// Every refusal goes to notFound; opened is false then. Export and episode-log downloads share it.
func openDownload(f *Core, r *http.Request, p authz.Principal, ok bool, notFound func(string)) (d handle.Download, opened bool) {
	if !ok {
		notFound("no principal")
		return d, false
	}
	d, err := f.Opts.Keys.OpenDownload(r.PathValue("token"), f.Opts.Now())
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
