package activities

import (
	"bytes"
	"encoding/csv"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

// FuzzCSVField: a csv row written by the export's own appender is byte-identical to
// encoding/csv's Writer for the same fields, so artifacts did not change when the export
// stopped using encoding/csv (and csv readers read them back as the same fields).
func FuzzCSVField(f *testing.F) {
	for _, s := range []string{"", "plain", "a,b", `say "hi"`, "line\nbreak", "cr\rx", " lead", "\tlead",
		`\.`, `\.x`, "\u00a0nbsp", "\u2028", "é", "\xff", "trail ", `"`, ",", "\x85next"} {
		f.Add(s, "second")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, rec := range [][]string{{a}, {a, b}, {b, a, ""}} {
			var want bytes.Buffer
			w := csv.NewWriter(&want)
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			e := newRowEncoder(contract.FormatCSV, make([]string, len(rec)))
			e.begin()
			for i, s := range rec {
				appendCell(e, i, s, kindString)
			}
			e.end()
			got := e.buf
			if len(rec) == 1 && rec[0] == "" {
				// The encoder quotes a lone empty field (encoding/csv writes an empty line,
				// which readers skip): the one intended difference.
				if string(got) != "\"\"\n" {
					t.Fatalf("lone empty field: %q", got)
				}
				continue
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("%q: got %q, encoding/csv %q", rec, got, want.Bytes())
			}
			// The []byte form is the same function.
			e.buf = e.buf[:0]
			e.begin()
			for i, s := range rec {
				e.cell(i, []byte(s), kindString)
			}
			e.end()
			if !bytes.Equal(e.buf, want.Bytes()) {
				t.Fatalf("%q: []byte cells %q, encoding/csv %q", rec, e.buf, want.Bytes())
			}
			back, err := csv.NewReader(bytes.NewReader(got)).Read()
			if err != nil || len(back) != len(rec) {
				t.Fatalf("%q does not read back: %q %v", got, back, err)
			}
		}
	})
}
