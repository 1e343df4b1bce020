package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"
	pgschema "go.temporal.io/server/schema/postgresql/v12"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/pgtest"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// runTool runs a command to completion and fails the test on a non-zero exit.
func runTool(t testing.TB, env []string, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// pgStack is jobgate on a production-shaped Temporal: the pinned server as a process of its own
// on PostgreSQL 15 (schemas by temporal-sql-tool, namespace and search attributes by `jobgate
// setup`), two `serve` replicas behind the proxy and a spawned worker.
type pgStack struct {
	*cluster
	pg *pgtest.Server
	// common are the arguments serve and worker share (namespace, catalogs, artifacts).
	common []string
	// metricsAddrs are the serve replicas' /metrics addresses (pgStackOpts.metrics).
	metricsAddrs []string
}

// pgStackOpts says what startPGStack changes from TestPostgresTemporal's stack.
type pgStackOpts struct {
	// tenantsJSON, if set, is the serve replicas' tenants file (--tenants); default none, i.e.
	// the built-in quotas.
	tenantsJSON string
	// quietPG turns PostgreSQL's statement log (pgtest logs every statement) off for every new
	// connection, Temporal's included: a benchmark measures Temporal, not the log.
	quietPG bool
	// visibilityRPS, if not 0, is the Temporal server's frontend.namespaceRPS.visibility
	// (temporalpg --visibility-rps); default the server's own (10).
	visibilityRPS int
	// quotaFresh, if set, is the serve replicas' --quota-fresh.
	quotaFresh string
	// metrics serves each replica's /metrics (--metrics-listen) at pgStack.metricsAddrs.
	metrics bool
}

const pgStackNamespace = "jobgate-prod"

// startPGStack starts a pgStack for t, everything stopped when t ends; it logs how long each
// part took to come up.
func startPGStack(t testing.TB, o pgStackOpts) *pgStack {
	t.Helper()
	const ns = pgStackNamespace
	begin := time.Now()
	pg := pgtest.Start(t)
	if o.quietPG {
		pg.Exec(t, "ALTER ROLE CURRENT_USER SET log_statement = 'none'")
	}
	pgReady := time.Since(begin)

	// Build the binaries (not counted as start-up below).
	buildStart := time.Now()
	bins := buildGo(t, goTarget{"go.temporal.io/server/cmd/tools/sql", "temporal-sql-tool", ""}, goTarget{"./temporalpg", "temporalpg", ""},
		jobgateTarget, lbproxyTarget)
	sqlTool, temporalpg := bins[0], bins[1]
	t.Logf("built temporal-sql-tool, temporalpg, jobgate, lbproxy in %s", time.Since(buildStart).Round(time.Millisecond))

	// 1. Schemas, exactly as an operator runs temporal-sql-tool with its embedded schema files.
	u, err := url.Parse(pg.DSN)
	must(t, err)
	pgHost, pgPort, pgUser := u.Hostname(), u.Port(), u.User.Username()
	schemaStart := time.Now()
	for _, s := range []struct{ db, schema, want string }{
		{"temporal", "postgresql/v12/temporal", pgschema.Version},
		{"temporal_visibility", "postgresql/v12/visibility", pgschema.VisibilityVersion},
	} {
		conn := []string{"--plugin", "postgres12", "--ep", pgHost, "-p", pgPort, "-u", pgUser, "--db", s.db}
		runTool(t, nil, sqlTool, append(conn, "create-database")...)
		runTool(t, nil, sqlTool, append(conn, "setup-schema", "-v", "0.0")...)
		runTool(t, nil, sqlTool, append(conn, "update-schema", "--schema-name", s.schema)...)
		db, err := sql.Open("pgx", fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pgUser, net.JoinHostPort(pgHost, pgPort), s.db))
		must(t, err)
		var got string
		err = db.QueryRow(`SELECT curr_version FROM schema_version WHERE version_partition = 0 AND db_name = $1`, s.db).Scan(&got)
		_ = db.Close()
		must(t, err)
		if got != s.want {
			t.Fatalf("%s schema version %s, want %s (schema/postgresql/v12 of the pinned server)", s.db, got, s.want)
		}
		t.Logf("database %s: schema %s at version %s", s.db, s.schema, got)
	}
	schemaTime := time.Since(schemaStart)

	// 2. The Temporal server, its own process, on those two databases.
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	portOf := func() string { _, p, _ := net.SplitHostPort(freeAddr(t)); return p }
	// Temporal's PostgreSQL schema keeps a ringpop member's port as SMALLINT
	// (cluster_membership.rpc_port): membership ports must be below 32768, unlike the kernel's
	// ephemeral ports that :0 hands out.
	lowPort := func() string {
		for {
			p := 10000 + mathrand.IntN(22000)
			if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
				ln.Close()
				return fmt.Sprint(p)
			}
		}
	}
	b := &testBundle{t: t, taskQueue: "tq-" + randHex(6), secret: []byte(randHex(32)), queries: &queryLog{}}
	key := handle.GenerateKey()
	b.keySpec = "t1:" + hex.EncodeToString(key)
	rkey := handle.GenerateKey()
	b.resumeKeySpec = "r1:" + hex.EncodeToString(rkey) // JOBGATE_RESUME_KEYS of serve and worker (cluster.run)
	b.signingKeySpec = "s1:" + handle.GenerateSigningSeedHex()
	// Payloads sealed as every bundle's are (cluster.run gives the processes the keys).
	b.sealPayloads(t, "file://"+filepath.Join(t.TempDir(), "payload-keys"))
	c := &cluster{testBundle: b, t: t, temporalAddr: addr}
	temporalStart := time.Now()
	c.temporal = c.run(temporalpg, "--pg-addr", net.JoinHostPort(pgHost, pgPort), "--pg-user", pgUser,
		"--db", "temporal", "--visibility-db", "temporal_visibility", "--port", port, "--http-port", portOf(),
		"--history-port", portOf(), "--matching-port", portOf(), "--worker-port", portOf(),
		"--membership-ports", strings.Join([]string{lowPort(), lowPort(), lowPort(), lowPort()}, ","),
		"--visibility-rps", fmt.Sprint(o.visibilityRPS))
	eventually(t, 2*time.Minute, "the Temporal frontend to answer", func() bool {
		select {
		case <-c.temporal.done:
			t.Fatalf("temporalpg exited:\n%s", c.temporal.logs())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		tc, err := client.DialContext(ctx, client.Options{HostPort: addr, Namespace: "temporal-system"})
		if err == nil {
			tc.Close()
		}
		return err == nil
	})
	temporalTime := time.Since(temporalStart)

	// 3. The one-time operator step: namespace and search attributes. Idempotent.
	setupStart := time.Now()
	out := runTool(t, nil, jobgateBinary(t), "setup", "--temporal-address", addr, "--namespace", ns, "--retention", "24h")
	setupTime := time.Since(setupStart)
	t.Logf("$ jobgate setup --temporal-address %s --namespace %s --retention 24h\n%s", addr, ns, out)
	if !strings.Contains(out, "namespace "+ns+": registered") || !strings.Contains(out, "JobSlots") || !strings.Contains(out, "added to namespace") {
		t.Fatalf("first setup did not register the namespace and the search attributes:\n%s", out)
	}
	out = runTool(t, []string{"JOBGATE_TEMPORAL_ADDRESS=" + addr, "JOBGATE_NAMESPACE=" + ns}, jobgateBinary(t), "setup")
	if !strings.Contains(out, "namespace "+ns+": exists") || !strings.Contains(out, "already registered") {
		t.Fatalf("second setup is not a no-op:\n%s", out)
	}
	c.tc, err = client.Dial(c.clientOptions(addr, ns))
	must(t, err)
	t.Cleanup(c.tc.Close)

	// 4. jobgate itself: two serve replicas behind the proxy, workers; catalogs shared by files.
	clusterStart := time.Now()
	dir := t.TempDir()
	c.secretFile, c.keysFile = filepath.Join(dir, "hs256"), filepath.Join(dir, "handle-keys")
	must(t, os.WriteFile(c.secretFile, b.secret, 0o600))
	must(t, os.WriteFile(c.keysFile, []byte(b.keySpec), 0o600))
	c.suitesFile = filepath.Join(dir, "suites.json")
	must(t, os.WriteFile(c.suitesFile, []byte(`{"suites":[{"name":"quick","kind":"demo","approval_threshold":0,`+
		`"heartbeat_timeout":"2s","max_attempts":5}]}`), 0o600))
	b.datasets = filepath.Join(dir, "datasets.json")
	must(t, os.WriteFile(b.datasets, []byte(catalogJSON(t, demoDataset(demoDB(t), nil))), 0o600))
	b.artifacts = "file://" + filepath.Join(dir, "artifacts")
	s := &pgStack{cluster: c, pg: pg, common: []string{"--namespace", ns, "--suites", c.suitesFile, "--datasets", b.datasets, "--artifacts", b.artifacts}}
	serveArgs := s.common
	if o.tenantsJSON != "" {
		tenants := filepath.Join(dir, "tenants.json")
		must(t, os.WriteFile(tenants, []byte(o.tenantsJSON), 0o600))
		serveArgs = append(slices.Clone(s.common), "--tenants", tenants)
	}
	if o.quotaFresh != "" {
		serveArgs = append(slices.Clone(serveArgs), "--quota-fresh", o.quotaFresh)
	}
	for range 2 {
		a := freeAddr(t)
		c.serveAddrs = append(c.serveAddrs, a)
		args := append([]string{"serve", "--listen", a, "--resource-uri", b.resource(),
			"--issuer", testIssuer, "--hs256-secret-file", c.secretFile, "--handle-keys-file", c.keysFile}, serveArgs...)
		if o.metrics {
			m := freeAddr(t)
			s.metricsAddrs = append(s.metricsAddrs, m)
			args = append(args, "--metrics-listen", m)
		}
		c.serves = append(c.serves, c.run(jobgateBinary(t), args...))
	}
	s.spawnWorker()
	c.proxyAddr = freeAddr(t)
	c.proxy = c.run(lbproxyBinary(t), "-listen", c.proxyAddr, "-backends", "http://"+c.serveAddrs[0]+",http://"+c.serveAddrs[1])
	for _, a := range append([]string{c.proxyAddr}, c.serveAddrs...) {
		waitTCP(t, a, 30*time.Second)
	}
	eventually(t, 30*time.Second, "both replicas ready", func() bool { return c.readyz(0) == 200 && c.readyz(1) == 200 })
	clusterTime := time.Since(clusterStart)
	t.Logf("ready: PostgreSQL %s, schemas %s, Temporal %s, jobgate setup %s, serve×2+worker+proxy %s (total with builds %s)",
		pgReady.Round(time.Millisecond), schemaTime.Round(time.Millisecond), temporalTime.Round(time.Millisecond),
		setupTime.Round(time.Millisecond), clusterTime.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	return s
}

// spawnWorker starts one more `jobgate worker` process on the stack.
func (s *pgStack) spawnWorker() *proc {
	s.t.Helper()
	w := s.run(jobgateBinary(s.t), append([]string{"worker", "--heartbeat-throttle", "500ms"}, s.common...)...)
	s.workers = append(s.workers, w)
	return w
}

// TestPostgresTemporal runs jobgate on a production-shaped Temporal: the pinned server
// (go.temporal.io/server, go.mod's version) as a process of its own on PostgreSQL 15, its
// schemas created by the server module's own temporal-sql-tool, jobgate's search attributes
// registered by `jobgate setup`, then two `serve` replicas behind a proxy and spawned workers
// (nothing from the dev stack): the eval tour, list_jobs filters, the four-eyes export tour with
// a verified download, and a worker SIGKILLed mid-run while another one finishes the job.
func TestPostgresTemporal(t *testing.T) {
	testenv.Heavy(t, "starts PostgreSQL, a Temporal server and jobgate processes")
	t.Parallel()
	s := startPGStack(t, pgStackOpts{})
	c, b := s.cluster, s.testBundle

	tourStart := time.Now()
	csAna := c.via(ana)
	prefix := uniqueKey(t)

	// Eval tour: > 100 episodes of demo ask the owner first; approved, it runs to the end.
	ev := mustView(t, call(t, csAna, "start_eval", startArgs(prefix+"-eval", 120, map[string]any{"episode_ms": 20, "fail_rate": 0})))
	w := waitStatus(t, csAna, ev.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	if w.NeedsInput == nil || w.NeedsInput.Approver != authz.ApproverOwner {
		t.Fatalf("eval needs_input: %+v", w.NeedsInput)
	}
	mustErr(t, call(t, c.via(bo), "resume_eval", map[string]any{"handle": ev.Handle, "input_id": w.NeedsInput.InputID,
		"scope_digest": w.NeedsInput.ScopeDigest, "decision": "approve"}), jobcore.CodeNotFound)
	mustView(t, call(t, csAna, "resume_eval", map[string]any{"handle": ev.Handle, "input_id": w.NeedsInput.InputID,
		"scope_digest": w.NeedsInput.ScopeDigest, "decision": "approve"}))
	done := waitStatus(t, csAna, ev.Handle, workflows.StatusSucceeded, 2*time.Minute)
	if done.Progress.Done != 120 || done.Progress.Failed != 0 {
		t.Fatalf("eval totals: %+v", done.Progress)
	}
	evalTime := time.Since(tourStart)

	// A worker SIGKILLed mid-run: another worker picks the episodes up after the heartbeat timeout.
	killStart := time.Now()
	kv := mustView(t, call(t, csAna, "start_eval", map[string]any{"idempotency_key": prefix + "-kill", "suite": "quick",
		"episodes": 40, "concurrency": 4, "params": map[string]any{"episode_ms": 300, "fail_rate": 0}}))
	eventually(t, time.Minute, "episodes running before the kill", func() bool {
		return mustView(t, call(t, csAna, "get_eval", map[string]any{"handle": kv.Handle})).Progress.Done >= 4
	})
	c.workers[0].kill(t)
	s.spawnWorker()
	kd := waitStatus(t, csAna, kv.Handle, workflows.StatusSucceeded, 2*time.Minute)
	if kd.Progress.Done != 40 || kd.Progress.Failed != 0 {
		t.Fatalf("totals after the kill: %+v", kd.Progress)
	}
	retried := c.retriedAttempts(t, kv.JobID)
	if retried == 0 {
		t.Fatal("no episode was retried: the kill proved nothing")
	}
	killTime := time.Since(killStart)

	// Export tour: a sensitive column waits for an approver other than the owner; the steward
	// approves with the CLI; the owner downloads with the CLI, which verifies the SHA-256.
	exportStart := time.Now()
	xv := cliStartExport(t, csAna, prefix+"-export", pgPurpose)
	mustErr(t, exResume(t, csAna, xv, "approve"), jobcore.CodeForbidden)
	cli := func(p principal, args ...string) string {
		return runTool(t, []string{"JOBGATE_URL=http://" + c.proxyAddr + "/mcp", "JOBGATE_TOKEN=" + b.token(p)}, jobgateBinary(t), args...)
	}
	if out := cli(steward, "approvals", "list"); !strings.Contains(out, xv.JobID) {
		t.Fatalf("approvals list does not show %s:\n%s", xv.JobID, out)
	}
	cli(steward, "approvals", "approve", xv.Handle, "--comment", pgComment)
	xd := exWait(t, csAna, xv.Handle, workflows.StatusSucceeded, 2*time.Minute)
	xr := exResult(t, xd)
	if xr.ApprovedBy != "steward" || xr.Rows != 5000 || strings.Join(xr.Columns, ",") != "id,name,email" {
		t.Fatalf("export result: %+v", xr)
	}
	file := filepath.Join(t.TempDir(), xr.FileName)
	cli(ana, "jobs", "download", xv.Handle, "-o", file)
	body, err := os.ReadFile(file)
	must(t, err)
	if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != xr.SHA256 || int64(len(body)) != xr.Bytes {
		t.Fatalf("downloaded %d bytes sha256 %x; result says %d bytes sha256 %s", len(body), sum, xr.Bytes, xr.SHA256)
	}
	exportTime := time.Since(exportStart)

	// list_jobs filters, on PostgreSQL visibility with jobgate's search attributes.
	waiting := mustView(t, call(t, csAna, "start_eval", startArgs(prefix+"-waiting", 101, map[string]any{"episode_ms": 0})))
	waitStatus(t, csAna, waiting.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	ids := func(args map[string]any) map[string]string {
		got := map[string]string{}
		for _, r := range listEverything(t, []*mcp.ClientSession{csAna, c.via(ana)}, args) {
			got[r.JobID] = r.Kind + "/" + string(r.Status)
		}
		return got
	}
	want := func(args map[string]any, in, out []string) {
		t.Helper()
		eventually(t, 30*time.Second, fmt.Sprintf("list_jobs %v", args), func() bool {
			got := ids(args)
			for _, id := range in {
				if _, ok := got[id]; !ok {
					return false
				}
			}
			for _, id := range out {
				if _, ok := got[id]; ok {
					t.Fatalf("list_jobs %v lists %s (%s)", args, id, got[id])
				}
			}
			return true
		})
	}
	want(map[string]any{"kind": "eval", "status": "succeeded"}, []string{ev.JobID, kv.JobID}, []string{xv.JobID, waiting.JobID})
	want(map[string]any{"kind": "export"}, []string{xv.JobID}, []string{ev.JobID, kv.JobID, waiting.JobID})
	want(map[string]any{"status": "awaiting_input"}, []string{waiting.JobID}, []string{ev.JobID, kv.JobID, xv.JobID})
	want(map[string]any{"kind": "eval"}, []string{ev.JobID, kv.JobID, waiting.JobID}, []string{xv.JobID})
	if got := ids(map[string]any{}); len(got) != 4 {
		t.Fatalf("list_jobs without filters: %v, want the 4 jobs of this test", got)
	}

	t.Logf("tour on PostgreSQL Temporal: eval %s, worker SIGKILL (%d retried attempts) %s, export %s, lists; total %s",
		evalTime.Round(time.Millisecond), retried, killTime.Round(time.Millisecond), exportTime.Round(time.Millisecond),
		time.Since(tourStart).Round(time.Millisecond))

	// Temporal's databases as an operator reads them (issue 31): every column of every table,
	// through SQL so that what PostgreSQL compressed (TOAST) is read as stored. The export's
	// purpose and the steward's comment are not there in clear; the job ID (a routing key) and
	// the task queue (in the history events' own fields) are: proof the history was read.
	all := pgTemporalBytes(t, s)
	for _, want := range []string{xv.JobID, c.taskQueue, payloadcrypt.EncodingEncrypted} {
		if !bytes.Contains(all, []byte(want)) {
			t.Fatalf("Temporal's PostgreSQL databases (%d bytes read) lack %q: not the databases the jobs are in", len(all), want)
		}
	}
	for _, word := range []string{pgPurpose, "Quokka", pgComment, "Wombat"} {
		if i := bytes.Index(all, []byte(word)); i >= 0 {
			t.Errorf("%q in clear in Temporal's PostgreSQL databases: …%q…", word, all[max(0, i-80):min(len(all), i+len(word)+80)])
		}
	}
}

// Words of TestPostgresTemporal's export that only its callers wrote (payloadcrypt_test.go's
// rule): the purpose and the approver's comment.
const (
	pgPurpose = "renewal mailing for Q3, Quokka ledger 4ZR"
	pgComment = "ok for Q3, Wombat audit 8KT"
)

// pgTemporalBytes reads every column of every table of the stack's two Temporal databases
// (persistence and visibility): bytea as stored, the rest as text.
func pgTemporalBytes(t *testing.T, s *pgStack) []byte {
	t.Helper()
	var all []byte
	for _, name := range []string{"temporal", "temporal_visibility"} {
		u, err := url.Parse(s.pg.DSN)
		must(t, err)
		u.Path = "/" + name
		db, err := sql.Open("pgx", u.String())
		must(t, err)
		rows, err := db.Query(`SELECT table_name, column_name, data_type FROM information_schema.columns
			WHERE table_schema = 'public' ORDER BY table_name, ordinal_position`)
		must(t, err)
		type col struct{ table, name, typ string }
		var cols []col
		for rows.Next() {
			var c col
			must(t, rows.Scan(&c.table, &c.name, &c.typ))
			cols = append(cols, c)
		}
		must(t, rows.Err())
		rows.Close()
		for _, c := range cols {
			q := fmt.Sprintf(`SELECT %q::text FROM %q WHERE %q IS NOT NULL`, c.name, c.table, c.name)
			if c.typ == "bytea" {
				q = fmt.Sprintf(`SELECT %q FROM %q WHERE %q IS NOT NULL`, c.name, c.table, c.name)
			}
			vals, err := db.Query(q)
			must(t, err)
			for vals.Next() {
				var v []byte
				must(t, vals.Scan(&v))
				all = append(append(all, v...), '\n')
			}
			must(t, vals.Err())
			vals.Close()
		}
		must(t, db.Close())
	}
	return all
}
