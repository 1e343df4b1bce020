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
	"unicode"
	"unicode/utf8"

	"github.com/jobgate/jobgate/activities/contract"
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
// csv rows end in "\n", fields are quoted exactly as encoding/csv quotes them, and newlines
// inside fields are kept as they are.
//
// Rows arrive either as driver values (row, the database/sql path) or as cells already turned
// into their text (cell, the PostgreSQL raw path); both end in the same appenders, so the two
// paths write the same bytes for the same values.
type rowEncoder struct {
	format string
	cols   []string
	keys   [][]byte // jsonl: `{"col":` / `,"col":`
	date   []bool
	buf    []byte // encoded text not yet drained
	start  int    // where the current row begins in buf
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
	return e
}

// reset starts a page; types are the page's value columns (key column excluded).
func (e *rowEncoder) reset(types []*sql.ColumnType) {
	e.buf = e.buf[:0]
	for i := range e.date {
		e.date[i] = i < len(types) && strings.EqualFold(types[i].DatabaseTypeName(), "DATE")
	}
}

// row encodes one row of driver values.
func (e *rowEncoder) row(vals []any) error {
	if len(vals) != len(e.cols) {
		return fmt.Errorf("row has %d values for %d columns", len(vals), len(e.cols))
	}
	e.begin()
	for i, v := range vals {
		s, k := scalar(v, e.date[i])
		appendCell(e, i, s, k)
	}
	e.end()
	return nil
}

// begin starts a row; cells 0..len(cols)-1 follow in order, then end.
func (e *rowEncoder) begin() { e.start = len(e.buf) }

// cell appends value i of the current row: its text s (ignored for kindNull) and kind.
func (e *rowEncoder) cell(i int, s []byte, k valueKind) { appendCell(e, i, s, k) }

func appendCell[T string | []byte](e *rowEncoder, i int, s T, k valueKind) {
	if e.format == contract.FormatCSV {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		if k != kindNull {
			e.buf = appendCSVField(e.buf, s)
		}
		return
	}
	e.buf = append(e.buf, e.keys[i]...)
	switch k {
	case kindNull:
		e.buf = append(e.buf, "null"...)
	case kindBare:
		e.buf = append(e.buf, s...)
	default:
		e.buf = appendJSONString(e.buf, s)
	}
}

// end closes the current row.
func (e *rowEncoder) end() {
	if e.format == contract.FormatCSV {
		if len(e.cols) == 1 && len(e.buf) == e.start {
			// A lone empty field would be an empty line, which csv readers skip: quote it
			// so the row survives (encoding/csv, which this matches, does the same).
			e.buf = append(e.buf, `""`...)
		}
		e.buf = append(e.buf, '\n')
		return
	}
	e.buf = append(e.buf, '}', '\n')
}

// pending is the encoded text not yet drained.
func (e *rowEncoder) pending() int { return len(e.buf) }

// drain moves the encoded text into w and returns its length.
func (e *rowEncoder) drain(w io.Writer) (int, error) {
	n, err := w.Write(e.buf)
	e.buf = e.buf[:0]
	return n, err
}

// appendCSVField appends one non-NULL csv field exactly as encoding/csv's Writer (comma
// separator, "\n" line ends) writes it: quoted when it holds a comma, quote, CR or LF, starts
// with a space character, or is `\.`; quotes inside doubled; everything else verbatim.
// FuzzCSVField holds it to encoding/csv.
func appendCSVField[T string | []byte](b []byte, f T) []byte {
	if !csvNeedsQuotes(f) {
		return append(b, f...)
	}
	b = append(b, '"')
	for i := 0; i < len(f); i++ {
		if f[i] == '"' {
			b = append(b, '"', '"')
			continue
		}
		b = append(b, f[i])
	}
	return append(b, '"')
}

func csvNeedsQuotes[T string | []byte](f T) bool {
	if len(f) == 0 {
		return false
	}
	if len(f) == 2 && f[0] == '\\' && f[1] == '.' {
		return true
	}
	for i := 0; i < len(f); i++ {
		switch f[i] {
		case '\n', '\r', '"', ',':
			return true
		}
	}
	if c := f[0]; c < utf8.RuneSelf {
		// unicode.IsSpace for ASCII, without decoding.
		return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
	}
	r, _ := decodeRune(f)
	return unicode.IsSpace(r)
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
func appendJSONString[T string | []byte](b []byte, s T) []byte {
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
		r, size := decodeRune(s[i:])
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

func decodeRune[T string | []byte](s T) (rune, int) {
	switch x := any(s).(type) {
	case string:
		return utf8.DecodeRuneInString(x)
	default:
		return utf8.DecodeRune(x.([]byte))
	}
}
