package jobcore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
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
	sk.Surfaces = k.exportSurfaces
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
		if link, exp := f.downloadLink(f.publicBase()+"/artifacts/", p, j, m.SHA256, now, k.opts.DownloadTTL); link != "" {
			v.DownloadURL = link
			v.DownloadURLExpiresAt = &exp
			v.DownloadInstructions = "GET download_url with the header 'Authorization: Bearer <your token>' (the link alone is refused); " +
				"Range requests work; check the file's SHA-256 against sha256"
		}
	}
	return v, nil
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
	p, ok := PrincipalFromContext(r.Context())
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
