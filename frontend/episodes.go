package frontend

import (
	"context"
	"fmt"
	"strconv"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

const listEpisodesToolName = "list_episodes"

// ListEpisodesIn are list_episodes' arguments.
type ListEpisodesIn struct {
	Handle   string `json:"handle" jsonschema:"the eval's handle from start_eval, get_eval or list_jobs, verbatim"`
	Status   string `json:"status,omitempty" jsonschema:"only episodes with this outcome: passed, failed or errored; omit for all"`
	PageSize int    `json:"page_size,omitempty" jsonschema:"episodes per page, 1-100 (default 20)"`
	Cursor   string `json:"cursor,omitempty" jsonschema:"next_cursor from the previous page, verbatim, with the same handle, status and page_size; omit for the first page"`
}

// ListEpisodesOut is list_episodes' result (wire.ListEpisodesOut).
type ListEpisodesOut = wire.ListEpisodesOut

// listEpisodesTool is the eval kind's list_episodes.
func (k *evalKind) listEpisodesTool(f *Frontend) toolDef {
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
	td.tool.InputSchema.(*jsonschema.Schema).Properties["page_size"].Default = []byte(strconv.Itoa(wire.EpisodesPageSizeDefault))
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
func (k *evalKind) listEpisodes(ctx context.Context, f *Frontend, p authz.Principal, in ListEpisodesIn) (*ListEpisodesOut, error) {
	ef, err := parseEpisodesFilter(in)
	if err != nil {
		return nil, err
	}
	j, err := f.resolve(ctx, p, in.Handle, workflows.KindEval, authz.ActionGet)
	if err != nil {
		return nil, err
	}
	if k.opts.Artifacts == nil {
		return nil, toolErr(CodeUnavailable, "this server has no artifact store configured, where episode results are kept; ask its operators")
	}
	fp := ef.fingerprint(j)
	var pos episodePos
	if in.Cursor != "" {
		tok, err := f.openListCursor(p, listEpisodesToolName, in.Cursor, fp)
		if err != nil {
			return nil, err
		}
		if pos, err = parseEpisodePos(tok); err != nil {
			return nil, toolErr(CodeCursorInvalid, "cursor: malformed or not issued by this service; pass next_cursor exactly as returned, or omit cursor to start from the first page")
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
	if err != nil {
		// The artifact store (or a segment in it): the operators' log says which.
		f.logger(ctx).Error("list_episodes: reading the episode log", zap.String("job_id", j.ID), zap.Error(err))
		return nil, toolErr(CodeUnavailable, "the episode results could not be read from the artifact store; retry shortly")
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
func (k *evalKind) episodeSources(ctx context.Context, f *Frontend, j *jobstore.Job, running bool, pos episodePos) ([]episodeSource, error) {
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
		qctx, cancel := context.WithTimeout(ctx, f.opts.TemporalTimeout)
		// Only what the page can use: from the cursor on, when it points into the current segment.
		q, err := f.store.QueryEpisodes(qctx, j.ID, workflows.EpisodesQuery{Segment: pos.seg, From: pos.off})
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
		f.logger(ctx).Info("list_episodes: the workflow did not answer; listing written segments", zap.String("job_id", j.ID), zap.Error(err))
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

func episodeView(o contract.EpisodeOutcome) wire.Episode {
	return wire.Episode{Index: o.Index, OperationID: o.OperationID, Status: o.Status, Score: o.Score,
		Attempts: o.Attempts, DurationMS: o.DurationMS, Error: o.Error}
}
