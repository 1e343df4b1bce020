package activities

// The PostgreSQL fast path of ExportPart: rows read as pgx's raw wire values on the pool's own
// connection, each column turned into its export text by a decoder chosen once per query from
// its type OID and wire format. It skips database/sql's per-row driver.Value conversion,
// boxing and string copies, which were half of an export's CPU. Every decoder writes exactly
// the text the database/sql path writes for the same value (TestPGRawMatchesSQL holds them to
// it over every type it handles, edge values included); a query with any other column type
// goes the database/sql way.

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jobgate/jobgate/activities/contract"
)

// pgCellDecoder turns one non-NULL raw value into its export text and its JSON kind. The text
// is src itself when the wire text already is the export text, else it is written over
// *scratch (which keeps the grown buffer for the next value). Malformed input is an error,
// never a panic.
type pgCellDecoder func(scratch *[]byte, src []byte) ([]byte, valueKind, error)

// pgDecoderFor is the decoder for a column of the given type and wire format, or nil when
// the fast path does not handle it.
func pgDecoderFor(oid uint32, format int16) pgCellDecoder {
	if format == pgtype.TextFormatCode {
		switch oid {
		case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID:
			return decodePGText
		}
		return nil
	}
	switch oid {
	case pgtype.Int2OID:
		return decodePGInt(2)
	case pgtype.Int4OID:
		return decodePGInt(4)
	case pgtype.Int8OID:
		return decodePGInt(8)
	case pgtype.BoolOID:
		return decodePGBool
	case pgtype.Float4OID:
		return decodePGFloat4
	case pgtype.Float8OID:
		return decodePGFloat8
	case pgtype.DateOID:
		return decodePGDate
	case pgtype.TimestampOID, pgtype.TimestamptzOID:
		return decodePGTimestamp
	}
	return nil
}

// decodePGText: text arrives as text; invalid UTF-8 (a SQL_ASCII database) is replaced as
// the database/sql path replaces it, one U+FFFD per invalid run.
func decodePGText(scratch *[]byte, src []byte) ([]byte, valueKind, error) {
	if utf8.Valid(src) {
		return src, kindString, nil
	}
	*scratch = append((*scratch)[:0], strings.ToValidUTF8(string(src), "\uFFFD")...)
	return *scratch, kindString, nil
}

// pgBinary is the decoder of a binary-format type whose values are size bytes: dec is called
// with exactly that many, and any other length is an error naming the type, as pgx's is.
func pgBinary(name string, size int, dec pgCellDecoder) pgCellDecoder {
	return func(scratch *[]byte, src []byte) ([]byte, valueKind, error) {
		if len(src) != size {
			return nil, 0, fmt.Errorf("invalid length for %s: %d", name, len(src))
		}
		return dec(scratch, src)
	}
}

func decodePGInt(size int) pgCellDecoder {
	return pgBinary("int"+strconv.Itoa(size), size, func(scratch *[]byte, src []byte) ([]byte, valueKind, error) {
		var n int64
		switch size {
		case 2:
			n = int64(int16(binary.BigEndian.Uint16(src)))
		case 4:
			n = int64(int32(binary.BigEndian.Uint32(src)))
		default:
			n = int64(binary.BigEndian.Uint64(src))
		}
		*scratch = strconv.AppendInt((*scratch)[:0], n, 10)
		return *scratch, kindBare, nil
	})
}

var decodePGBool = pgBinary("bool", 1, func(scratch *[]byte, src []byte) ([]byte, valueKind, error) {
	*scratch = strconv.AppendBool((*scratch)[:0], src[0] == 1)
	return *scratch, kindBare, nil
})

// decodePGFloat4: database/sql hands a float4 over as a float64, so it is written with
// float64's shortest form (0.1f is 0.10000000149011612), as that path writes it.
var decodePGFloat4 = pgBinary("float4", 4, func(scratch *[]byte, src []byte) ([]byte, valueKind, error) {
	s, k := formatFloat(float64(math.Float32frombits(binary.BigEndian.Uint32(src))), 64)
	*scratch = append((*scratch)[:0], s...)
	return *scratch, k, nil
})

var decodePGFloat8 = pgBinary("float8", 8, func(scratch *[]byte, src []byte) ([]byte, valueKind, error) {
	s, k := formatFloat(math.Float64frombits(binary.BigEndian.Uint64(src)), 64)
	*scratch = append((*scratch)[:0], s...)
	return *scratch, k, nil
})

// pgEpoch is PostgreSQL's day and microsecond zero, 2000-01-01 UTC.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// decodePGDate: days since 2000-01-01 as YYYY-MM-DD; ±infinity as pgx names them.
var decodePGDate = pgBinary("date", 4, func(scratch *[]byte, src []byte) ([]byte, valueKind, error) {
	switch days := int32(binary.BigEndian.Uint32(src)); days {
	case math.MaxInt32, math.MinInt32:
		return pgInfinity(scratch, days < 0)
	default:
		t := time.Date(2000, 1, int(1+days), 0, 0, 0, 0, time.UTC)
		if y, m, d := t.Date(); y >= 0 && y <= 9999 {
			// time.Format's output for four-digit years, without its layout parsing.
			*scratch = append((*scratch)[:0], byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10),
				'-', byte('0'+int(m)/10), byte('0'+int(m)%10), '-', byte('0'+d/10), byte('0'+d%10))
			return *scratch, kindString, nil
		}
		*scratch = t.AppendFormat((*scratch)[:0], time.DateOnly)
		return *scratch, kindString, nil
	}
})

// pgInfinity is the text of a date or timestamp at its type's extreme: infinity, or -infinity
// when negative, as pgx names them.
func pgInfinity(scratch *[]byte, negative bool) ([]byte, valueKind, error) {
	text := "infinity"
	if negative {
		text = "-infinity"
	}
	*scratch = append((*scratch)[:0], text...)
	return *scratch, kindString, nil
}

// decodePGTimestamp: microseconds since 2000-01-01 (UTC for timestamptz, wall time read as
// UTC for timestamp, as pgx reads both) in RFC 3339 with nanoseconds, UTC.
var decodePGTimestamp = pgBinary("timestamp", 8, func(scratch *[]byte, src []byte) ([]byte, valueKind, error) {
	switch us := int64(binary.BigEndian.Uint64(src)); us {
	case math.MaxInt64, math.MinInt64:
		return pgInfinity(scratch, us < 0)
	default:
		const epochUS = 946_684_800 * 1_000_000 // Unix time of pgEpoch
		t := time.Unix(epochUS/1_000_000+us/1_000_000, epochUS%1_000_000*1_000+us%1_000_000*1_000)
		*scratch = t.UTC().AppendFormat((*scratch)[:0], time.RFC3339Nano)
		return *scratch, kindString, nil
	}
})

// pgRawRows reads a query's rows as raw wire values and feeds them to a rowEncoder.
type pgRawRows struct {
	rows    pgx.Rows
	key     pgCellDecoder
	cols    []pgCellDecoder
	keyBuf  []byte // the key's text when it is not the wire text
	cellBuf []byte // one cell's text, copied into the encoder before the next
}

// newPGRawRows prepares decoders for rows' columns (the key column first) or reports, with
// ok false, that some column needs the database/sql path.
func newPGRawRows(d contract.Dataset, fds []pgconn.FieldDescription, rows pgx.Rows) (*pgRawRows, bool) {
	if len(fds) < 2 {
		return nil, false
	}
	r := &pgRawRows{rows: rows, cols: make([]pgCellDecoder, len(fds)-1)}
	switch k := fds[0]; {
	case d.KeyType == contract.KeyTypeInteger && k.Format == pgtype.BinaryFormatCode &&
		(k.DataTypeOID == pgtype.Int2OID || k.DataTypeOID == pgtype.Int4OID || k.DataTypeOID == pgtype.Int8OID):
		r.key = pgDecoderFor(k.DataTypeOID, k.Format)
	case d.KeyType == contract.KeyTypeText && k.Format == pgtype.TextFormatCode:
		if dec := pgDecoderFor(k.DataTypeOID, k.Format); dec != nil {
			// keyString keeps a text key as the driver gave it, invalid UTF-8 included.
			r.key = func(_ *[]byte, src []byte) ([]byte, valueKind, error) { return src, kindString, nil }
		}
	}
	if r.key == nil {
		return nil, false
	}
	for i, fd := range fds[1:] {
		if r.cols[i] = pgDecoderFor(fd.DataTypeOID, fd.Format); r.cols[i] == nil {
			return nil, false
		}
	}
	return r, true
}

func (r *pgRawRows) Next() bool { return r.rows.Next() }
func (r *pgRawRows) Err() error { return r.rows.Err() }

// encode writes the current row's values into enc and returns its key text, valid until the
// next call.
func (r *pgRawRows) encode(d contract.Dataset, enc *rowEncoder) ([]byte, error) {
	raw := r.rows.RawValues()
	if len(raw) != len(r.cols)+1 {
		return nil, fmt.Errorf("dataset %q: row has %d values", d.Name, len(raw))
	}
	if raw[0] == nil {
		return nil, invalid("dataset %q: a row has a NULL %s; rows without a key cannot be paged", d.Name, d.KeyColumn)
	}
	key, _, err := r.key(&r.keyBuf, raw[0])
	if err != nil {
		return nil, fmt.Errorf("dataset %q: %w", d.Name, err)
	}
	enc.begin()
	for i, dec := range r.cols {
		src := raw[i+1]
		if src == nil {
			enc.cell(i, nil, kindNull)
			continue
		}
		text, k, err := dec(&r.cellBuf, src)
		if err != nil {
			return nil, fmt.Errorf("dataset %q: column %s: %w", d.Name, enc.cols[i], err)
		}
		enc.cell(i, text, k)
	}
	enc.end()
	return key, nil
}

// queryPGRaw runs q on one of db's connections through pgx directly and calls each with the
// rows, when every column has a fast decoder. fast is false, with no row read, when the query
// needs the database/sql path: the statement is described first, so that costs one round
// trip, not a result to drain. cancel is ctx's: an error from each cancels the query before
// its rows are closed, so the rest of the result is abandoned, not drained.
func (a *Activities) queryPGRaw(ctx context.Context, cancel context.CancelFunc, db *sql.DB, d contract.Dataset, q string, args []any,
	each func(*pgRawRows) error) (fast bool, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, a.queryErr(ctx, d, err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		sc, isPgx := dc.(*stdlib.Conn)
		if !isPgx {
			return nil
		}
		pc := sc.Conn()
		if pc.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
			// A DSN that asked for another mode (simple protocol behind a transaction-pooling
			// pgbouncer, say) gets what it asked for: named statements and binary results are
			// this path's premise, so database/sql serves it.
			return nil
		}
		// Prepared under a name pgx then runs Query by. A digest, not the text: the server
		// compares names by their first 63 bytes. The statement lives as long as this query and
		// is deallocated before the connection goes back to the pool: pgx never evicts a
		// statement prepared by name, so a kept one would pile up per column list on every
		// connection, and would fail every later part after a column's type changed ("cached
		// plan must not change result type"). One round trip per query.
		sum := sha256.Sum256([]byte(q))
		name := "jobgate_export_" + hex.EncodeToString(sum[:16])
		sd, err := pc.Prepare(ctx, name, q)
		if err != nil {
			return a.queryErr(ctx, d, err)
		}
		defer func() {
			if pc.IsClosed() || pc.PgConn().IsBusy() {
				return // a cancelled query closed the connection; the pool drops it
			}
			dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer dcancel()
			_ = pc.Deallocate(dctx, name)
		}()
		fields := make([]pgconn.FieldDescription, len(sd.Fields))
		for i, f := range sd.Fields {
			f.Format = pc.TypeMap().FormatCodeForOID(f.DataTypeOID)
			fields[i] = f
		}
		if _, ok := newPGRawRows(d, fields, nil); !ok {
			return nil
		}
		if a.QueryHook != nil {
			a.QueryHook(d.Name, q)
		}
		rows, err := pc.Query(ctx, name, args...)
		if err != nil {
			return a.queryErr(ctx, d, err)
		}
		if len(rows.FieldDescriptions()) == 0 {
			// The statement failed before its first row: the server's error, not a guess.
			rows.Close()
			err := rows.Err()
			if err == nil {
				err = errors.New("no result columns")
			}
			return a.queryErr(ctx, d, err)
		}
		r, ok := newPGRawRows(d, rows.FieldDescriptions(), rows)
		if !ok {
			// The formats pgx chose differ from the ones it said it would: do not guess.
			cancel()
			rows.Close()
			return fmt.Errorf("dataset %q: unexpected result formats", d.Name)
		}
		fast = true
		if err := each(r); err != nil {
			cancel()
			rows.Close()
			return err
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("dataset %q: %w", d.Name, err)
		}
		return nil
	})
	return fast, err
}
