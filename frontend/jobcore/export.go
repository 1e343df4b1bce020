package jobcore

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"go.uber.org/zap"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
)

// Export limits. The formats are contract.Formats.
const (
	purposeMax = 500
	columnsMax = 200
)

// StartExportIn are start_export's arguments.
type StartExportIn struct {
	IdempotencyKey string   `json:"idempotency_key" jsonschema:"your name for this logical export, 1-128 chars of [A-Za-z0-9._:@=+-]; keys are per owner (yours never collide with another principal's); retrying with the same key and arguments returns the same job"`
	Dataset        string   `json:"dataset" jsonschema:"name of a server-configured dataset, e.g. customers"`
	Format         string   `json:"format" jsonschema:"jsonl (one JSON object per line) or csv (RFC 4180 with a header line); the file is gzip-compressed"`
	Columns        []string `json:"columns,omitempty" jsonschema:"columns to export, in this order; defaults to the dataset's non-sensitive columns. Any sensitive column makes the export wait for an approver other than you"`
	Purpose        string   `json:"purpose" jsonschema:"why you need this data (1-500 chars); recorded with the job and shown to the approver"`
}

// ExportResultView is a succeeded export's result (wire.ExportResultView): the artifact's
// manifest summary and a short-lived download link for the caller.
type ExportResultView = wire.ExportResultView

func (in StartExportIn) idempotencyKey() string { return in.IdempotencyKey }

// ExportOptions configure the export kind.
type ExportOptions struct {
	// Datasets are the export datasets callers may name. Defaults to none.
	Datasets contract.Datasets
	// Artifacts is the artifact store downloads read from. Required for downloads; without
	// it a succeeded export has no download_url.
	Artifacts contract.ArtifactReader
	// DownloadTTL is how long a download link stays valid. Defaults to DownloadTTLDefault (5 minutes).
	DownloadTTL time.Duration
	// Tuning sizes the export jobs this frontend starts. Zero fields take the workflow defaults.
	Tuning ExportTuning
}

// ExportTuning sizes export jobs; it is recorded in each job's input when it starts.
type ExportTuning struct {
	// PartRows is rows per part (one activity each). Defaults to contract.PartRowsDefault.
	PartRows int
	// PageRows is rows per chunk object. Zero: 100,000 (one chunk per default part), or
	// contract.PageRowsDefault on a dataset with max_rows_per_second (activities.ExportPart).
	PageRows int
	// Concurrency bounds parts in flight. Defaults to workflows.ExportConcurrencyDefault.
	Concurrency int
	// PartHeartbeatTimeout is how soon a part of a dead worker is retried. Defaults to 20 seconds.
	PartHeartbeatTimeout time.Duration
}

// ExportKind is the export job kind with options o: start_export exports a configured
// dataset; the result view adds a download link for the caller, served by its own route
// GET /artifacts/{token} (below).
func ExportKind(o ExportOptions) KindSpec {
	if o.Datasets == nil {
		o.Datasets = contract.Datasets{}
	}
	return &exportKind{opts: o}
}

type exportKind struct{ opts ExportOptions }

func (k *exportKind) Name() string { return workflows.KindExport }

func (k *exportKind) Serve(f *Core) ServedKind {
	jk := JobKind[ExportResultView]{Name: workflows.KindExport, Noun: "export", Result: k.result}
	sk := jk.served(f, startTool(f, jk, &mcp.Tool{
		Title: "Start a data export",
		Description: "Export your tenant's rows of a server-configured dataset to a gzip file (jsonl or csv), or find the export " +
			"already started with this idempotency_key (keys are per owner). Returns at once with a handle to poll via get_export. Exports that " +
			"include a sensitive column wait (awaiting_input) until an approver other than you confirms the exact scope; " +
			"no row is read before that. When succeeded, get_export gives a short-lived download_url.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(_ context.Context, p authz.Principal, in StartExportIn) (StartSpec, error) {
		return k.startSpec(f, p, in)
	}).
		enum("format", contract.Formats()...))
	f.Export = k // the pages' download (frontend/pages_port.go)
	sk.PageResult = exportPageResult(f, k)
	sk.Routes = map[string]http.Handler{
		"GET /artifacts/{token}": f.Metrics.CountDownloads(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { k.download(f, w, r) })),
	}
	sk.FreshResult = []string{"download_url", "download_url_expires_at"}
	return sk
}

// result renders a succeeded export for p, with a download link bound to p.
func (k *exportKind) result(_ context.Context, f *Core, p authz.Principal, j *jobstore.Job, decode func(any) error) (*ExportResultView, error) {
	var r workflows.ExportResult
	if err := decode(&r); err != nil {
		return nil, err
	}
	m := r.Manifest
	v := &ExportResultView{Rows: m.Rows, Bytes: m.Bytes, SHA256: m.SHA256, Format: m.Format, Columns: m.Columns,
		FileName: m.FileName, Parts: len(m.Parts), ApprovedBy: r.ApprovedBy, ExpiresAt: m.ExpiresAt,
		Decision: decisionView(r.Decision)}
	now := f.Opts.Now()
	switch {
	case !now.Before(m.ExpiresAt):
		v.Expired = true
		v.Note = "the artifact was deleted after its retention period; start a new export (with a new idempotency_key) to get the data again"
	case k.opts.Artifacts == nil:
		v.Note = "this server has no artifact store configured for downloads"
	case authz.Decide(p, authz.ActionDownload, j.PolicyJob()) == authz.Allow:
		// Not capped at the artifact's expiry: a link used after retention answers 410, which
		// says more than a link-expired 404.
		if tok, exp := f.sealDownload(p, j, m.SHA256, now, k.opts.DownloadTTL); tok != "" {
			v.DownloadURL = f.publicBase() + "/artifacts/" + url.PathEscape(tok)
			v.DownloadURLExpiresAt = &exp
			v.DownloadInstructions = "GET download_url with the header 'Authorization: Bearer <your token>' (the link alone is refused); " +
				"Range requests work; check the file's SHA-256 against sha256"
		}
	}
	return v, nil
}

// sealDownload seals a download token for p to the artifact of job j with digest, valid for
// ttl (a kind's DownloadTTL option; DownloadTTLDefault when not positive) from now, to the
// second as sealed; it returns the token ("" if it cannot be sealed) and its expiry.
func (f *Core) sealDownload(p authz.Principal, j *jobstore.Job, digest string, now time.Time, ttl time.Duration) (string, time.Time) {
	if ttl <= 0 {
		ttl = DownloadTTLDefault
	}
	exp := now.Add(ttl).Truncate(time.Second)
	return f.Opts.Keys.SealDownload(handle.Download{Tenant: j.Tenant, WorkflowID: j.ID, Subject: p.Subject,
		Digest: digest, Expiry: exp}), exp
}

// publicBase is scheme://host of the resource URI: where /artifacts is served.
func (f *Core) publicBase() string {
	u, err := url.Parse(f.Opts.ResourceURI)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// exportArgs validates and normalizes start_export's arguments against the dataset catalog.
func (k *exportKind) exportArgs(in StartExportIn) (workflows.ExportArgs, contract.Dataset, error) {
	var zero workflows.ExportArgs
	names := strings.Join(k.opts.Datasets.Names(), ", ")
	if names == "" {
		names = "none configured"
	}
	if in.Dataset == "" {
		return zero, contract.Dataset{}, invalidArg("dataset", "is required (available: %s)", names)
	}
	d, ok := k.opts.Datasets[in.Dataset]
	if !ok {
		return zero, d, invalidArg("dataset", "unknown dataset %q (available: %s)", truncate(in.Dataset, 64), names)
	}
	if !contract.ValidFormat(in.Format) {
		return zero, d, invalidArg("format", "must be jsonl or csv")
	}
	all := make([]string, len(d.Columns))
	for i, c := range d.Columns {
		all[i] = c.Name
	}
	cols := in.Columns
	if cols == nil {
		cols = d.DefaultColumns()
		if len(cols) == 0 {
			return zero, d, invalidArg("columns", "dataset %s has no non-sensitive columns; name the columns you need (available: %s)", d.Name, strings.Join(all, ", "))
		}
	}
	if len(cols) == 0 || len(cols) > columnsMax {
		return zero, d, invalidArg("columns", "must name 1 to %d columns (available: %s), or be omitted for the non-sensitive ones", columnsMax, strings.Join(all, ", "))
	}
	for i, c := range cols {
		if _, ok := d.Column(c); !ok {
			return zero, d, invalidArg("columns", "unknown column %q in dataset %s (available: %s)", truncate(c, 64), d.Name, strings.Join(all, ", "))
		}
		if slices.Contains(cols[:i], c) {
			return zero, d, invalidArg("columns", "column %q is named twice", c)
		}
	}
	purpose := strings.TrimSpace(in.Purpose)
	switch n := utf8.RuneCountInString(purpose); {
	case n == 0:
		return zero, d, invalidArg("purpose", "is required: say why you need this data (shown to the approver)")
	case n > purposeMax:
		return zero, d, invalidArg("purpose", "at most %d characters", purposeMax)
	case strings.IndexFunc(purpose, func(r rune) bool { return unicode.IsControl(r) && r != '\n' }) >= 0:
		return zero, d, invalidArg("purpose", "must be plain text (no control characters)")
	}
	return workflows.ExportArgs{Dataset: d.Name, Format: in.Format, Columns: slices.Clone(cols), Purpose: purpose}, d, nil
}

// startSpec validates start_export's arguments (past the key) and says what to start.
func (k *exportKind) startSpec(f *Core, p authz.Principal, in StartExportIn) (StartSpec, error) {
	args, d, err := k.exportArgs(in)
	if err != nil {
		return StartSpec{}, err
	}
	var sensitive []string
	for _, c := range args.Columns {
		if col, _ := d.Column(c); col.Sensitive {
			sensitive = append(sensitive, c)
		}
	}
	hash := workflows.Digest(args)
	wfIn := workflows.ExportInput{
		Tenant: p.Tenant, Owner: p.Subject, Args: args, ConfigDigest: d.ConfigDigest(), MaxRows: d.MaxRows,
		Approval: workflows.ExportApproval{Required: len(sensitive) > 0, AllowSelf: d.AllowSelfApproval,
			Timeout: d.ApprovalTimeout, Sensitive: sensitive},
		Retention: d.Retention,
		PartRows:  k.opts.Tuning.PartRows, PageRows: k.opts.Tuning.PageRows, Concurrency: k.opts.Tuning.Concurrency,
		PartHeartbeatTimeout: workflows.Duration(k.opts.Tuning.PartHeartbeatTimeout),
	}
	approval := "no approval needed"
	if len(sensitive) > 0 {
		approval = "needs an approver (sensitive: " + strings.Join(sensitive, ", ") + ")"
	}
	wfIn.Fairness = f.fairness(p.Tenant)
	return StartSpec{
		Hash:    hash,
		Input:   wfIn,
		Summary: fmt.Sprintf("export %s · %s · %d columns · owner %s", args.Dataset, args.Format, len(args.Columns), p.Subject),
		Details: fmt.Sprintf("**export** of dataset `%s` as %s\n\n- owner: `%s` (tenant `%s`)\n- columns: %s\n- %s\n- purpose: %s\n- idempotency key: `%s`\n- dataset config: `%s`",
			args.Dataset, args.Format, p.Subject, p.Tenant, strings.Join(args.Columns, ", "), approval, args.Purpose,
			in.IdempotencyKey, wfIn.ConfigDigest),
	}, nil
}

// download serves the export kind's GET /artifacts/<token> behind the bearer middleware (a missing or invalid
// bearer token is a 401 challenge, which says nothing about any artifact). Everything else
// that is wrong — tampered or expired link, another tenant, another principal, a job the
// caller may not read, a link to other bytes — is the same bare 404; an artifact past its
// retention is 410.
func (k *exportKind) download(f *Core, w http.ResponseWriter, r *http.Request) {
	p, ok := principalFromRequest(r)
	k.ServeDownload(f, w, r, p, ok)
}

// serveDownload is download for principal p (ok: there is one), however p was authenticated:
// the bearer token of /artifacts, or the session of the pages' /jobs/download (the same rule
// and the same bare 404s either way).
func (k *exportKind) ServeDownload(f *Core, w http.ResponseWriter, r *http.Request, p authz.Principal, ok bool) {
	dl, opened := openDownloadJob(f, w, r, p, ok, workflows.KindExport, "download", "job store")
	if !opened {
		return
	}
	d, j, notFound := dl.link, dl.job, dl.notFound
	var res workflows.ExportResult
	if err := f.readResult(r.Context(), j, &res); err != nil {
		dl.unavailable("read result", err)
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
	if !f.Opts.Now().Before(m.ExpiresAt) {
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
		downloadUnavailable(f, w, r, "download", d.WorkflowID, "artifact store")("open artifact", err)
		return
	}
	defer rd.Close()
	if err := setDownloadHeaders(w, m.FileName, "application/gzip", m.SHA256); err != nil {
		f.Logger(r.Context()).Error("download: manifest digest", zap.String("job_id", j.ID), zap.Error(err))
		http.Error(w, "bad manifest", http.StatusInternalServerError)
		return
	}
	f.Logger(r.Context()).Info("download", zap.String("tenant", p.Tenant), zap.String("sub", p.Subject), zap.String("job_id", j.ID),
		zap.String("range", r.Header.Get("Range")))
	// ServeContent answers Range (206 with Content-Range) and sets Content-Length.
	http.ServeContent(w, r, m.FileName, m.CreatedAt, rd)
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

func principalFromRequest(r *http.Request) (authz.Principal, bool) {
	return PrincipalFrom(auth.TokenInfoFromContext(r.Context()))
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
