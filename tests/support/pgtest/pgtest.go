package pgtest

import (
	"bufio"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// Server is one running PostgreSQL server with a fresh database.
type Server struct {
	// DSN is a pgx URL of the fresh database, as the superuser "postgres".
	DSN string
	// LogPath is the server log (log_statement=all).
	LogPath string

	dir     string // holds data/, the log and the Unix socket
	dataDir string
	asUser  []string // argv prefix that runs a command as the postgres OS user, when root

	mu sync.Mutex
	db *sql.DB
}

const dbName = "pgtest"

// Start starts a server for t and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	testenv.Heavy(t, "pgtest: starts a PostgreSQL server")
	for _, bin := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing(t, fmt.Sprintf("PostgreSQL binary %s not on PATH", bin))
		}
	}
	s := &Server{}
	// initdb and postgres refuse to run as root: run them as the postgres OS user.
	var uid, gid int = -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			missing(t, "running as root and there is no postgres OS user to run PostgreSQL as")
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			missing(t, "running as root and runuser is not on PATH")
		}
		s.asUser = []string{runuser, "-u", "postgres", "--"}
	}
	// Not t.TempDir: its parents are 0700 root-owned, out of the postgres user's reach.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir, s.dataDir, s.LogPath = dir, filepath.Join(dir, "data"), filepath.Join(dir, "postgres.log")
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}

	// C locale: text sorts by bytes, as in SQLite, so keyset order agrees between the two.
	if out, err := s.run("initdb", "-D", s.dataDir, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	var port int
	for attempt := 0; ; attempt++ {
		port = freePort(t)
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c log_statement=all -c fsync=off"+
			" -c synchronous_commit=off -c full_page_writes=off", port, dir)
		out, err := s.run("pg_ctl", "start", "-w", "-t", "60", "-D", s.dataDir, "-l", s.LogPath, "-o", opts)
		if err == nil {
			break
		}
		// Another process may have taken the port between probe and bind: try another.
		if attempt == 2 {
			log, _ := os.ReadFile(s.LogPath)
			t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
		}
	}
	t.Cleanup(func() {
		s.mu.Lock()
		if s.db != nil {
			_ = s.db.Close()
		}
		s.mu.Unlock()
		if out, err := s.run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", s.dataDir); err != nil {
			t.Logf("pg_ctl stop: %v\n%s", err, out)
		}
	})

	admin, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + dbName); err != nil {
		t.Fatalf("create database: %v", err)
	}
	s.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, dbName)
	return s
}

func missing(t testing.TB, why string) {
	t.Helper()
	testenv.Missing(t, fmt.Sprintf("pgtest: %s (install PostgreSQL 15 to run this test)", why))
}

// run runs a PostgreSQL binary, as the postgres OS user when we are root.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	argv := append(append(append([]string{}, s.asUser...), name), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// DB is a connection pool to the fresh database, closed when the test ends.
func (s *Server) DB(t testing.TB) *sql.DB {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		db, err := sql.Open("pgx", s.DSN)
		if err != nil {
			t.Fatal(err)
		}
		s.db = db
	}
	return s.db
}

// Exec runs one statement on the fresh database and fails the test on error.
func (s *Server) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := s.DB(t).Exec(query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

// logStatement matches the log line of a statement: simple protocol "statement: …",
// extended protocol "execute <name>: …" (and "execute <name>/C_1: …" for portals).
var logStatement = regexp.MustCompile(`\bLOG:\s+(?:statement|execute [^:]*):\s(.*)$`)

// PID is the server's postmaster process ID (postmaster.pid's first line); its backends are
// its children. 0 when it cannot be read.
func (s *Server) PID() int {
	b, err := os.ReadFile(filepath.Join(s.dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// Statements are the statements the server has logged so far, in order, as their text (with
// $n placeholders for extended-protocol statements). Multi-line statements keep their lines.
func (s *Server) Statements() []string {
	f, err := os.Open(s.LogPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var (
		out  []string
		open bool // the last line started a statement that may continue
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "\t") {
			// A continuation line of the previous log entry.
			if open {
				out[len(out)-1] += "\n" + strings.TrimPrefix(line, "\t")
			}
			continue
		}
		open = false
		if m := logStatement.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
			open = true
		}
	}
	return out
}
