package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/workflows"
)

const (
	fgPurpose  = "Wombat forgetting drill 4RZ"
	fgParam    = "axolotl_seasoning"
	fgParamVal = "cobalt-meringue-77"
)

// TestForgetTenant crypto-shreds a tenant with the real binary (`jobgate tenant forget`), on a
// Temporal server keeping its SQLite database in a file: acme's finished export and eval are
// then not_found (byte-identical to an unknown job) for their owner and for an admin, on a
// frontend started after the forget, and absent from list_jobs; their artifacts are gone;
// no job starts for acme; globex's job still reads; and Temporal's database, which still holds acme's histories, holds
// none of acme's words in clear.
func TestForgetTenant(t *testing.T) {
	t.Parallel()
	srv, dir := fileTemporal(t)
	script := filepath.Join(t.TempDir(), "episode.sh")
	must(t, os.WriteFile(script, []byte("#!/bin/sh\necho '{\"score\": 1}'\n"), 0o700))
	suites := fmt.Sprintf(`{"suites":[{"name":"cmd","kind":"command","command":["sh",%q],"max_attempts":1}]}`, script)
	b := setup(t, setupOpts{temporalAddr: srv.FrontendHostPort(), datasetsJSON: catalogJSON(t, pcLedger(t)), suitesJSON: suites})

	csAna, csGus := b.session(ana, 0, ""), b.session(gus, 0, "")
	// Non-sensitive columns only: no approval, an artifact at once.
	ex := mustView(t, call(t, csAna, "start_export", map[string]any{"idempotency_key": "fg-x1", "dataset": "ledger",
		"format": "csv", "purpose": fgPurpose}))
	ev := mustView(t, call(t, csAna, "start_eval", map[string]any{"idempotency_key": "fg-e1", "suite": "cmd", "episodes": 2,
		"params": map[string]any{fgParam: fgParamVal}}))
	gv := mustView(t, call(t, csGus, "start_eval", startArgs("fg-g1", 2, map[string]any{"episode_ms": 10})))
	exWait(t, csAna, ex.Handle, workflows.StatusSucceeded, 60*time.Second)
	waitStatus(t, csAna, ev.Handle, workflows.StatusSucceeded, 60*time.Second)
	waitStatus(t, csGus, gv.Handle, workflows.StatusSucceeded, 60*time.Second)
	artifacts := strings.TrimPrefix(b.artifacts, "file://")
	if n := countFiles(t, filepath.Join(artifacts, "exports")); n == 0 {
		t.Fatal("the export left no artifact to forget")
	}

	// The operator forgets acme, with the environment serve and worker have.
	cmd := exec.Command(jobgateBinary(t), "tenant", "forget", "acme", "--yes")
	cmd.Env = append(os.Environ(), "JOBGATE_ARTIFACTS="+b.artifacts)
	cmd.Env = append(cmd.Env, b.payloadEnv()...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "acme\tpayload keys deleted: 1") {
		t.Fatalf("jobgate tenant forget: %v\n%s", err, out)
	}
	if n := countFiles(t, filepath.Join(artifacts, "exports")); n != 0 {
		t.Fatalf("%d export objects left after forget", n)
	}

	// A frontend started now (the running ones drop their cached keys within a minute).
	v, err := authz.NewHS256Verifier(testIssuer, b.resource(), b.secret, "")
	must(t, err)
	s := &app.ServeMain{Config: app.ServeConfig{Temporal: app.TemporalConfig{Address: srv.FrontendHostPort(), Namespace: namespace,
		TaskQueue: b.taskQueue, Payloads: b.payloads()}, Listen: "127.0.0.1:0", ResourceURI: b.resource(), Issuer: testIssuer,
		SuitesFile: b.suites, DatasetsFile: b.datasets, ArtifactsURL: b.artifacts}, Verifier: v, Keys: b.keys, ResumeKeys: b.resumeKeys,
		SigningKeys: b.signingKeys}
	must(t, s.Run(context.Background()))
	t.Cleanup(func() { _ = s.Close() })
	b.frontends = append(b.frontends, s)
	i := len(b.frontends) - 1
	unknown := mustErrRaw(t, call(t, b.session(ana, i, ""), "get_eval", map[string]any{"handle": b.keys.SealHandle(handleFor("acme/eval/ana/never"))}), "not_found")
	for _, p := range []principal{ana, ops} {
		cs := b.session(p, i, "")
		for tool, h := range map[string]string{"get_export": ex.Handle, "get_eval": ev.Handle} {
			if raw := mustErrRaw(t, call(t, cs, tool, map[string]any{"handle": h}), "not_found"); raw != unknown {
				t.Fatalf("%s %s after forget: %s, want the unknown job's %s", p.sub, tool, raw, unknown)
			}
		}
		list := call(t, cs, "list_jobs", map[string]any{})
		if list.Err != nil || strings.Contains(string(list.Raw), ex.JobID) || strings.Contains(string(list.Raw), ev.JobID) {
			t.Fatalf("%s list_jobs after forget: %s", p.sub, list.Raw)
		}
	}
	// No job starts for a forgotten tenant (nothing could be sealed for it), under a new key or
	// the forgotten job's own: a clear refusal, not an internal error.
	for _, key := range []string{"fg-after", "fg-e1"} {
		if e := mustErr(t, call(t, b.session(ana, i, ""), "start_eval", map[string]any{"idempotency_key": key, "suite": "cmd", "episodes": 2,
			"params": map[string]any{fgParam: fgParamVal}}), "forbidden"); !strings.Contains(e.Message, "forgotten") {
			t.Fatalf("start %s after forget: %+v", key, e)
		}
	}
	if g := mustView(t, call(t, b.session(gus, i, ""), "get_eval", map[string]any{"handle": gv.Handle})); g.Status != workflows.StatusSucceeded {
		t.Fatalf("globex's eval after acme's forget: %s", g.Status)
	}

	// Temporal still holds acme's histories, sealed, and nothing of its words in clear.
	must(t, srv.Stop())
	all := dirBytes(t, dir)
	if !bytes.Contains(all, []byte(ev.JobID)) {
		t.Fatalf("the database files (%d bytes) do not hold the job ID %s: wrong files", len(all), ev.JobID)
	}
	for _, word := range []string{fgPurpose, "Wombat", fgParam, fgParamVal, "meringue"} {
		if bytes.Contains(all, []byte(word)) {
			t.Errorf("%q in clear in Temporal's database", word)
		}
	}
}
