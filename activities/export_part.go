package activities

// ExportPart: writing one key range as chunk objects, page by page, with throttling,
// heartbeat resume and deterministic gzip members.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/klauspost/compress/gzip"
	"go.temporal.io/sdk/activity"
)

// rateState is a part's reading rate so far, across its queries: rows read since start, against
// the dataset's max_rows_per_second.
type rateState struct {
	perSecond int // 0: no limit
	start     time.Time
	rows      int
}

// ahead is how long reading must pause for rows since start to keep within perSecond (<= 0:
// no pause).
func (r *rateState) ahead() time.Duration {
	if r.perSecond <= 0 {
		return 0
	}
	return time.Until(r.start.Add(time.Duration(float64(r.rows) / float64(r.perSecond) * float64(time.Second))))
}

// wait sleeps out ahead, or until ctx ends.
func (r *rateState) wait(ctx context.Context) error {
	wait := r.ahead()
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// chunkKey names chunk c (0-based) of part p (1-based) of one job instance.
func chunkKey(jobID, firstRunID string, part, chunk int) string {
	return ExportPrefix(jobID, firstRunID) + fmt.Sprintf("part-%05d.%05d.gz", part, chunk)
}

// ExportPart writes one key range of the tenant's rows, read in one query, as chunk objects
// of PageRows rows (fewer when their text reaches chunkRawMax), each a complete gzip member. It heartbeats after every chunk and resumes
// from the last heartbeat; a chunk rewritten because its heartbeat was lost comes out
// byte-identical (deterministic encoding and gzip), so a resumed part equals a clean one.
func (a *Activities) ExportPart(ctx context.Context, in contract.ExportPartInput) (contract.PartResult, error) {
	d, err := a.dataset(in.Dataset)
	if err != nil {
		return contract.PartResult{}, err
	}
	pageRows, through, err := checkPartInput(d, in)
	if err != nil {
		return contract.PartResult{}, err
	}
	store, err := a.store()
	if err != nil {
		return contract.PartResult{}, err
	}
	prog := resumedProgress(ctx, d, in)
	db, err := a.pool().Open(d)
	if err != nil {
		return contract.PartResult{}, err
	}
	sel := make([]string, 0, len(in.Columns)+1)
	sel = append(sel, qi(d.KeyColumn))
	for _, c := range in.Columns {
		sel = append(sel, qi(c))
	}
	// One query for the rest of the range: the plan bounds the part, so no LIMIT paging;
	// chunks are cut in the stream. A throttled part closes its query whenever it must wait and
	// opens a new one after LastKey, so no snapshot stays open while it sleeps.
	rate := &rateState{perSecond: d.MaxRowsPerSecond, start: time.Now()}
	base := fmt.Sprintf(`SELECT %s FROM %s WHERE %s = $1 AND `, strings.Join(sel, ", "), qi(d.Table), qi(d.TenantColumn))
	for {
		q, args, err := a.restOfRange(ctx, db, d, in, prog.LastKey, base, through)
		if err != nil {
			return contract.PartResult{}, err
		}
		err = a.streamPart(ctx, db, d, in, store, &prog, pageRows, rate, q, args)
		if err == nil {
			break
		}
		if !errors.Is(err, errPaused) {
			return contract.PartResult{}, err
		}
		if err := rate.wait(ctx); err != nil {
			return contract.PartResult{}, err
		}
	}
	res := contract.PartResult{Part: in.Part, Chunks: prog.NextChunk, Rows: prog.Rows, Bytes: prog.Bytes}
	if prog.NextChunk == 0 || prog.Digest != nil {
		res.SHA256 = partDigest(prog.Digest)
	}
	return res, nil
}

// partDigest is the hex SHA-256 of a part's chunks from the state a partWriter carries (nil:
// no chunk, the digest of nothing). A state that does not restore gives "" (finalize hashes).
func partDigest(state []byte) string {
	h := sha256.New()
	if state != nil {
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
			return ""
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkPartInput refuses a part the dataset d does not allow (changed config, no tenant, bad
// format, columns, part number, page size or range keys); it returns the page size (the
// default for none) and the range's last key as a query argument.
func checkPartInput(d contract.Dataset, in contract.ExportPartInput) (pageRows int, through any, err error) {
	if d.ConfigDigest() != in.ConfigDigest {
		return 0, nil, scopeChanged(d)
	}
	if in.Tenant == "" {
		return 0, nil, invalid("no tenant")
	}
	if err := checkFormat(in.Format); err != nil {
		return 0, nil, err
	}
	if err := checkColumns(d, in.Columns); err != nil {
		return 0, nil, err
	}
	if in.Part < 1 {
		return 0, nil, invalid("part %d: parts count from 1", in.Part)
	}
	pageRows = in.PageRows
	if pageRows <= 0 {
		pageRows = pageRowsMax
		if d.MaxRowsPerSecond > 0 {
			pageRows = contract.PageRowsDefault
		}
	}
	if pageRows > pageRowsMax {
		return 0, nil, invalid("page_rows %d: at most %d", pageRows, pageRowsMax)
	}
	through, err = keyArg(d, in.Range.Through)
	if err != nil {
		return 0, nil, err
	}
	if in.Range.After != nil {
		if _, err := keyArg(d, *in.Range.After); err != nil {
			return 0, nil, err
		}
	}
	return pageRows, through, nil
}

// resumedProgress is where the part starts: after the last heartbeat's chunk when its details
// are readable and consistent, else at the start of the range (rewritten chunks are identical).
func resumedProgress(ctx context.Context, d contract.Dataset, in contract.ExportPartInput) PartProgress {
	prog := PartProgress{LastKey: in.Range.After}
	if !activity.HasHeartbeatDetails(ctx) {
		return prog
	}
	var hb PartProgress
	if err := activity.GetHeartbeatDetails(ctx, &hb); err == nil && hb.NextChunk > 0 &&
		hb.LastKey != nil && hb.Rows > 0 && hb.Bytes > 0 {
		if _, err := keyArg(d, *hb.LastKey); err == nil {
			prog = hb
		}
	}
	if prog.Digest != nil && sha256.New().(encoding.BinaryUnmarshaler).UnmarshalBinary(prog.Digest) != nil {
		prog.Digest = nil // not a digest state: the part reports none
	}
	return prog
}

// restOfRange is the query (base and its arguments) for the part's rows after lastKey (nil: the
// whole range) through through, in key order. Resuming after a chunk it first checks that
// lastKey is unique for the tenant.
func (a *Activities) restOfRange(ctx context.Context, db *sql.DB, d contract.Dataset, in contract.ExportPartInput, lastKey *string,
	base string, through any) (string, []any, error) {
	q, args := base, []any{in.Tenant}
	if lastKey != nil {
		after, err := keyArg(d, *lastKey)
		if err != nil {
			return "", nil, err
		}
		if in.Range.After == nil || *lastKey != *in.Range.After {
			// Resuming after a chunk (a retry or a throttle pause): a second row with the
			// chunk's last key would be skipped by "> LastKey", unseen by the stream's check.
			var n int
			dq := fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s = $1 AND %s = $2 LIMIT 2) x`,
				qi(d.Table), qi(d.TenantColumn), qi(d.KeyColumn))
			if err := a.queryRow(ctx, db, d, dq, []any{in.Tenant, after}, &n); err != nil {
				return "", nil, err
			}
			if n > 1 {
				return "", nil, invalid("dataset %q: %s is not unique for the tenant; rows cannot be paged", d.Name, d.KeyColumn)
			}
		}
		q += fmt.Sprintf(`%s > $2 AND `, qi(d.KeyColumn))
		args = append(args, after)
	}
	q += fmt.Sprintf(`%s <= $%d ORDER BY %s`, qi(d.KeyColumn), len(args)+1, qi(d.KeyColumn))
	args = append(args, through)
	return q, args, nil
}

const (
	// chunkRawMax cuts a chunk before PageRows rows when its text reaches it, so a chunk's
	// memory is bounded by bytes whatever the row width.
	chunkRawMaxDefault = 8 << 20
	// feedBytes is how much encoded text gathers before it goes to the compressor.
	feedBytes = 64 << 10
)

// errPaused: streamPart stopped after a chunk because the dataset's rate limit needs a wait;
// its query is closed, and the caller waits and resumes after LastKey.
var errPaused = errors.New("paused for the rate limit")

// chunkRawMax is chunkRawMaxDefault; tests lower it.
var chunkRawMax int64 = chunkRawMaxDefault

// streamPart reads the part's rows in one query and writes them as chunks of pageRows rows
// (fewer when their text reaches chunkRawMax), each one gzip member, heartbeating prog after
// each. Where a chunk ends depends only on the rows from its first one, so a chunk rewritten
// by a retry that resumed after the previous chunk's last key comes out byte-identical.
// PostgreSQL rows of the column types pgDecoderFor knows take the raw path; everything else
// goes through database/sql. Both write the same bytes.
func (a *Activities) streamPart(ctx context.Context, db *sql.DB, d contract.Dataset, in contract.ExportPartInput, store *ArtifactStore,
	prog *PartProgress, pageRows int, rate *rateState, q string, args []any) error {
	// Cancelled on return: an error abandons the rest of the result instead of draining it.
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	enc := newRowEncoder(in.Format, in.Columns)
	pw := newPartWriter(ctx, store, in, d.KeyColumn, prog, pageRows, rate, enc)
	defer pw.release()
	if d.Driver == contract.DriverPostgres && !a.sqlRowsOnly {
		fast, err := a.queryPGRaw(qctx, cancel, db, d, q, args, func(r *pgRawRows) error {
			for r.Next() {
				key, err := r.encode(d, enc)
				if err != nil {
					return err
				}
				if err := pw.row(key); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if fast {
			return pw.close()
		}
	}
	rows, err := a.query(qctx, db, d, q, args...)
	if err != nil {
		return err
	}
	defer func() {
		cancel()
		rows.Close()
	}()
	types, err := rows.ColumnTypes()
	if err != nil {
		return fmt.Errorf("dataset %q: %w", d.Name, err)
	}
	enc.reset(types[1:])
	vals := make([]any, len(types))
	ptrs := make([]any, len(types))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("dataset %q: %w", d.Name, err)
		}
		key, err := keyString(d, vals[0])
		if err != nil {
			return err
		}
		if err := enc.row(vals[1:]); err != nil {
			return err
		}
		if err := pw.row([]byte(key)); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("dataset %q: %w", d.Name, err)
	}
	return pw.close()
}

// partWriter cuts a part's encoded rows into chunk objects: it feeds the encoder's text to
// the compressor in feedBytes pieces and cuts a chunk at pageRows rows or chunkRawMax bytes of
// text, writing it, advancing prog and heartbeating it.
type partWriter struct {
	ctx      context.Context
	store    *ArtifactStore
	in       contract.ExportPartInput
	prog     *PartProgress
	pageRows int
	rate     *rateState
	enc      *rowEncoder
	zw       *gzip.Writer
	zbuf     bytes.Buffer
	// digest hashes the part's chunks in order (nil when resumed from a heartbeat without
	// its state: the part then reports no digest).
	digest hash.Hash
	beat   time.Time // the last heartbeat
	n      int       // rows in the chunk
	raw    int64     // text bytes in the chunk
	last   []byte    // the last key so far
	seen   bool      // last holds a key of this query

	keyColumn string // for the duplicate-key error
}

func newPartWriter(ctx context.Context, store *ArtifactStore, in contract.ExportPartInput, keyColumn string, prog *PartProgress,
	pageRows int, rate *rateState, enc *rowEncoder) *partWriter {
	w := &partWriter{ctx: ctx, store: store, in: in, keyColumn: keyColumn, prog: prog, pageRows: pageRows, rate: rate, enc: enc,
		beat: time.Now()}
	if prog.NextChunk == 0 || prog.Digest != nil {
		w.digest = sha256.New()
		if prog.Digest != nil {
			_ = w.digest.(encoding.BinaryUnmarshaler).UnmarshalBinary(prog.Digest) // checked by resumedProgress
		}
	}
	w.zw = gzipWriters.Get().(*gzip.Writer)
	w.zw.Reset(&w.zbuf)
	return w
}

// release returns the compressor to the pool.
func (w *partWriter) release() { gzipWriters.Put(w.zw) }

// row accounts for one row the encoder now holds, whose key text is key (copied). A key
// equal to the one before it is refused: keyset paging (a resume after a chunk's last key)
// would skip its other rows.
func (w *partWriter) row(key []byte) error {
	if w.seen && bytes.Equal(key, w.last) {
		return invalid("dataset %q: %s is not unique for the tenant; rows cannot be paged", w.in.Dataset, w.keyColumn)
	}
	w.seen = true
	w.last = append(w.last[:0], key...)
	w.n++
	if w.enc.pending() >= feedBytes {
		if err := w.feed(); err != nil {
			return err
		}
	}
	if w.n == w.pageRows || w.raw+int64(w.enc.pending()) >= chunkRawMax {
		return w.cut()
	}
	return nil
}

// close writes the last, partial chunk once the rows are read.
func (w *partWriter) close() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.n > 0 {
		return w.cut()
	}
	return nil
}

func (w *partWriter) feed() error {
	m, err := w.enc.drain(w.zw)
	w.raw += int64(m)
	// A chunk may now hold a whole part (pageRowsMax rows): within one, the heartbeat repeats
	// the last chunk's progress every beatEvery, so a slow source never looks like a dead worker.
	if now := time.Now(); now.Sub(w.beat) >= beatEvery {
		w.beat = now
		activity.RecordHeartbeat(w.ctx, *w.prog)
	}
	return err
}

// beatEvery is how often a part heartbeats within a chunk.
const beatEvery = 2 * time.Second

// cut ends the chunk: errPaused when the rate limit needs a wait before the next row.
func (w *partWriter) cut() error {
	if err := w.feed(); err != nil {
		return err
	}
	if err := w.zw.Close(); err != nil {
		return err
	}
	key := chunkKey(w.in.JobID, w.in.FirstRunID, w.in.Part, w.prog.NextChunk)
	if err := w.store.writeObject(w.ctx, key, w.zbuf.Bytes(), "application/gzip"); err != nil {
		return fmt.Errorf("write chunk: %w", err)
	}
	lastKey := string(w.last)
	w.prog.NextChunk++
	w.prog.LastKey = &lastKey
	w.prog.Rows += w.n
	w.prog.Bytes += int64(w.zbuf.Len())
	w.prog.Digest = nil
	if w.digest != nil {
		w.digest.Write(w.zbuf.Bytes())
		state, err := w.digest.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			return err
		}
		w.prog.Digest = state
	}
	activity.RecordHeartbeat(w.ctx, *w.prog)
	w.beat = time.Now()
	w.rate.rows += w.n
	w.n, w.raw = 0, 0
	w.zbuf.Reset()
	w.zw.Reset(&w.zbuf)
	if w.rate.ahead() > 0 {
		return errPaused // the caller's deferred close ends the query before it waits
	}
	return nil
}

// gzipWriters recycles compressors: each holds several hundred KB of state. klauspost's
// gzip is a drop-in for compress/gzip, about twice as fast at the same level and ratio; its
// output depends only on the level and the input (TestGzipDeterministic), as a retried chunk
// needs.
var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzipLevel) // a valid constant level: no error
	return w
}}

// gzipMember compresses raw into one gzip member. The header stays empty (no name, no
// modification time) and the level is fixed, so equal input gives equal bytes.
func gzipMember(raw []byte) ([]byte, error) {
	var out bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&out)
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
