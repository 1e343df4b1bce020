package activities

// Shared by the export activities: formats, limits and ErrTypeExportInvalid, the part
// heartbeat, the worker's pool, store and dataset lookups, the query wrapper, column and
// format checks, and key conversions.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jobgate/jobgate/activities/contract"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

const (
	// pageRowsMax bounds one page, so one chunk, held in memory while it is encoded. It is also
	// the chunk size of a part without page_rows on a dataset without max_rows_per_second: one
	// object per 100,000-row part (unless its text reaches chunkRawMax first), since every
	// object costs a create, a rename and a delete, and finalize an open (issue 34: a tenth of
	// the objects of 10,000-row chunks cut finalize's share of a 1M-row job from ~8% to ~2%).
	// Throttled parts keep contract.PageRowsDefault: they pause at chunk boundaries.
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
	// Digest is the SHA-256 state (crypto/sha256's binary form) over the chunks written so
	// far, so a resumed part carries on the part's digest; nil in heartbeats of workers before
	// it, whose resumed parts report no digest (finalize then computes it).
	Digest []byte `json:"digest,omitempty"`
}

// pool is the worker's dataset connection pool: DB, or one created on first use and kept in
// this Activities value (not in package state, so two workers in one process never share it).
func (a *Activities) pool() *DBPool {
	if a.DB != nil {
		return a.DB
	}
	a.lazyDBOnce.Do(func() { a.lazyDB = &DBPool{} })
	return a.lazyDB
}

func (a *Activities) store() (*ArtifactStore, error) {
	if a.Artifacts == nil {
		return nil, errors.New("no artifact store is configured on this worker")
	}
	return a.Artifacts, nil
}

func (a *Activities) dataset(name string) (contract.Dataset, error) {
	d, ok := a.Datasets[name]
	if !ok {
		return contract.Dataset{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("dataset %q is not configured on this worker", name), contract.ErrTypeDatasetMissing, nil)
	}
	// Datasets built in code skip ParseDatasets: validate here too, so only a valid
	// identifier ever reaches SQL.
	if err := d.Validate(); err != nil {
		return contract.Dataset{}, invalid("dataset %q is misconfigured: %v", name, err)
	}
	return d.WithDefaults(), nil
}

func invalid(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), contract.ErrTypeExportInvalid, nil)
}

func scopeChanged(d contract.Dataset) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("dataset %q changed since the export was approved (config digest now %s); nothing was read", d.Name, d.ConfigDigest()),
		contract.ErrTypeScopeChanged, nil)
}

// query sends one statement to the dataset, telling QueryHook first.
func (a *Activities) query(ctx context.Context, db querier, d contract.Dataset, q string, args ...any) (*sql.Rows, error) {
	if a.QueryHook != nil {
		a.QueryHook(d.Name, q)
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, a.queryErr(ctx, d, err)
	}
	return rows, nil
}

// queryErr is how a statement's failure to start reaches the workflow: a refused login as the
// final DatasetAccess (the driver's error, with host, user and database, only as its cause),
// anything else retryable.
func (a *Activities) queryErr(ctx context.Context, d contract.Dataset, err error) error {
	if accessRefused(err) {
		activity.GetLogger(ctx).Error("dataset refused the worker's login", "dataset", d.Name, "error", err)
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("dataset %q: the database refused the worker's login or does not exist", d.Name), contract.ErrTypeDatasetAccess, err)
	}
	return fmt.Errorf("dataset %q: query: %w", d.Name, err)
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// queryRow runs a one-row statement through query and scans it into dest.
func (a *Activities) queryRow(ctx context.Context, db querier, d contract.Dataset, q string, args []any, dest ...any) error {
	rows, err := a.query(ctx, db, d, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("dataset %q: %w", d.Name, err)
		}
		return fmt.Errorf("dataset %q: no row", d.Name)
	}
	if err := rows.Scan(dest...); err != nil {
		return fmt.Errorf("dataset %q: %w", d.Name, err)
	}
	return rows.Close()
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
func missingColumns(d contract.Dataset, cols []string) []string {
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
func checkColumns(d contract.Dataset, cols []string) error {
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
	if !contract.ValidFormat(f) {
		return invalid("format %q: want %q or %q", f, contract.FormatJSONL, contract.FormatCSV)
	}
	return nil
}

// keyString renders a key value as it travels in ranges and heartbeats. Values are never
// echoed in errors: they are row data.
func keyString(d contract.Dataset, v any) (string, error) {
	switch k := v.(type) {
	case nil:
		return "", invalid("dataset %q: a row has a NULL %s; rows without a key cannot be paged", d.Name, d.KeyColumn)
	case int64:
		if d.KeyType == contract.KeyTypeInteger {
			return strconv.FormatInt(k, 10), nil
		}
	case string:
		if d.KeyType == contract.KeyTypeText {
			return k, nil
		}
	case []byte:
		if d.KeyType == contract.KeyTypeText && utf8.Valid(k) {
			return string(k), nil
		}
	}
	return "", invalid("dataset %q: a %s value is not of key_type %s", d.Name, d.KeyColumn, d.KeyType)
}

// keyArg binds a key string as the column's type: int64 for integer keys, so the database
// compares numbers, not text.
func keyArg(d contract.Dataset, k string) (any, error) {
	if d.KeyType == contract.KeyTypeInteger {
		n, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return nil, invalid("key %q is not an integer", k)
		}
		return n, nil
	}
	return k, nil
}
