package activities

// PlanExport: cutting a tenant's rows into key ranges, and the sensitive-column lookup its
// approval plan uses.

import (
	"context"
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
