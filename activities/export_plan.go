package activities

// PlanExport: cutting a tenant's rows into key ranges, and the sensitive-column lookup its
// approval plan uses.

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jobgate/jobgate/activities/contract"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// PlanExport cuts the tenant's rows into key ranges of PartRows rows each. When the
// dataset's config digest is no longer the approved one, it reports the change and sends
// nothing to the database.
func (a *Activities) PlanExport(ctx context.Context, in contract.PlanExportInput) (contract.PlanExportResult, error) {
	d, err := a.dataset(in.Dataset)
	if err != nil {
		return contract.PlanExportResult{}, err
	}
	res := contract.PlanExportResult{
		ConfigDigest:     d.ConfigDigest(),
		Sensitive:        d.AnySensitive(in.Columns),
		SensitiveColumns: sensitiveOf(d, in.Columns),
		Missing:          missingColumns(d, in.Columns),
	}
	res.Approval = &contract.PlanApproval{Required: res.Sensitive, AllowSelf: d.AllowSelfApproval,
		Sensitive: res.SensitiveColumns, Timeout: d.ApprovalTimeout}
	if res.ConfigDigest != in.ConfigDigest {
		res.ScopeChanged = true
		return res, nil
	}
	if in.Tenant == "" {
		return contract.PlanExportResult{}, invalid("no tenant")
	}
	if err := checkColumns(d, in.Columns); err != nil {
		return contract.PlanExportResult{}, err
	}
	partRows := in.PartRows
	if partRows <= 0 {
		partRows = contract.PartRowsDefault
	}
	tx, err := a.planTx(ctx, d)
	if err != nil {
		return contract.PlanExportResult{}, err
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep
	if err := a.refuseNullKeys(ctx, tx, d, in.Tenant); err != nil {
		return contract.PlanExportResult{}, err
	}
	tooLarge := temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("dataset %q: the tenant has more than %d rows, the dataset's max_rows; nothing was exported", d.Name, d.MaxRows),
		contract.ErrTypeDatasetTooLarge, nil)
	tooManyParts := invalid("part_rows %d cuts more than %d parts; use larger parts", partRows, partsMax)

	// The walk stops after stepsMax steps: reaching it proves the tenant over max_rows (or
	// partsMax), so a tenant far over the limit costs at most max_rows keys read, and no row.
	// A call with Steps stops after that many boundaries (More), and a call with After walks on
	// from an earlier call's last boundary, counting its PartsBefore against the same bound.
	stepsMax := min(d.MaxRows/partRows, partsMax) + 1 - in.PartsBefore
	if in.PartsBefore < 0 || stepsMax < 1 || (in.PartsBefore > 0) != (in.After != nil) {
		return contract.PlanExportResult{}, invalid("parts_before %d after %v: not a continued walk", in.PartsBefore, in.After != nil)
	}
	steps := stepsMax
	if in.Steps > 0 && in.Steps < stepsMax {
		steps = in.Steps
	}
	var after *string
	if res.Ranges, after, err = a.walkBoundaries(ctx, tx, d, in, partRows, steps); err != nil {
		return contract.PlanExportResult{}, err
	}
	if len(res.Ranges) == stepsMax {
		if (in.PartsBefore+stepsMax)*partRows > d.MaxRows {
			return contract.PlanExportResult{}, tooLarge
		}
		return contract.PlanExportResult{}, tooManyParts
	}
	if len(res.Ranges) == steps && steps < stepsMax {
		// Stopped at Steps: these parts can start; the rest is another call's.
		res.More = true
		res.Rows = (in.PartsBefore + len(res.Ranges)) * partRows
		activity.RecordHeartbeat(ctx, res.Rows)
		return res, nil
	}
	// The rest after the last full part: fewer than partRows rows, counted with their last key.
	tail, last, err := a.countTail(ctx, tx, d, in.Tenant, after)
	if err != nil {
		return contract.PlanExportResult{}, err
	}
	total := int64(in.PartsBefore+len(res.Ranges))*int64(partRows) + tail
	if total > int64(d.MaxRows) {
		return contract.PlanExportResult{}, tooLarge
	}
	if tail > 0 {
		through, err := keyString(d, last)
		if err != nil {
			return contract.PlanExportResult{}, err
		}
		res.Ranges = append(res.Ranges, contract.KeyRange{After: after, Through: through})
	}
	res.Rows = int(total)
	activity.RecordHeartbeat(ctx, res.Rows)
	return res, nil
}

// planTx is the plan's one snapshot for the walk and the tail, so a row written in between
// cannot make them disagree. The server does the scanning: the worker reads one key per part.
func (a *Activities) planTx(ctx context.Context, d contract.Dataset) (*sql.Tx, error) {
	db, err := a.pool().Open(d)
	if err != nil {
		return nil, err
	}
	opts := &sql.TxOptions{}
	if d.Driver == contract.DriverPostgres {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		if accessRefused(err) {
			return nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("dataset %q: the database refused the worker's login or does not exist", d.Name), contract.ErrTypeDatasetAccess, err)
		}
		return nil, fmt.Errorf("dataset %q: begin: %w", d.Name, err)
	}
	return tx, nil
}

// refuseNullKeys: rows without a key cannot be paged; and SQLite sorts NULL first, which would
// end the walk at once. One index probe.
func (a *Activities) refuseNullKeys(ctx context.Context, tx *sql.Tx, d contract.Dataset, tenant string) error {
	var nullKey int
	nq := fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s = $1 AND %s IS NULL LIMIT 1) n`, qi(d.Table), qi(d.TenantColumn), qi(d.KeyColumn))
	if err := a.queryRow(ctx, tx, d, nq, []any{tenant}, &nullKey); err != nil {
		return err
	}
	if nullKey > 0 {
		return invalid("dataset %q: a row has a NULL %s; rows without a key cannot be paged", d.Name, d.KeyColumn)
	}
	return nil
}

// walkBoundaries returns the ranges of the full parts after in.After, at most steps of them,
// and the last boundary. The boundary keys are every partRows-th key in key order, found in
// one walk of the index: each step is one probe that skips partRows-1 keys after the previous
// boundary, so the server reads the keys once without numbering them (a count and a
// row_number() window read them twice and cost 3-4 times as much) and sends only the
// boundaries.
func (a *Activities) walkBoundaries(ctx context.Context, tx *sql.Tx, d contract.Dataset, in contract.PlanExportInput, partRows, steps int) ([]contract.KeyRange, *string, error) {
	k, t, tc := qi(d.KeyColumn), qi(d.Table), qi(d.TenantColumn)
	first, bargs := "", []any{in.Tenant, int64(partRows - 1), int64(steps)}
	if in.After != nil {
		ak, err := keyArg(d, *in.After)
		if err != nil {
			return nil, nil, err
		}
		first = fmt.Sprintf(` AND %s > $4`, k)
		bargs = append(bargs, ak)
	}
	bq := fmt.Sprintf(`WITH RECURSIVE b(k, n) AS (
		SELECT (SELECT %[1]s FROM %[2]s WHERE %[3]s = $1%[4]s ORDER BY %[1]s LIMIT 1 OFFSET $2), 1
		UNION ALL
		SELECT (SELECT %[1]s FROM %[2]s WHERE %[3]s = $1 AND %[1]s > b.k ORDER BY %[1]s LIMIT 1 OFFSET $2), n + 1
			FROM b WHERE b.k IS NOT NULL AND n < $3
	) SELECT k FROM b WHERE k IS NOT NULL ORDER BY n`, k, t, tc, first)
	rows, err := a.query(ctx, tx, d, bq, bargs...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var (
		ranges []contract.KeyRange
		after  = in.After
		kv     any
	)
	for rows.Next() {
		if err := rows.Scan(&kv); err != nil {
			return nil, nil, fmt.Errorf("dataset %q: %w", d.Name, err)
		}
		through, err := keyString(d, kv)
		if err != nil {
			return nil, nil, err
		}
		ranges = append(ranges, contract.KeyRange{After: after, Through: through})
		after = &through
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("dataset %q: %w", d.Name, err)
	}
	return ranges, after, nil
}

// countTail counts the tenant's rows after the key after (all of them without one) and reads
// the last key: by ORDER BY, not max(), since PostgreSQL has no max() for some key types (uuid).
func (a *Activities) countTail(ctx context.Context, tx *sql.Tx, d contract.Dataset, tenant string, after *string) (tail int64, last any, err error) {
	k, t := qi(d.KeyColumn), qi(d.Table)
	where := fmt.Sprintf(`%s = $1`, qi(d.TenantColumn))
	targs := []any{tenant}
	if after != nil {
		ak, err := keyArg(d, *after)
		if err != nil {
			return 0, nil, err
		}
		where += fmt.Sprintf(` AND %s > $2`, k)
		targs = append(targs, ak)
	}
	tq := fmt.Sprintf(`SELECT count(*), (SELECT %[1]s FROM %[2]s WHERE %[3]s ORDER BY %[1]s DESC LIMIT 1) FROM %[2]s WHERE %[3]s`, k, t, where)
	err = a.queryRow(ctx, tx, d, tq, targs, &tail, &last)
	return tail, last, err
}

// sensitiveOf lists the columns of cols that d marks sensitive, in cols' order.
func sensitiveOf(d contract.Dataset, cols []string) []string {
	var out []string
	for _, c := range cols {
		if col, ok := d.Column(c); ok && col.Sensitive {
			out = append(out, c)
		}
	}
	return out
}
