package activities

// A hook for tests/BenchmarkExportVsCopy: the SQLite single-stream limit is one SELECT through
// the export's own row encoder, so the benchmark needs that encoder from outside the package.

import (
	"database/sql"
	"encoding/csv"
	"fmt"
	"io"

	"github.com/jobgate/jobgate/activities/contract"
)

// EncodeRowsForBench streams rows (the values of cols, no key column in front) through the
// export's row encoder into w, uncompressed, with the csv header line first for csv, and returns
// the row count. Only benchmarks use it; exports go through ExportPart.
func EncodeRowsForBench(rows *sql.Rows, format string, cols []string, w io.Writer) (int64, error) {
	types, err := rows.ColumnTypes()
	if err != nil {
		return 0, err
	}
	if len(types) != len(cols) {
		return 0, fmt.Errorf("query returns %d columns for %d names", len(types), len(cols))
	}
	if format == contract.FormatCSV {
		cw := csv.NewWriter(w)
		if err := cw.Write(cols); err != nil {
			return 0, err
		}
		if cw.Flush(); cw.Error() != nil {
			return 0, cw.Error()
		}
	}
	enc := newRowEncoder(format, cols)
	enc.reset(types)
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var n int64
	flush := func() error {
		_, err := enc.drain(w)
		return err
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		if err := enc.row(vals); err != nil {
			return n, err
		}
		// Flush a page's worth at a time, as the export does: the buffer stays small.
		if n++; n%contract.PageRowsDefault == 0 {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, flush()
}
