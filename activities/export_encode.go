package activities

// Row encoding: rows to jsonl or csv text, driver values to text, and the csv header.

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

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

// pending is the encoded text not yet drained, short by at most the csv writer's 4 KiB
// buffer (flushing it every row would cost a copy per row).
func (e *rowEncoder) pending() int { return e.raw.Len() }

// drain moves the encoded text into w and returns its length.
func (e *rowEncoder) drain(w io.Writer) (int, error) {
	if e.format == FormatCSV {
		e.csv.Flush()
		if err := e.csv.Error(); err != nil {
			return 0, err
		}
	}
	n, err := w.Write(e.raw.Bytes())
	e.raw.Reset()
	return n, err
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
