package activities

// Opening dataset databases: the per-worker connection pool, read-only SQLite URIs, and the
// demo SQLite database (its rows and seeding).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/jobgate/jobgate/activities/contract"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Demo data: 8,000 customers, ids 1..8000 interleaved between two tenants (5 of every 8 ids
// are acme's), so an export that forgot the tenant filter could not pass for a correct one.
const (
	demoRowsTotal = 8000
	demoSchema    = `CREATE TABLE IF NOT EXISTS customers (
	id INTEGER PRIMARY KEY,
	tenant TEXT NOT NULL,
	name TEXT NOT NULL,
	email TEXT NOT NULL,
	country TEXT,
	plan TEXT NOT NULL,
	signup_date TEXT NOT NULL
)`
	demoIndex = `CREATE INDEX IF NOT EXISTS customers_tenant_id ON customers (tenant, id)`
)

// demoRow is one row of the demo customers table. Country is nil (NULL) for some rows.
type demoRow struct {
	ID         int64
	Tenant     string
	Name       string
	Email      string
	Country    *string
	Plan       string
	SignupDate string // YYYY-MM-DD
}

// Names include a comma, quotes, an apostrophe and non-ASCII letters so that csv quoting and
// JSON escaping are exercised by the demo data itself.
var (
	demoFirst     = []string{"Ada", "Bo", "Chen", "Dana", "Émile", "Farah", "Gus", "Hana", "Ivo", "Jo", "Kai", "Lea", "Mo"}
	demoLast      = []string{"Smith", "O'Brien", "Müller", "Nakamura", "Smith, Jr.", "Ng", "\"Ace\" Lee", "Okafor", "Silva", "Åberg", "Kowalski"}
	demoCountries = []string{"US", "DE", "JP", "BR", "NG", "SE", "PL", "FR", "IN", "CA"}
	demoPlans     = []string{"free", "free", "pro", "team", "enterprise"}
)

// demoRows generates the demo rows deterministically, in id order.
func demoRows() []demoRow {
	rows := make([]demoRow, 0, demoRowsTotal)
	base := time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)
	for id := int64(1); id <= demoRowsTotal; id++ {
		tenant := "acme"
		switch id % 8 {
		case 2, 5, 7:
			tenant = "globex"
		}
		// Multiplicative hashing keeps neighbours unalike without a random source.
		h := uint64(id) * 0x9E3779B97F4A7C15
		first := demoFirst[h%uint64(len(demoFirst))]
		last := demoLast[(h>>16)%uint64(len(demoLast))]
		var country *string
		if id%97 != 0 {
			c := demoCountries[(h>>32)%uint64(len(demoCountries))]
			country = &c
		}
		rows = append(rows, demoRow{
			ID:         id,
			Tenant:     tenant,
			Name:       first + " " + last,
			Email:      fmt.Sprintf("customer%d@%s.example", id, tenant),
			Country:    country,
			Plan:       demoPlans[(h>>40)%uint64(len(demoPlans))],
			SignupDate: base.AddDate(0, 0, int((h>>48)%1000)).Format(time.DateOnly),
		})
	}
	return rows
}

// SeedDemoDB creates the demo SQLite database at path with its customers table and rows,
// unless they are already there. A second call changes nothing: rows are inserted with
// INSERT OR IGNORE by id, and a complete table is not written to at all.
func SeedDemoDB(path string) error {
	db, err := sql.Open("sqlite", sqliteURI(path, false))
	if err != nil {
		return fmt.Errorf("demo db: %w", err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, demoSchema); err != nil {
		return fmt.Errorf("demo db: %w", err)
	}
	if _, err := db.ExecContext(ctx, demoIndex); err != nil {
		return fmt.Errorf("demo db: %w", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM customers WHERE id BETWEEN 1 AND ?`, demoRowsTotal).Scan(&n); err != nil {
		return fmt.Errorf("demo db: %w", err)
	}
	if n == demoRowsTotal {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("demo db: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO customers (id, tenant, name, email, country, plan, signup_date) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("demo db: %w", err)
	}
	defer stmt.Close()
	for _, r := range demoRows() {
		if _, err := stmt.ExecContext(ctx, r.ID, r.Tenant, r.Name, r.Email, r.Country, r.Plan, r.SignupDate); err != nil {
			return fmt.Errorf("demo db: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("demo db: %w", err)
	}
	return nil
}

// DBPool opens and caches one *sql.DB per driver and DSN, shared by all export activities of
// a worker. The zero value is ready to use; it is safe for concurrent use.
type DBPool struct {
	mu     sync.Mutex
	dbs    map[string]*sql.DB
	closed bool
}

// Open returns the pool's *sql.DB for d, opening it on first use. Opening does not connect:
// the first statement does.
func (p *DBPool) Open(d contract.Dataset) (*sql.DB, error) {
	d = d.WithDefaults()
	key := d.Driver + "\x00" + d.DSN
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("dataset connection pool is closed")
	}
	if db, ok := p.dbs[key]; ok {
		return db, nil
	}
	var (
		db  *sql.DB
		err error
	)
	switch d.Driver {
	case contract.DriverSQLite:
		var uri string
		if uri, err = sqliteDatasetURI(d.DSN); err == nil {
			db, err = sql.Open("sqlite", uri)
		}
	case contract.DriverPostgres:
		db, err = sql.Open("pgx", d.DSN)
	default:
		err = fmt.Errorf("unknown driver %q", d.Driver)
	}
	if err != nil {
		// Never echo the DSN: it may hold a password.
		return nil, fmt.Errorf("dataset %q: open %s: %w", d.Name, d.Driver, err)
	}
	if p.dbs == nil {
		p.dbs = map[string]*sql.DB{}
	}
	p.dbs[key] = db
	return db, nil
}

// Close closes every cached *sql.DB; later Opens fail.
func (p *DBPool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for k, db := range p.dbs {
		errs = append(errs, db.Close())
		delete(p.dbs, k)
	}
	return errors.Join(errs...)
}

// sqliteDatasetURI is the read-only SQLite URI of a dataset DSN: a file path, or a "file:" URI
// whose parameters are kept except that mode is forced to ro (no rw, rwc or memory: an export
// never writes, and a missing file is not created) and query_only is forced on (a second line
// of defence; an operator's query_only pragma is dropped).
func sqliteDatasetURI(dsn string) (string, error) {
	if !strings.HasPrefix(dsn, "file:") {
		return sqliteURI(dsn, true) + "&_pragma=query_only(1)", nil
	}
	base, raw, _ := strings.Cut(dsn, "?")
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", errors.New("the file: URI's parameters do not parse")
	}
	q.Set("mode", "ro")
	pragmas := q["_pragma"][:0:0]
	for _, p := range q["_pragma"] {
		if !strings.HasPrefix(strings.ToLower(strings.TrimSpace(p)), "query_only") {
			pragmas = append(pragmas, p)
		}
	}
	q["_pragma"] = append(pragmas, "query_only(1)")
	return base + "?" + q.Encode(), nil
}

// sqliteURI turns a file path into a SQLite URI, read-only when asked (datasets go through
// sqliteDatasetURI, which also forces a "file:" URI read-only). A path that already is a
// "file:" URI is used as given (SeedDemoDB).
func sqliteURI(path string, readOnly bool) string {
	if strings.HasPrefix(path, "file:") {
		return path
	}
	q := "_pragma=busy_timeout(5000)"
	if readOnly {
		q = "mode=ro&" + q
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q
}
