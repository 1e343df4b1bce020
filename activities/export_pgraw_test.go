package activities

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/tests/support/pgtest"
)

// TestPGRawMatchesSQL: an export of every column type the PostgreSQL raw path decodes, edge
// values included (NULL, ±infinity, BC and five-digit years, NaN, ±Inf, -0, float4 rounding,
// csv quoting, leading spaces, non-ASCII), writes the same bytes as the database/sql path,
// in both formats, with integer and text keys. A column type the raw path does not know
// (numeric, uuid, jsonb) takes the database/sql path and still exports the same bytes.
func TestPGRawMatchesSQL(t *testing.T) {
	s := pgtest.Start(t)
	s.Exec(t, `CREATE TABLE typed (id bigint PRIMARY KEY, tenant text NOT NULL, code text NOT NULL UNIQUE,
		i2 smallint, i4 integer, i8 bigint, t text, vc varchar(20), bp char(4), nm name, b boolean,
		f4 real, f8 double precision, d date, ts timestamp, tz timestamptz,
		num numeric, u uuid, j jsonb)`)
	vals := []string{
		`(1, 'acme', 'k1', -32768, -2147483648, -9223372036854775808, '', '', '', '', true,
			0.1, 0.1, '2024-02-29', '2024-02-29 23:59:58.123456', '2024-02-29 23:59:58.123456+02', 1.50, '00000000-0000-0000-0000-000000000001', '{"a":1}')`,
		`(2, 'acme', 'k 2', 32767, 2147483647, 9223372036854775807, 'a,b', ' lead', 'x', 'nm', false,
			'NaN', 'Infinity', 'infinity', 'infinity', '-infinity', 'NaN', NULL, '[1,"x"]')`,
		`(3, 'acme', 'k"3', 0, 0, 0, E'line\nbreak', E'\t', 'ab', E'\\.', NULL,
			'-Infinity', '-0', '-infinity', '-infinity', 'infinity', -0.000, NULL, 'null')`,
		`(4, 'acme', 'é4', NULL, NULL, NULL, 'say "hi"', 'ünï', 'ü', 'x y', true,
			3.4028235e38, 1e21, '0044-03-15 BC', '0001-01-01 00:00:00 BC', '1999-12-31 23:59:59.999999+00', 1e-20, NULL, NULL)`,
		`(5, 'acme', 'k5', 1, 2, 3, NULL, NULL, NULL, NULL, NULL,
			1e-7, 1e-7, '12345-06-07', '294276-12-31 23:59:59.999999', '1970-01-01 00:00:00+00', NULL, NULL, NULL)`,
		`(6, 'acme', 'k6', -1, -2, -3, E'\u2028 sep', 'x', NULL, NULL, false,
			-1.5, 123456789.125, '2000-01-01', '2000-01-01 00:00:00', '2000-01-01 00:00:00.000001+00', 0, NULL, NULL)`,
		`(7, 'globex', 'k7', 9, 9, 9, 'other tenant', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
	}
	s.Exec(t, `INSERT INTO typed VALUES `+strings.Join(vals, ", "))
	fast := []string{"i2", "i4", "i8", "t", "vc", "bp", "nm", "b", "f4", "f8", "d", "ts", "tz"}
	slow := []string{"num", "u", "j"}
	var cols []contract.Column
	for _, c := range append(append([]string{"id", "code"}, fast...), slow...) {
		cols = append(cols, contract.Column{Name: c})
	}
	byID := contract.Dataset{Name: "typed", Driver: contract.DriverPostgres, DSN: s.DSN, Table: "typed", TenantColumn: "tenant",
		KeyColumn: "id", KeyType: contract.KeyTypeInteger, Columns: cols}.WithDefaults()
	byCode := byID
	byCode.Name, byCode.KeyColumn, byCode.KeyType = "typed_code", "code", contract.KeyTypeText
	// A DSN that chose the simple protocol (a transaction-pooling pgbouncer) keeps database/sql.
	simple := byID
	simple.Name, simple.DSN = "typed_simple", s.DSN+"&default_query_exec_mode=simple_protocol"
	ds := contract.Datasets{"typed": byID, "typed_code": byCode, "typed_simple": simple}

	for _, c := range []struct {
		dataset string
		columns []string
		raw     bool // the raw path serves it
	}{
		{"typed", append([]string{"code"}, fast...), true},
		{"typed_code", append([]string{"id"}, fast...), true},
		{"typed", []string{"t"}, true}, // a lone text column: its empty value is quoted
		{"typed", append(slices.Clone(fast), slow...), false},
		// (Text-format results: pgx's text parsing refuses five- and six-digit years, so not ts or d.)
		{"typed_simple", []string{"code", "i2", "i8", "t", "bp", "b", "f8"}, false},
	} {
		for _, format := range []string{contract.FormatCSV, contract.FormatJSONL} {
			name := fmt.Sprintf("%s/%s/%d-columns", c.dataset, format, len(c.columns))
			t.Run(name, func(t *testing.T) {
				j := job{id: "acme/export/raw-" + strings.ReplaceAll(name, "/", "-"), tenant: "acme", dataset: c.dataset,
					format: format, columns: c.columns, partRows: 4, pageRows: 2}
				before := rawExecs(t, s)
				raw, ref := newHarness(t, ds), newHarness(t, ds)
				ref.a.sqlRowsOnly = true
				_, _, mr := raw.run(t, j)
				_, _, ms := ref.run(t, j)
				if mr.Rows != 6 {
					t.Fatalf("%d rows, want acme's 6", mr.Rows)
				}
				got, want := raw.artifact(t, mr), ref.artifact(t, ms)
				if !bytes.Equal(got, want) {
					t.Fatalf("raw path:\n%s\ndatabase/sql path:\n%s", got, want)
				}
				if mr.SHA256 != ms.SHA256 {
					t.Fatalf("same text, different artifacts: %s vs %s", mr.SHA256, ms.SHA256)
				}
				// Which path ran shows in the server's log: the raw path executes a statement it
				// prepared under a jobgate_export_ name; database/sql's are pgx's stmtcache ones.
				if ran := rawExecs(t, s) > before; ran != c.raw {
					t.Fatalf("raw path ran: %v, want %v", ran, c.raw)
				}
			})
		}
	}
}

// rawExecs counts the server's logged executions of the raw path's named statements.
func rawExecs(t *testing.T, s *pgtest.Server) int {
	b, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("execute jobgate_export_"))
}

// FuzzPGDecoders: each raw decoder, fed any bytes, returns an error or the text the database/sql
// path writes for the value pgx itself decodes from the same bytes; it never panics.
func FuzzPGDecoders(f *testing.F) {
	be := func(n int, v uint64) []byte {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, v)
		return b[8-n:]
	}
	for _, oid := range []uint32{pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.BoolOID, pgtype.Float4OID,
		pgtype.Float8OID, pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID, pgtype.TextOID} {
		f.Add(oid, []byte{})
		f.Add(oid, be(2, 0x8000))
		f.Add(oid, be(4, math.MaxInt32))
		f.Add(oid, be(4, 1<<31))
		f.Add(oid, be(8, math.MaxInt64))
		f.Add(oid, be(8, 1<<63))
		f.Add(oid, be(8, math.Float64bits(math.NaN())))
		f.Add(oid, []byte("a\xffb"))
		// Finite values, so a wrong digit in a fast formatter fails on the seeds alone:
		// 2024-02-29 (8825 days), 1999-12-31 (-1), 0001-01-01; 2024-02-29 23:59:58.123456 UTC;
		// 12345; 0.1.
		f.Add(oid, be(4, 8825))
		f.Add(oid, be(4, 0xffffffff))
		f.Add(oid, be(4, 0xFFF4DBF9)) // -730119 days
		f.Add(oid, be(8, 762479998123456))
		f.Add(oid, be(8, 12345))
		f.Add(oid, be(8, math.Float64bits(0.1)))
		f.Add(oid, be(4, uint64(math.Float32bits(0.1))))
	}
	m := pgtype.NewMap()
	f.Fuzz(func(t *testing.T, oid uint32, src []byte) {
		format := int16(pgtype.BinaryFormatCode)
		if oid == pgtype.TextOID {
			format = pgtype.TextFormatCode
		}
		dec := pgDecoderFor(oid, format)
		if dec == nil {
			return
		}
		var scratch []byte
		text, kind, err := dec(&scratch, src)
		want, wantKind, wantErr := viaPGX(m, oid, format, src)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("oid %d % x: error %v, pgx %v", oid, src, err, wantErr)
		}
		if err == nil && (string(text) != want || kind != wantKind) {
			t.Fatalf("oid %d % x: %q (%d), database/sql path %q (%d)", oid, src, text, kind, want, wantKind)
		}
	})
}

// viaPGX decodes src as pgx's database/sql driver does for these types and renders it with
// scalar, as the database/sql export path does.
func viaPGX(m *pgtype.Map, oid uint32, format int16, src []byte) (string, valueKind, error) {
	var v any
	var err error
	switch oid {
	case pgtype.Int2OID:
		var d int16
		err = m.PlanScan(oid, format, &d).Scan(src, &d)
		v = int64(d)
	case pgtype.Int4OID:
		var d int32
		err = m.PlanScan(oid, format, &d).Scan(src, &d)
		v = int64(d)
	case pgtype.Int8OID:
		var d int64
		err = m.PlanScan(oid, format, &d).Scan(src, &d)
		v = d
	case pgtype.BoolOID:
		var d bool
		err = m.PlanScan(oid, format, &d).Scan(src, &d)
		v = d
	case pgtype.Float4OID:
		var d float32
		err = m.PlanScan(oid, format, &d).Scan(src, &d)
		v = float64(d)
	case pgtype.Float8OID:
		var d float64
		err = m.PlanScan(oid, format, &d).Scan(src, &d)
		v = d
	case pgtype.DateOID:
		var d pgtype.Date
		if err = m.PlanScan(oid, format, &d).Scan(src, &d); err == nil {
			v, err = d.Value()
		}
	case pgtype.TimestampOID:
		var d pgtype.Timestamp
		if err = m.PlanScan(oid, format, &d).Scan(src, &d); err == nil {
			v, err = d.Value()
		}
	case pgtype.TimestamptzOID:
		var d pgtype.Timestamptz
		if err = m.PlanScan(oid, format, &d).Scan(src, &d); err == nil {
			v, err = d.Value()
		}
	default:
		var d string
		err = m.PlanScan(oid, format, &d).Scan(src, &d)
		v = d
	}
	if err != nil {
		return "", 0, err
	}
	if tm, ok := v.(time.Time); ok && oid == pgtype.DateOID {
		s, k := scalar(tm, true)
		return s, k, nil
	}
	s, k := scalar(v, false)
	return s, k, nil
}
