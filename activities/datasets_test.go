package activities

import (
	"crypto/sha256"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

func TestSeedDemoDB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.db")
	if err := SeedDemoDB(path); err != nil {
		t.Fatal(err)
	}
	sum := func() [32]byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	first := sum()
	if err := SeedDemoDB(path); err != nil {
		t.Fatal(err)
	}
	if sum() != first {
		t.Fatal("a second SeedDemoDB changed the file")
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	counts := map[string]int{}
	rows, err := db.Query(`SELECT tenant, COUNT(*) FROM customers GROUP BY tenant`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var (
			tenant string
			n      int
		)
		if err := rows.Scan(&tenant, &n); err != nil {
			t.Fatal(err)
		}
		counts[tenant] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(counts, map[string]int{"acme": 5000, "globex": 3000}) {
		t.Fatalf("counts %v", counts)
	}
	// Interleaved: globex ids lie between acme ids.
	var lo, hi int
	if err := db.QueryRow(`SELECT MIN(id), MAX(id) FROM customers WHERE tenant = 'globex'`).Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	if lo > 10 || hi < 7990 {
		t.Fatalf("globex ids %d..%d are not interleaved with acme's", lo, hi)
	}
	if !reflect.DeepEqual(demoRows(), demoRows()) {
		t.Fatal("demo rows are not deterministic")
	}
}

// TestSQLiteDatasetIsReadOnly: whatever form its DSN takes (a path, a file: URI, a file: URI
// asking for mode=rw or rwc), a SQLite dataset's connection cannot write, and a missing file is
// not created.
func TestSQLiteDatasetIsReadOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "demo.db")
	if err := SeedDemoDB(path); err != nil {
		t.Fatal(err)
	}
	pool := &DBPool{}
	defer pool.Close()
	for _, dsn := range []string{
		path,
		"file:" + path,
		"file:" + path + "?mode=rw",
		"file:" + path + "?mode=rwc&_pragma=query_only(0)",
		"file://" + path + "?cache=shared",
		"file:" + path + "?mode=memory",
	} {
		t.Run(dsn, func(t *testing.T) {
			db, err := pool.Open(contract.Dataset{Name: "d", Driver: contract.DriverSQLite, DSN: dsn})
			if err != nil {
				t.Fatal(err)
			}
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM customers`).Scan(&n); err != nil || n == 0 {
				t.Fatalf("read: %d rows, %v", n, err)
			}
			if _, err := db.Exec(`UPDATE customers SET plan = 'pwned'`); err == nil {
				t.Fatal("UPDATE through the dataset connection succeeded")
			}
			if _, err := db.Exec(`CREATE TABLE pwned (x)`); err == nil {
				t.Fatal("CREATE TABLE through the dataset connection succeeded")
			}
		})
	}
	missing := filepath.Join(dir, "missing.db")
	for _, dsn := range []string{missing, "file:" + missing + "?mode=rwc"} {
		db, err := pool.Open(contract.Dataset{Name: "m", Driver: contract.DriverSQLite, DSN: dsn})
		if err == nil {
			_ = db.Ping()
			_, _ = db.Exec(`CREATE TABLE x (y)`)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatalf("%s: opening a missing dataset created the file (%v)", dsn, err)
		}
	}
}
