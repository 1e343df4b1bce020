package activities

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// ErrTypeExportInvalid: the export's input cannot be served as given (unknown format or
// column, malformed key range, too many parts) or a row cannot be paged (NULL or mistyped
// key). Retrying the same input cannot help.
const ErrTypeExportInvalid = "ExportInvalid"

// Export formats.
const (
	FormatJSONL = "jsonl"
	FormatCSV   = "csv"
)

const (
	// pageRowsMax bounds one page, so one chunk, held in memory while it is encoded.
	pageRowsMax = 100_000
	// partsMax keeps a plan's ranges far inside Temporal's payload limit.
	partsMax = 10_000
	// gzipLevel is fixed: a chunk rewritten by a retry must come out byte-identical.
	gzipLevel = 6
)

// PartProgress is an export part's heartbeat: the chunks written so far and the last key
// they hold. A retried attempt (possibly on another worker) resumes from it.
type PartProgress struct {
	NextChunk int     `json:"next_chunk"`
	LastKey   *string `json:"last_key,omitempty"` // nil before the first chunk
	Rows      int     `json:"rows"`
	Bytes     int64   `json:"bytes"` // compressed
}

var lazyDBMu sync.Mutex

// pool is the worker's dataset connection pool.
func (a *Activities) pool() *DBPool {
	if a.DB != nil {
		return a.DB
	}
	lazyDBMu.Lock()
	defer lazyDBMu.Unlock()
	if a.lazyDB == nil {
		a.lazyDB = &DBPool{}
	}
	return a.lazyDB
}

func (a *Activities) store() (*ArtifactStore, error) {
	if a.Artifacts == nil {
		return nil, errors.New("no artifact store is configured on this worker")
	}
	return a.Artifacts, nil
}

func (a *Activities) dataset(name string) (Dataset, error) {
	d, ok := a.Datasets[name]
	if !ok {
		return Dataset{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("dataset %q is not configured on this worker", name), ErrTypeDatasetMissing, nil)
	}
	// Datasets built in code skip ParseDatasets: validate here too, so only a valid
	// identifier ever reaches SQL.
	if err := d.validate(); err != nil {
		return Dataset{}, invalid("dataset %q is misconfigured: %v", name, err)
	}
	return d.withDefaults(), nil
}

func invalid(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), ErrTypeExportInvalid, nil)
}

func scopeChanged(d Dataset) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("dataset %q changed since the export was approved (config digest now %s); nothing was read", d.Name, d.ConfigDigest()),
		ErrTypeScopeChanged, nil)
}

// query sends one statement to the dataset, telling QueryHook first.
func (a *Activities) query(ctx context.Context, db *sql.DB, d Dataset, q string, args ...any) (*sql.Rows, error) {
	if a.QueryHook != nil {
		a.QueryHook(d.Name, q)
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		if accessRefused(err) {
			activity.GetLogger(ctx).Error("dataset refused the worker's login", "dataset", d.Name, "error", err)
			return nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("dataset %q: the database refused the worker's login or does not exist", d.Name), ErrTypeDatasetAccess, err)
		}
		return nil, fmt.Errorf("dataset %q: query: %w", d.Name, err)
	}
	return rows, nil
}

// accessRefused: err is PostgreSQL's refusal of the login (SQLSTATE class 28: bad password,
// unknown role, pg_hba) or of an unknown database (3D000).
func accessRefused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "28") || pe.Code == "3D000")
}

// qi double-quotes an identifier. Identifiers come only from the validated catalog
// (identRE), so there is never a quote to escape; doubling is a second line of defence.
func qi(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// missingColumns lists the requested columns the dataset does not have.
func missingColumns(d Dataset, cols []string) []string {
	var out []string
	for _, c := range cols {
		if _, ok := d.Column(c); !ok {
			out = append(out, c)
		}
	}
	return out
}

// checkColumns rejects what could not be exported as asked: no columns, unknown or repeated
// ones. It runs before any statement, so only catalog identifiers ever reach SQL.
func checkColumns(d Dataset, cols []string) error {
	if len(cols) == 0 {
		return invalid("dataset %q: no columns requested", d.Name)
	}
	if m := missingColumns(d, cols); len(m) > 0 {
		return invalid("dataset %q has no column %q", d.Name, m[0])
	}
	seen := map[string]bool{}
	for _, c := range cols {
		if seen[c] {
			return invalid("column %q requested twice", c)
		}
		seen[c] = true
	}
	return nil
}

func checkFormat(f string) error {
	if f != FormatJSONL && f != FormatCSV {
		return invalid("format %q: want %q or %q", f, FormatJSONL, FormatCSV)
	}
	return nil
}

// keyString renders a key value as it travels in ranges and heartbeats. Values are never
// echoed in errors: they are row data.
func keyString(d Dataset, v any) (string, error) {
	switch k := v.(type) {
	case nil:
		return "", invalid("dataset %q: a row has a NULL %s; rows without a key cannot be paged", d.Name, d.KeyColumn)
	case int64:
		if d.KeyType == KeyTypeInteger {
			return strconv.FormatInt(k, 10), nil
		}
	case string:
		if d.KeyType == KeyTypeText {
			return k, nil
		}
	case []byte:
		if d.KeyType == KeyTypeText && utf8.Valid(k) {
			return string(k), nil
		}
	}
	return "", invalid("dataset %q: a %s value is not of key_type %s", d.Name, d.KeyColumn, d.KeyType)
}

// keyArg binds a key string as the column's type: int64 for integer keys, so the database
// compares numbers, not text.
func keyArg(d Dataset, k string) (any, error) {
	if d.KeyType == KeyTypeInteger {
		n, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return nil, invalid("key %q is not an integer", k)
		}
		return n, nil
	}
	return k, nil
}

// PlanExport cuts the tenant's rows into key ranges of PartRows rows each. When the
// dataset's config digest is no longer the approved one, it reports the change and sends
// nothing to the database.
func (a *Activities) PlanExport(ctx context.Context, in PlanExportInput) (PlanExportResult, error) {
	d, err := a.dataset(in.Dataset)
	if err != nil {
		return PlanExportResult{}, err
	}
	res := PlanExportResult{
		ConfigDigest:     d.ConfigDigest(),
		Sensitive:        d.AnySensitive(in.Columns),
		SensitiveColumns: sensitiveOf(d, in.Columns),
		Missing:          missingColumns(d, in.Columns),
	}
	res.Approval = &PlanApproval{Required: res.Sensitive, AllowSelf: d.AllowSelfApproval,
		Sensitive: res.SensitiveColumns, Timeout: d.ApprovalTimeout}
	if res.ConfigDigest != in.ConfigDigest {
		res.ScopeChanged = true
		return res, nil
	}
	if in.Tenant == "" {
		return PlanExportResult{}, invalid("no tenant")
	}
	if err := checkColumns(d, in.Columns); err != nil {
		return PlanExportResult{}, err
	}
	partRows := in.PartRows
	if partRows <= 0 {
		partRows = PartRowsDefault
	}
	db, err := a.pool().Open(d)
	if err != nil {
		return PlanExportResult{}, err
	}
	q := fmt.Sprintf(`SELECT %s FROM %s WHERE %s = $1 ORDER BY %s`,
		qi(d.KeyColumn), qi(d.Table), qi(d.TenantColumn), qi(d.KeyColumn))
	// Cancelled on return, so that stopping early (too many rows) abandons the rest of the
	// result instead of draining it.
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows, err := a.query(qctx, db, d, q, in.Tenant)
	if err != nil {
		return PlanExportResult{}, err
	}
	defer func() {
		cancel()
		rows.Close()
	}()
	var (
		after  *string
		last   string
		inPart int
		k      any
	)
	for rows.Next() {
		if err := rows.Scan(&k); err != nil {
			return PlanExportResult{}, fmt.Errorf("dataset %q: %w", d.Name, err)
		}
		if last, err = keyString(d, k); err != nil {
			return PlanExportResult{}, err
		}
		res.Rows++
		if res.Rows > d.MaxRows {
			return PlanExportResult{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("dataset %q: the tenant has more than %d rows, the dataset's max_rows; nothing was exported", d.Name, d.MaxRows),
				ErrTypeDatasetTooLarge, nil)
		}
		if inPart++; inPart == partRows {
			if len(res.Ranges) == partsMax {
				return PlanExportResult{}, invalid("part_rows %d cuts more than %d parts; use larger parts", partRows, partsMax)
			}
			res.Ranges = append(res.Ranges, KeyRange{After: after, Through: last})
			through := last
			after, inPart = &through, 0
			activity.RecordHeartbeat(ctx, res.Rows)
		}
	}
	if err := rows.Err(); err != nil {
		return PlanExportResult{}, fmt.Errorf("dataset %q: %w", d.Name, err)
	}
	if inPart > 0 {
		res.Ranges = append(res.Ranges, KeyRange{After: after, Through: last})
	}
	return res, nil
}

// throttle waits until reading rows rows since start keeps within perSecond (0: no limit).
func throttle(ctx context.Context, perSecond int, start time.Time, rows int) error {
	if perSecond <= 0 {
		return nil
	}
	wait := time.Until(start.Add(time.Duration(float64(rows) / float64(perSecond) * float64(time.Second))))
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

// ExportPart writes one key range of the tenant's rows as chunk objects, one per page of
// PageRows rows, each a complete gzip member. It heartbeats after every chunk and resumes
// from the last heartbeat; a chunk rewritten because its heartbeat was lost comes out
// byte-identical (deterministic encoding and gzip), so a resumed part equals a clean one.
func (a *Activities) ExportPart(ctx context.Context, in ExportPartInput) (PartResult, error) {
	d, err := a.dataset(in.Dataset)
	if err != nil {
		return PartResult{}, err
	}
	if d.ConfigDigest() != in.ConfigDigest {
		return PartResult{}, scopeChanged(d)
	}
	if in.Tenant == "" {
		return PartResult{}, invalid("no tenant")
	}
	if err := checkFormat(in.Format); err != nil {
		return PartResult{}, err
	}
	if err := checkColumns(d, in.Columns); err != nil {
		return PartResult{}, err
	}
	if in.Part < 1 {
		return PartResult{}, invalid("part %d: parts count from 1", in.Part)
	}
	pageRows := in.PageRows
	if pageRows <= 0 {
		pageRows = PageRowsDefault
	}
	if pageRows > pageRowsMax {
		return PartResult{}, invalid("page_rows %d: at most %d", pageRows, pageRowsMax)
	}
	through, err := keyArg(d, in.Range.Through)
	if err != nil {
		return PartResult{}, err
	}
	if in.Range.After != nil {
		if _, err := keyArg(d, *in.Range.After); err != nil {
			return PartResult{}, err
		}
	}
	store, err := a.store()
	if err != nil {
		return PartResult{}, err
	}

	prog := PartProgress{LastKey: in.Range.After}
	if activity.HasHeartbeatDetails(ctx) {
		var hb PartProgress
		// Unreadable or inconsistent details: start over; rewritten chunks are identical.
		if err := activity.GetHeartbeatDetails(ctx, &hb); err == nil && hb.NextChunk > 0 &&
			hb.LastKey != nil && hb.Rows > 0 && hb.Bytes > 0 {
			if _, err := keyArg(d, *hb.LastKey); err == nil {
				prog = hb
			}
		}
	}

	db, err := a.pool().Open(d)
	if err != nil {
		return PartResult{}, err
	}
	sel := make([]string, 0, len(in.Columns)+1)
	sel = append(sel, qi(d.KeyColumn))
	for _, c := range in.Columns {
		sel = append(sel, qi(c))
	}
	head := fmt.Sprintf(`SELECT %s FROM %s WHERE %s = $1 AND `, strings.Join(sel, ", "), qi(d.Table), qi(d.TenantColumn))
	tail := fmt.Sprintf(` ORDER BY %s LIMIT `, qi(d.KeyColumn))
	enc := newRowEncoder(in.Format, in.Columns)
	started, readHere := time.Now(), 0

	for {
		if err := ctx.Err(); err != nil {
			return PartResult{}, err
		}
		var (
			q    string
			args []any
		)
		if prog.LastKey == nil {
			q = head + fmt.Sprintf(`%s <= $2`, qi(d.KeyColumn)) + tail + "$3"
			args = []any{in.Tenant, through, int64(pageRows)}
		} else {
			after, err := keyArg(d, *prog.LastKey)
			if err != nil {
				return PartResult{}, err
			}
			q = head + fmt.Sprintf(`%s > $2 AND %s <= $3`, qi(d.KeyColumn), qi(d.KeyColumn)) + tail + "$4"
			args = []any{in.Tenant, after, through, int64(pageRows)}
		}
		chunk, n, lastKey, err := a.readPage(ctx, db, d, enc, q, args)
		if err != nil {
			return PartResult{}, err
		}
		if n == 0 {
			break
		}
		opts := &blob.WriterOptions{ContentType: "application/gzip"}
		if err := store.b.WriteAll(ctx, chunkKey(in.JobID, in.FirstRunID, in.Part, prog.NextChunk), chunk, opts); err != nil {
			return PartResult{}, fmt.Errorf("write chunk: %w", err)
		}
		prog.NextChunk++
		prog.LastKey = &lastKey
		prog.Rows += n
		prog.Bytes += int64(len(chunk))
		activity.RecordHeartbeat(ctx, prog)
		if n < pageRows {
			break
		}
		readHere += n
		if err := throttle(ctx, d.MaxRowsPerSecond, started, readHere); err != nil {
			return PartResult{}, err
		}
	}
	return PartResult{Part: in.Part, Chunks: prog.NextChunk, Rows: prog.Rows, Bytes: prog.Bytes}, nil
}

// readPage runs one page query and returns its rows encoded as one gzip member, the row
// count and the page's last key.
func (a *Activities) readPage(ctx context.Context, db *sql.DB, d Dataset, enc *rowEncoder, q string, args []any) ([]byte, int, string, error) {
	rows, err := a.query(ctx, db, d, q, args...)
	if err != nil {
		return nil, 0, "", err
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, 0, "", fmt.Errorf("dataset %q: %w", d.Name, err)
	}
	enc.reset(types[1:])
	vals := make([]any, len(types))
	ptrs := make([]any, len(types))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var (
		n    int
		last string
	)
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, 0, "", fmt.Errorf("dataset %q: %w", d.Name, err)
		}
		if last, err = keyString(d, vals[0]); err != nil {
			return nil, 0, "", err
		}
		if err := enc.row(vals[1:]); err != nil {
			return nil, 0, "", err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, 0, "", fmt.Errorf("dataset %q: %w", d.Name, err)
	}
	if n == 0 {
		return nil, 0, "", nil
	}
	chunk, err := enc.finish()
	if err != nil {
		return nil, 0, "", err
	}
	return chunk, n, last, nil
}

// gzipWriters recycles compressors: each holds several hundred KB of state.
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

// rowEncoder turns rows into jsonl or csv text, one page at a time.
//
// Values encode the same whatever the driver: NULL is null (jsonl) or an empty field (csv);
// integers and booleans as such; floats in the shortest form that reads back exactly (as
// encoding/json writes them; NaN and ±Inf, which JSON lacks, as the strings "NaN", "+Inf",
// "-Inf"); text as text (invalid UTF-8 replaced by U+FFFD); bytes as text when they are valid
// UTF-8, else standard base64 (a binary column cannot be told from text otherwise); times as
// RFC 3339 with nanoseconds in UTC, except DATE columns, which have no time of day or zone,
// as YYYY-MM-DD (so a PostgreSQL date equals the same date stored as text in SQLite).
// csv rows end in "\n" and newlines inside fields are kept as they are.
type rowEncoder struct {
	format string
	cols   []string
	keys   [][]byte // jsonl: `{"col":` / `,"col":`
	date   []bool
	raw    bytes.Buffer
	csv    *csv.Writer
	rec    []string
}

func newRowEncoder(format string, cols []string) *rowEncoder {
	e := &rowEncoder{format: format, cols: cols, date: make([]bool, len(cols))}
	for i, c := range cols {
		sep := byte(',')
		if i == 0 {
			sep = '{'
		}
		k := appendJSONString([]byte{sep}, c)
		e.keys = append(e.keys, append(k, ':'))
	}
	e.csv = csv.NewWriter(&e.raw)
	e.rec = make([]string, len(cols))
	return e
}

// reset starts a page; types are the page's value columns (key column excluded).
func (e *rowEncoder) reset(types []*sql.ColumnType) {
	e.raw.Reset()
	for i := range e.date {
		e.date[i] = i < len(types) && strings.EqualFold(types[i].DatabaseTypeName(), "DATE")
	}
}

func (e *rowEncoder) row(vals []any) error {
	if len(vals) != len(e.cols) {
		return fmt.Errorf("row has %d values for %d columns", len(vals), len(e.cols))
	}
	if e.format == FormatCSV {
		for i, v := range vals {
			s, k := scalar(v, e.date[i])
			if k == kindNull {
				s = ""
			}
			e.rec[i] = s
		}
		if len(e.rec) == 1 && e.rec[0] == "" {
			// encoding/csv writes a lone empty field as an empty line, which readers skip:
			// quote it so the row survives.
			e.csv.Flush()
			e.raw.WriteString("\"\"\n")
			return e.csv.Error()
		}
		return e.csv.Write(e.rec)
	}
	b := e.raw.AvailableBuffer()
	for i, v := range vals {
		b = append(b, e.keys[i]...)
		s, k := scalar(v, e.date[i])
		switch k {
		case kindNull:
			b = append(b, "null"...)
		case kindBare:
			b = append(b, s...)
		default:
			b = appendJSONString(b, s)
		}
	}
	b = append(b, '}', '\n')
	e.raw.Write(b)
	return nil
}

// finish compresses the page's text into one gzip member.
func (e *rowEncoder) finish() ([]byte, error) {
	if e.format == FormatCSV {
		e.csv.Flush()
		if err := e.csv.Error(); err != nil {
			return nil, err
		}
	}
	return gzipMember(e.raw.Bytes())
}

// csvHeader is the csv header line as one gzip member.
func csvHeader(cols []string) ([]byte, error) {
	var raw bytes.Buffer
	w := csv.NewWriter(&raw)
	if err := w.Write(cols); err != nil {
		return nil, err
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, err
	}
	return gzipMember(raw.Bytes())
}

type valueKind int

const (
	kindNull   valueKind = iota
	kindBare             // a JSON number or boolean
	kindString           // JSON writes it quoted
)

// scalar is a value's text and how JSON writes it. Unknown driver types fall back to their
// fmt form, so no value can make an export fail or panic.
func scalar(v any, date bool) (string, valueKind) {
	switch x := v.(type) {
	case nil:
		return "", kindNull
	case int64:
		return strconv.FormatInt(x, 10), kindBare
	case int:
		return strconv.Itoa(x), kindBare
	case int32:
		return strconv.FormatInt(int64(x), 10), kindBare
	case uint32:
		return strconv.FormatUint(uint64(x), 10), kindBare
	case uint64:
		return strconv.FormatUint(x, 10), kindBare
	case float64:
		return formatFloat(x, 64)
	case float32:
		return formatFloat(float64(x), 32)
	case bool:
		return strconv.FormatBool(x), kindBare
	case string:
		return strings.ToValidUTF8(x, "\uFFFD"), kindString
	case []byte:
		if utf8.Valid(x) {
			return string(x), kindString
		}
		return base64.StdEncoding.EncodeToString(x), kindString
	case time.Time:
		if date {
			return x.Format(time.DateOnly), kindString
		}
		return x.UTC().Format(time.RFC3339Nano), kindString
	default:
		return strings.ToValidUTF8(fmt.Sprint(x), "\uFFFD"), kindString
	}
}

// formatFloat writes f like encoding/json does (shortest exact form; exponent only for very
// large or small magnitudes).
func formatFloat(f float64, bits int) (string, valueKind) {
	switch {
	case math.IsNaN(f):
		return "NaN", kindString
	case math.IsInf(f, 1):
		return "+Inf", kindString
	case math.IsInf(f, -1):
		return "-Inf", kindString
	}
	abs := math.Abs(f)
	fmtc := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		fmtc = 'e'
	}
	b := strconv.AppendFloat(nil, f, fmtc, -1, bits)
	if fmtc == 'e' {
		// e-09 → e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return string(b), kindBare
}

// appendJSONString quotes s as encoding/json does, minus its HTML escaping (<, >, & stay as
// they are: the output is a data file, not a web page).
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 break JavaScript string literals; encoding/json escapes them too.
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// artifactFileName is the download name: the job ID with "/" as "-" and anything outside
// [A-Za-z0-9._-] as "_", so it needs no quoting care in Content-Disposition.
func artifactFileName(jobID, format string) string {
	var b strings.Builder
	for _, r := range jobID {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		case r == '/':
			b.WriteByte('-')
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 120 {
			break
		}
	}
	name := strings.Trim(b.String(), ".-_")
	if name == "" {
		name = "export"
	}
	return name + "." + format + ".gz"
}

// FinalizeExport concatenates the parts' chunks, in part and chunk order, into one gzip file
// (gzip members concatenate into a valid gzip stream), writes its manifest next to it and
// deletes the chunks. For csv the file starts with one member holding the header line; it
// belongs to no part, so part digests cover only their rows and the whole-file digest covers
// the header too. A jsonl export of zero rows is one empty member, so it still gunzips.
// A retry after success returns the stored manifest (the chunks may be gone by then), but only
// a manifest this very input wrote: same first run ID and input digest. Anything else stored
// there (an earlier instance's, under a legacy prefix) is never returned; it is overwritten.
func (a *Activities) FinalizeExport(ctx context.Context, in FinalizeExportInput) (Manifest, error) {
	store, err := a.store()
	if err != nil {
		return Manifest{}, err
	}
	prefix := ExportPrefix(in.JobID, in.FirstRunID)
	digest, err := finalizeDigest(in)
	if err != nil {
		return Manifest{}, err
	}
	if m, err := store.ReadManifest(ctx, in.JobID, in.FirstRunID); err == nil {
		if m.RunID == in.FirstRunID && m.InputDigest == digest {
			// An attempt that died between the manifest and the cleanup left chunks behind.
			if err := store.deletePrefix(ctx, prefix+"part-"); err != nil {
				return Manifest{}, err
			}
			return m, nil
		}
		activity.GetLogger(ctx).Warn("a stored manifest of another job instance or input is ignored and replaced",
			"job_id", in.JobID, "first_run_id", in.FirstRunID, "stored_run_id", m.RunID)
	} else if !errors.Is(err, ErrArtifactGone) {
		return Manifest{}, err
	}
	if err := checkFormat(in.Format); err != nil {
		return Manifest{}, err
	}
	if len(in.Columns) == 0 {
		return Manifest{}, invalid("no columns")
	}
	parts := slices.Clone(in.Parts)
	slices.SortFunc(parts, func(x, y PartResult) int { return x.Part - y.Part })
	chunks := 0
	for i, p := range parts {
		if p.Part < 1 || (i > 0 && parts[i-1].Part == p.Part) || p.Chunks < 0 || p.Rows < 0 || p.Bytes < 0 {
			return Manifest{}, invalid("part %d: malformed or repeated part result", p.Part)
		}
		chunks += p.Chunks
	}
	started := activity.GetInfo(ctx).StartedTime
	if started.IsZero() {
		started = time.Now()
	}

	key := prefix + "export." + in.Format + ".gz"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := store.b.NewWriter(wctx, key, &blob.WriterOptions{ContentType: "application/gzip"})
	if err != nil {
		return Manifest{}, fmt.Errorf("write artifact: %w", err)
	}
	abort := func(err error) (Manifest, error) {
		cancel() // before Close: the partial object is discarded, never committed
		_ = w.Close()
		return Manifest{}, err
	}
	whole := sha256.New()
	var total int64
	out := io.MultiWriter(w, whole)
	var lead []byte
	switch {
	case in.Format == FormatCSV:
		lead, err = csvHeader(in.Columns)
	case chunks == 0:
		lead, err = gzipMember(nil)
	}
	if err != nil {
		return abort(err)
	}
	if _, err := out.Write(lead); err != nil {
		return abort(fmt.Errorf("write artifact: %w", err))
	}
	total += int64(len(lead))

	m := Manifest{
		Object:      key,
		FileName:    artifactFileName(in.JobID, in.Format),
		Format:      in.Format,
		Columns:     slices.Clone(in.Columns),
		Parts:       make([]ManifestPart, 0, len(parts)),
		CreatedAt:   started.UTC(),
		ExpiresAt:   in.ExpiresAt.UTC(),
		RunID:       in.FirstRunID,
		InputDigest: digest,
		Decision:    in.Decision,
	}
	for _, p := range parts {
		ph := sha256.New()
		var pb int64
		for c := 0; c < p.Chunks; c++ {
			n, err := store.copyObject(ctx, io.MultiWriter(out, ph), chunkKey(in.JobID, in.FirstRunID, p.Part, c))
			if err != nil {
				return abort(fmt.Errorf("part %d chunk %d: %w", p.Part, c, err))
			}
			pb += n
			activity.RecordHeartbeat(ctx, p.Part)
		}
		if pb != p.Bytes {
			return abort(fmt.Errorf("part %d: its chunks hold %d bytes, the part reported %d", p.Part, pb, p.Bytes))
		}
		total += pb
		m.Rows += p.Rows
		m.Parts = append(m.Parts, ManifestPart{Part: p.Part, Rows: p.Rows, Bytes: pb, SHA256: hex.EncodeToString(ph.Sum(nil))})
	}
	if err := w.Close(); err != nil {
		return Manifest{}, fmt.Errorf("write artifact: %w", err)
	}
	m.Bytes = total
	m.SHA256 = hex.EncodeToString(whole.Sum(nil))

	mb, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, err
	}
	if err := store.b.WriteAll(ctx, manifestKey(in.JobID, in.FirstRunID), mb, &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return Manifest{}, fmt.Errorf("write manifest: %w", err)
	}
	if err := store.deletePrefix(ctx, prefix+"part-"); err != nil {
		return Manifest{}, err
	}
	activity.GetLogger(ctx).Info("export finalized", "job_id", in.JobID, "first_run_id", in.FirstRunID, "rows", m.Rows, "bytes", m.Bytes, "parts", len(m.Parts))
	return m, nil
}

// copyObject copies one object into w.
func (s *ArtifactStore) copyObject(ctx context.Context, w io.Writer, key string) (int64, error) {
	r, err := s.b.NewReader(ctx, key, nil)
	if err != nil {
		return 0, gone(err)
	}
	defer r.Close()
	return io.Copy(w, r)
}

// deletePrefix deletes every object under prefix. Objects already gone are fine: another
// attempt may be deleting the same ones.
func (s *ArtifactStore) deletePrefix(ctx context.Context, prefix string) error {
	var keys []string
	it := s.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
	}
	for _, k := range keys {
		if err := s.b.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("delete %s: %w", k, err)
		}
	}
	return nil
}

// finalizeDigest is "sha256:<hex>" of the canonical JSON of a finalize input: what a stored
// manifest must have been written for to be reused.
func finalizeDigest(in FinalizeExportInput) (string, error) {
	in.ExpiresAt = in.ExpiresAt.UTC()
	b, err := json.Marshal(in)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// DeleteExport deletes every object of one export job instance: artifact, manifest and any
// chunks, under ExportPrefix(JobID, FirstRunID) only. Deleting what is already gone succeeds.
func (a *Activities) DeleteExport(ctx context.Context, in DeleteExportInput) error {
	if in.JobID == "" {
		return invalid("no job_id")
	}
	store, err := a.store()
	if err != nil {
		return err
	}
	return store.deletePrefix(ctx, ExportPrefix(in.JobID, in.FirstRunID))
}

// sensitiveOf lists the columns of cols that d marks sensitive, in cols' order.
func sensitiveOf(d Dataset, cols []string) []string {
	var out []string
	for _, c := range cols {
		if col, ok := d.Column(c); ok && col.Sensitive {
			out = append(out, c)
		}
	}
	return out
}
