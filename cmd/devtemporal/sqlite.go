package devtemporal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	sqliteschema "go.temporal.io/server/schema/sqlite"
)

// The plugin turns every connect attribute that is not an SQLite URI parameter into a
// `_pragma=key=value` DSN entry for modernc.org/sqlite (see plugin.go buildDSNAttr).
const (
	busyTimeoutMillis = "10000"
)

func fileSQLConfig(dbPath string) *config.SQL {
	return &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: dbPath,
		ConnectAttributes: map[string]string{
			"mode": "rwc",
			// The plugin checks this exact key/value ("journal_mode"="wal").
			"journal_mode": "wal",
			// WAL makes NORMAL durable against application crashes and much faster.
			"synchronous":  "normal",
			"busy_timeout": busyTimeoutMillis,
		},
		// One connection (plugin default): WAL readers would help little and a second
		// writer risks SQLITE_BUSY on read-to-write upgrades.
	}
}

var memoryDBSeq atomic.Int64

func memorySQLConfig() *config.SQL {
	return &config.SQL{
		PluginName: sqliteplugin.PluginName,
		// Unique per Start: the plugin pools connections by DSN process-wide, so two
		// servers in one test binary must not share a name.
		DatabaseName: fmt.Sprintf("jobgate-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), memoryDBSeq.Add(1)),
		ConnectAttributes: map[string]string{
			"mode":  "memory",
			"cache": "shared",
			// The plugin creates the schema itself for mode=memory.
		},
	}
}

// ensureSchema creates the Temporal schema when dbPath does not exist yet. It builds the
// database under a temporary name and renames it into place, so an interrupted setup never
// leaves a half-initialised jobgate.db behind (existence == complete schema).
func ensureSchema(dbPath string) error {
	if _, err := os.Stat(dbPath); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Leftovers of an interrupted setup; nobody else uses them while we hold the DataDir lock.
	if stale, _ := filepath.Glob(dbPath + ".init-*"); len(stale) > 0 {
		for _, f := range stale {
			_ = os.Remove(f)
		}
	}
	// Unique name: the plugin pools connections by DSN for the life of the process.
	tmp := fmt.Sprintf("%s.init-%d-%d", dbPath, os.Getpid(), time.Now().UnixNano())
	cfg := &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: tmp,
		// Rollback journal, so the finished database is one self-contained file to rename.
		ConnectAttributes: map[string]string{"mode": "rwc", "busy_timeout": busyTimeoutMillis},
	}
	err := sqliteschema.SetupSchema(cfg)
	// The plugin keeps the connection open; close it before the rename. A failure only
	// leaks a file handle (renaming an open file is fine on unix).
	_ = releaseSQLite(cfg)
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("set up SQLite schema: %w", err)
	}
	if err := os.Rename(tmp, dbPath); err != nil {
		return fmt.Errorf("install SQLite database: %w", err)
	}
	return nil
}

// sqlPlugins is the SQL plugin registry of the server's persistence layer.
//
//go:linkname sqlPlugins go.temporal.io/server/common/persistence/sql.supportedPlugins
var sqlPlugins map[string]sqlplugin.Plugin

// releaseSQLite closes the pooled connection to cfg's database.
//
// Why: the sqlite plugin (server v1.32.1, sqlplugin/sqlite/conn_pool.go) never closes its
// connections ("todo" in connPool.Close), so without this a stopped server would keep the
// database file open and every in-memory database alive until the process exits. There is no
// exported hook, so this reaches into the plugin's private pool; any shape mismatch after a
// server upgrade returns an error (covered by the tests) instead of panicking.
func releaseSQLite(cfg *config.SQL) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("release sqlite connection: %v", r)
		}
	}()
	plugin, ok := sqlPlugins[sqliteplugin.PluginName]
	if !ok {
		return errors.New("release sqlite connection: sqlite plugin not registered")
	}
	pv := reflect.ValueOf(plugin)
	if pv.Kind() != reflect.Pointer || pv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("release sqlite connection: unexpected plugin type %T", plugin)
	}
	poolPtr := exported(pv.Elem().FieldByName("connPool"))
	if !poolPtr.IsValid() || poolPtr.Kind() != reflect.Pointer || poolPtr.IsNil() {
		return errors.New("release sqlite connection: plugin has no connPool")
	}
	pool := poolPtr.Elem()
	mu, okMu := exported(pool.FieldByName("mu")).Addr().Interface().(*sync.Mutex)
	entries := exported(pool.FieldByName("pool"))
	if !okMu || entries.Kind() != reflect.Map || entries.Type().Key().Kind() != reflect.String {
		return errors.New("release sqlite connection: unexpected connPool layout")
	}

	mu.Lock()
	defer mu.Unlock()
	// Pool keys are the DSN "file:<DatabaseName>?<attributes>".
	prefix := "file:" + cfg.DatabaseName + "?"
	var errs []error
	for _, key := range entries.MapKeys() {
		if !strings.HasPrefix(key.String(), prefix) {
			continue
		}
		entry := reflect.New(entries.Type().Elem()).Elem()
		entry.Set(entries.MapIndex(key))
		db, ok := exported(entry.FieldByName("db")).Interface().(io.Closer)
		if !ok {
			return errors.New("release sqlite connection: unexpected pool entry layout")
		}
		if err := db.Close(); err != nil {
			errs = append(errs, err)
		}
		entries.SetMapIndex(key, reflect.Value{})
	}
	return errors.Join(errs...)
}

// exported makes an addressable, possibly unexported struct field usable via reflection.
func exported(v reflect.Value) reflect.Value {
	if !v.IsValid() || !v.CanAddr() {
		return reflect.Value{}
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}
