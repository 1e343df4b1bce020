package activities

// PlanExport: cutting a tenant's rows into key ranges, and the sensitive-column lookup its
// approval plan uses.

import (
	"context"
	"database/sql"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

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
	// One snapshot for the count and the boundaries, so a row written in between cannot make
	// them disagree. The server does the scanning: the worker reads one key per part.
	opts := &sql.TxOptions{}
	if d.Driver == DriverPostgres {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		if accessRefused(err) {
			return PlanExportResult{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("dataset %q: the database refused the worker's login or does not exist", d.Name), ErrTypeDatasetAccess, err)
		}
		return PlanExportResult{}, fmt.Errorf("dataset %q: begin: %w", d.Name, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep

	// Count first: a tenant over max_rows is refused before any key is read.
	var total, keyed int64
	cq := fmt.Sprintf(`SELECT count(*), count(%s) FROM %s WHERE %s = $1`, qi(d.KeyColumn), qi(d.Table), qi(d.TenantColumn))
	if err := a.queryRow(ctx, tx, d, cq, []any{in.Tenant}, &total, &keyed); err != nil {
		return PlanExportResult{}, err
	}
	if total > int64(d.MaxRows) {
		return PlanExportResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("dataset %q: the tenant has more than %d rows, the dataset's max_rows; nothing was exported", d.Name, d.MaxRows),
			ErrTypeDatasetTooLarge, nil)
	}
	if keyed != total {
		return PlanExportResult{}, invalid("dataset %q: a row has a NULL %s; rows without a key cannot be paged", d.Name, d.KeyColumn)
	}
	// The scan-based plan refused the cut of full part partsMax+1 (a trailing partial part
	// was still allowed): the same limit, from the count.
	if total/int64(partRows) > partsMax {
		return PlanExportResult{}, invalid("part_rows %d cuts more than %d parts; use larger parts", partRows, partsMax)
	}
	res.Rows = int(total)
	if total == 0 {
		return res, nil
	}
	// Boundary keys: every partRows-th key in key order, then the last one. Each step is one
	// index probe that skips partRows-1 keys after the previous boundary: the server walks the
	// keys once without numbering them (a row_number() window cost 2-3 times as much), and
	// sends only the boundaries.
	k, t, tc := qi(d.KeyColumn), qi(d.Table), qi(d.TenantColumn)
	bq := fmt.Sprintf(`WITH RECURSIVE b(k) AS (
		SELECT (SELECT %[1]s FROM %[2]s WHERE %[3]s = $1 ORDER BY %[1]s LIMIT 1 OFFSET $2)
		UNION ALL
		SELECT (SELECT %[1]s FROM %[2]s WHERE %[3]s = $1 AND %[1]s > b.k ORDER BY %[1]s LIMIT 1 OFFSET $2) FROM b WHERE b.k IS NOT NULL
	) SELECT k FROM b WHERE k IS NOT NULL
	UNION ALL SELECT * FROM (SELECT %[1]s FROM %[2]s WHERE %[3]s = $1 ORDER BY %[1]s DESC LIMIT 1) l
	ORDER BY 1`, k, t, tc)
	rows, err := a.query(ctx, tx, d, bq, in.Tenant, int64(partRows-1))
	if err != nil {
		return PlanExportResult{}, err
	}
	defer rows.Close()
	var (
		after *string
		kv    any
	)
	for rows.Next() {
		if err := rows.Scan(&kv); err != nil {
			return PlanExportResult{}, fmt.Errorf("dataset %q: %w", d.Name, err)
		}
		through, err := keyString(d, kv)
		if err != nil {
			return PlanExportResult{}, err
		}
		if after != nil && *after == through {
			continue // the last key closed a full part already
		}
		res.Ranges = append(res.Ranges, KeyRange{After: after, Through: through})
		after = &through
	}
	if err := rows.Err(); err != nil {
		return PlanExportResult{}, fmt.Errorf("dataset %q: %w", d.Name, err)
	}
	if want := (total + int64(partRows) - 1) / int64(partRows); int64(len(res.Ranges)) != want {
		// Duplicate keys (no unique key) would make ranges overlap or skip: refuse.
		return PlanExportResult{}, invalid("dataset %q: %s is not unique for the tenant; rows cannot be paged", d.Name, d.KeyColumn)
	}
	activity.RecordHeartbeat(ctx, res.Rows)
	return res, nil
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
