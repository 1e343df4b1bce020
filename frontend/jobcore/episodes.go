package jobcore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
	"go.uber.org/zap"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend/wire"
)

const listEpisodesToolName = "list_episodes"

// ListEpisodesIn are list_episodes' arguments.
type ListEpisodesIn struct {
	Handle   string `json:"handle" jsonschema:"the eval's handle from start_eval, get_eval or list_jobs, verbatim; or its job_id"`
	Status   string `json:"status,omitempty" jsonschema:"only episodes with this outcome: passed, failed or errored; omit for all"`
	PageSize int    `json:"page_size,omitempty" jsonschema:"episodes per page, 1-100 (default 20)"`
	Cursor   string `json:"cursor,omitempty" jsonschema:"next_cursor from the previous page, verbatim, with the same handle, status and page_size; omit for the first page"`
}

// ListEpisodesOut is list_episodes' result (wire.ListEpisodesOut).
type ListEpisodesOut = wire.ListEpisodesOut

// listEpisodesTool is the eval kind's list_episodes.
func (k *evalKind) listEpisodesTool(f *Core) ToolDef {
	td := newKindTool(f, workflows.KindEval, authz.ActionGet, &mcp.Tool{
		Name:  listEpisodesToolName,
		Title: "List an eval run's episodes",
		Description: "An eval run's finished episodes, one page at a time, in the order they finished: index, operation_id, " +
			"status (passed, failed, errored), score, attempts, duration and a short error. Readable while the run goes on: " +
			"pass next_cursor back as cursor with the SAME handle, status and page_size; every episode appears exactly once " +
			"across pages, and a page once full never changes. While the run goes on, the last page also has a next_cursor, " +
			"to read the episodes that finish later; complete=true says there are no more. A cursor expires after a few " +
			"minutes (cursor_expired): then start again without cursor. For your own runs (all of your tenant's with jobs:admin).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, p authz.Principal, in ListEpisodesIn) (*ListEpisodesOut, error) {
		return k.listEpisodes(ctx, f, p, in)
	})
	td = td.enum("status", contract.EpisodePassed, contract.EpisodeFailed, contract.EpisodeErrored).
		bounds("page_size", 1, wire.EpisodesPageSizeMax)
	td.Tool.InputSchema.(*jsonschema.Schema).Properties["page_size"].Default = []byte(strconv.Itoa(wire.EpisodesPageSizeDefault))
	return td
}

// episodesFilter is list_episodes' validated arguments past the handle: our own constants only.
type episodesFilter struct {
	status   string // "" or an contract.Episode* status
	pageSize int
}

func parseEpisodesFilter(in ListEpisodesIn) (episodesFilter, error) {
	ef := episodesFilter{pageSize: in.PageSize}
	if in.Status != "" {
		s, err := contract.ParseEpisodeStatus(in.Status)
		if err != nil {
			return ef, invalidArg("status", "%v (or omitted for all)", err)
		}
		ef.status = s
	}
	switch {
	case ef.pageSize == 0:
		ef.pageSize = wire.EpisodesPageSizeDefault
	case ef.pageSize < 1 || ef.pageSize > wire.EpisodesPageSizeMax:
		return ef, invalidArg("page_size", "must be between 1 and %d", wire.EpisodesPageSizeMax)
	}
	return ef, nil
}

// fingerprint binds a cursor to this traversal: the job instance (its first run ID too, so a
// new job under a reused ID never continues an old listing), the status and the page size.
func (ef episodesFilter) fingerprint(j *jobstore.Job) string {
	pairs := map[string]string{
		"q":         "list_episodes/v1",
		"job":       j.ID,
		"first_run": j.FirstRunID,
		"page_size": strconv.Itoa(ef.pageSize),
	}
	if ef.status != "" {
		pairs["status"] = ef.status
	}
	return handle.FilterFingerprint(pairs)
}

// listEpisodes serves list_episodes: the written segments from the artifact store, and while
// the job runs the current segment's finished episodes from the workflow (QueryEpisodes).
func (k *evalKind) listEpisodes(ctx context.Context, f *Core, p authz.Principal, in ListEpisodesIn) (*ListEpisodesOut, error) {
	ef, err := parseEpisodesFilter(in)
	if err != nil {
		return nil, err
	}
	j, err := f.Resolve(ctx, p, in.Handle, workflows.KindEval, authz.ActionGet)
	if err != nil {
		return nil, err
	}
	if k.opts.Artifacts == nil {
		return nil, ToolErr(CodeUnavailable, "this server has no artifact store configured, where episode results are kept; ask its operators")
	}
	fp := ef.fingerprint(j)
	var pos episodePos
	if in.Cursor != "" {
		tok, err := f.OpenListCursor(p, listEpisodesToolName, in.Cursor, fp)
		if err != nil {
			return nil, err
		}
		if pos, err = parseEpisodePos(tok); err != nil {
			return nil, ToolErr(CodeCursorInvalid, "cursor: malformed or not issued by this service; pass next_cursor exactly as returned, or omit cursor to start from the first page")
		}
	}
	running := !j.Status().Terminal()
	out := &ListEpisodesOut{Episodes: []wire.Episode{}}
	srcs, err := k.episodeSources(ctx, f, j, running, pos)
	var next episodePos
	var more bool
	if err == nil {
		next, more, err = scanEpisodes(ctx, srcs, pos, ef, func(o contract.EpisodeOutcome) {
			out.Episodes = append(out.Episodes, episodeView(o))
		})
	}
	if !running && (errors.Is(err, contract.ErrArtifactGone) || err == nil && len(srcs) == 0 && k.logExpired(ctx, f, j)) {
		return nil, invalidArg("handle", "this eval's episode log has been deleted: its suite keeps episode logs for its episode_retention "+
			"after a run ends (see get_eval's episodes_kept_until); get_eval still has the run's summary")
	}
	if err != nil {
		// The artifact store (or a segment in it): the operators' log says which.
		f.Logger(ctx).Error("list_episodes: reading the episode log", zap.String("job_id", j.ID), zap.Error(err))
		return nil, ToolErr(CodeUnavailable, "the episode results could not be read from the artifact store; retry shortly")
	}
	if more || running {
		if out.NextCursor, err = f.sealListCursor(p, listEpisodesToolName, fp, next.token()); err != nil {
			return nil, err
		}
	} else {
		out.Complete = true
	}
	return out, nil
}

// logExpired: the finished eval j's episode log is past its retention (its result's
// episodes_kept_until), so an empty store means deleted, not "no episodes".
func (k *evalKind) logExpired(ctx context.Context, f *Core, j *jobstore.Job) bool {
	var res workflows.EvalResult
	if j.Status() != workflows.StatusSucceeded || f.readResult(ctx, j, &res) != nil || res.EpisodesKeptUntil == nil {
		return false
	}
	return !f.Opts.Now().Before(*res.EpisodesKeptUntil)
}

// episodeSource is one segment of the log: its outcomes from offset base on, read when first
// needed.
type episodeSource struct {
	seg, base int
	load      func(ctx context.Context) ([]contract.EpisodeOutcome, error)
}

// episodeSources lists the log's segments in order. A running job's come from its workflow:
// the written ones it names and its own segment in memory, both as of one instant (a segment
// is either still in memory or written, never both). When the workflow does not answer (no
// worker), the written segments in the store stand in: a page then ends earlier, and its
// cursor picks up where it ended. An ended job's are the store's.
func (k *evalKind) episodeSources(ctx context.Context, f *Core, j *jobstore.Job, running bool, pos episodePos) ([]episodeSource, error) {
	store := k.opts.Artifacts
	written := func(seg int) episodeSource {
		return episodeSource{seg: seg, load: func(ctx context.Context) ([]contract.EpisodeOutcome, error) {
			b, err := store.ReadEpisodeSegment(ctx, j.ID, j.FirstRunID, seg)
			if err != nil {
				return nil, fmt.Errorf("episode segment %d of %s: %w", seg, j.ID, err)
			}
			return contract.DecodeEpisodes(b)
		}}
	}
	if running {
		qctx, cancel := context.WithTimeout(ctx, f.Opts.TemporalTimeout)
		// Only what the page can use: from the cursor on, when it points into the current segment.
		q, err := f.Store.QueryEpisodes(qctx, j.ID, workflows.EpisodesQuery{Segment: pos.seg, From: pos.off})
		cancel()
		if err == nil {
			var srcs []episodeSource
			for _, s := range q.Written {
				if s.Count > 0 {
					srcs = append(srcs, written(s.Segment))
				}
			}
			live := q.Episodes
			return append(srcs, episodeSource{seg: q.Segment, base: q.From, load: func(context.Context) ([]contract.EpisodeOutcome, error) {
				return live, nil
			}}), nil
		}
		f.Logger(ctx).Info("list_episodes: the workflow did not answer; listing written segments", zap.String("job_id", j.ID), zap.Error(err))
	}
	segs, err := store.EpisodeSegments(ctx, j.ID, j.FirstRunID)
	if err != nil {
		return nil, err
	}
	srcs := make([]episodeSource, len(segs))
	for i, s := range segs {
		srcs[i] = written(s)
	}
	return srcs, nil
}

// scanEpisodes walks srcs from pos, passing the outcomes that match ef to emit until a page
// is full. It returns the position of the first outcome not scanned, and whether one exists.
func scanEpisodes(ctx context.Context, srcs []episodeSource, pos episodePos, ef episodesFilter,
	emit func(contract.EpisodeOutcome)) (next episodePos, more bool, err error) {
	next, n := pos, 0
	for _, s := range srcs {
		if s.seg < pos.seg {
			continue
		}
		off := 0
		if s.seg == pos.seg {
			off = pos.off
		}
		if off < s.base {
			return next, false, fmt.Errorf("episode segment %d starts at %d, after position %d", s.seg, s.base, off)
		}
		items, err := s.load(ctx)
		if err != nil {
			return next, false, err
		}
		for i := off; i < s.base+len(items); i++ {
			if n == ef.pageSize {
				return episodePos{seg: s.seg, off: i}, true, nil
			}
			if o := items[i-s.base]; ef.status == "" || o.Status == ef.status {
				emit(o)
				n++
			}
			next = episodePos{seg: s.seg, off: i + 1}
		}
	}
	return next, false, nil
}

// episodeView is an outcome as list_episodes shows it. A conversion, not a field-by-field
// copy: the two types must keep the same fields in the same order (only their schema texts
// differ), or this stops compiling.
func episodeView(o contract.EpisodeOutcome) wire.Episode { return wire.Episode(o) }

// episodePos is a position in an eval's episode log: the segment (the run that recorded the
// episodes; 1 is the job's first run) and the offset in it. The log only grows at its end and a
// segment keeps its order once written, so a position names the same episode for the job's
// whole life: list_episodes' pages stay stable while the job runs.
type episodePos struct {
	seg, off int
}

// episodePosPrefix versions the page token inside list_episodes' sealed cursor.
const episodePosPrefix = "ep1:"

// episodePosMax bounds both numbers: far beyond any eval (20,000 episodes by default).
const episodePosMax = 1 << 30

// token is the position as the page token of a sealed cursor (handle.Cursor.PageToken).
func (p episodePos) token() []byte {
	return []byte(episodePosPrefix + strconv.Itoa(p.seg) + ":" + strconv.Itoa(p.off))
}

var errEpisodePos = errors.New("not an episode position")

// parseEpisodePos reads a page token made by token: "ep1:<seg>:<off>", both decimal without
// sign or leading zeros, within 0..episodePosMax. Only a cursor this service sealed reaches it,
// but it is strict all the same.
func parseEpisodePos(b []byte) (episodePos, error) {
	s, ok := strings.CutPrefix(string(b), episodePosPrefix)
	if !ok {
		return episodePos{}, errEpisodePos
	}
	a, c, ok := strings.Cut(s, ":")
	if !ok {
		return episodePos{}, errEpisodePos
	}
	seg, err1 := parsePosNumber(a)
	off, err2 := parsePosNumber(c)
	if err1 != nil || err2 != nil {
		return episodePos{}, errEpisodePos
	}
	return episodePos{seg: seg, off: off}, nil
}

func parsePosNumber(s string) (int, error) {
	if s == "" || len(s) > 10 || (len(s) > 1 && s[0] == '0') {
		return 0, errEpisodePos
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errEpisodePos
		}
		n = n*10 + int(c-'0')
	}
	if n > episodePosMax {
		return 0, errEpisodePos
	}
	return n, nil
}

// An eval's episode log as one download: get_eval's episodes_url, GET /episodes/<token>. The
// token is an export download's (handle.Download: tenant, job, principal, the SHA-256 of the
// bytes, a short expiry) and the rules are the export's: the request must also carry that
// principal's bearer token or a tenant admin's, and anything wrong is the same bare 404. A
// token of one route never serves on the other: each checks the job's kind, and the digest
// names other bytes.

// episodesLink adds the episode log and its download link for p to a succeeded eval's view.
func (k *evalKind) episodesLink(f *Core, p authz.Principal, j *jobstore.Job, log *contract.EpisodeSegment, keptUntil *time.Time, v *EvalResultView) {
	if log == nil {
		return
	}
	v.EpisodesCount, v.EpisodesSHA256, v.EpisodesKeptUntil = log.Count, log.SHA256, keptUntil
	if keptUntil != nil && !f.Opts.Now().Before(*keptUntil) {
		v.EpisodesExpired = true // past the suite's episode_retention: deleted, or about to be
		return
	}
	if k.opts.Artifacts == nil || authz.Decide(p, authz.ActionDownload, j.PolicyJob()) != authz.Allow {
		return
	}
	if link, exp := f.downloadLink(f.publicBase()+"/episodes/", p, j, log.SHA256, f.Opts.Now(), k.opts.DownloadTTL); link != "" {
		v.EpisodesURL = link
		v.EpisodesURLExpiresAt = &exp
	}
}

// downloadEpisodes serves GET /episodes/{token} behind the bearer middleware.
func (k *evalKind) downloadEpisodes(f *Core, w http.ResponseWriter, r *http.Request) {
	p, ok := PrincipalFromContext(r.Context())
	dl, opened := openDownloadJob(f, w, r, p, ok, workflows.KindEval, "episodes download", "job store or artifact store")
	if !opened {
		return
	}
	d, j, notFound, unavailable := dl.link, dl.job, dl.notFound, dl.unavailable
	if k.opts.Artifacts == nil {
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
	name := "episodes.jsonl"
	if err := setDownloadHeaders(w, name, "application/jsonl", d.Digest); err != nil {
		notFound("bad digest")
		return
	}
	f.Logger(r.Context()).Info("episodes download", zap.String("tenant", p.Tenant), zap.String("sub", p.Subject), zap.String("job_id", j.ID))
	http.ServeContent(w, r, name, j.ClosedAt, rd)
}
