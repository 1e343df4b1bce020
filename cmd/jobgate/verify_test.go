package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/handle"
)

const verifyKeys = "r1:" + "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"

// writeSignedExport writes, in a fresh directory, an export's artifact and its manifest.json as
// a worker does (activities types), with a decision record sealed as a frontend does; it
// returns the manifest's path and the resume keys file.
func writeSignedExport(t *testing.T) (manifestPath, keysFile string) {
	t.Helper()
	dir := t.TempDir()
	keys, err := handle.ParseKeyring(verifyKeys)
	if err != nil {
		t.Fatal(err)
	}
	keysFile = filepath.Join(dir, "resume-keys")
	if err := os.WriteFile(keysFile, []byte(verifyKeys+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	scope := &contract.ApprovedScope{Tenant: "acme", Dataset: "customers", ConfigDigest: "sha256:" + strings.Repeat("c0", 32),
		Columns: []string{"id", "email"}, Format: "csv", Purpose: "renewal mailing for Q3"}
	sb, _ := json.Marshal(scope)
	d := &contract.DecisionRecord{WorkflowID: "acme/export/ana/q3", RunID: "run-2", InputID: "approve-0a1b2c3d4e5f",
		ScopeDigest: "sha256:" + hexSHA256(string(sb)), Decision: "approve", Tenant: "acme", By: "steward",
		Scopes: []string{"jobs:approve"}, At: at, Surface: "page", SignedInWith: "oidc-session",
		Identity: contract.Identity{Issuer: "https://idp.acme.example", Name: "Stew Ard", Email: "steward@acme.example",
			AuthTime: at.Add(-2 * time.Minute), AMR: []string{"pwd"}, ACR: "1"},
		Comment: "fine for Q3", Prompt: "Allow ana@acme to export id and **email** of customers"}
	d.Seal = keys.SealResume(handle.Resume{WorkflowID: d.WorkflowID, RunID: d.RunID, InputID: d.InputID,
		ScopeDigest: d.ScopeDigest, Tenant: d.Tenant, Subject: d.By, Scopes: d.Scopes, Decision: d.Decision,
		CommentDigest: hexSHA256(d.Comment), Surface: d.Surface, SignedInWith: d.SignedInWith, Issuer: d.Issuer,
		Name: d.Name, Email: d.Email, AuthTime: d.AuthTime, AMR: d.AMR, ACR: d.ACR, MeaningDigest: hexSHA256(d.Prompt),
		Expiry: at.Add(5 * time.Minute)})
	if d.Seal == "" {
		t.Fatal("not sealed")
	}
	lead, p1, p2 := []byte("lead-member"), []byte("part one bytes"), []byte("part two")
	art := append(append(append([]byte{}, lead...), p1...), p2...)
	hx := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	m := contract.Manifest{Object: activities.ExportPrefix(d.WorkflowID, "run-1") + "acme-export-ana-q3.csv.gz",
		FileName: "acme-export-ana-q3.csv.gz", Format: "csv", Columns: []string{"id", "email"}, Rows: 3,
		Bytes: int64(len(art)), SHA256: hx(art), RunID: "run-1", Decision: d, Scope: scope, ApprovalRequired: true,
		Parts: []contract.ManifestPart{{Part: 1, Rows: 2, Bytes: int64(len(p1)), SHA256: hx(p1)}, {Part: 2, Rows: 1, Bytes: int64(len(p2)), SHA256: hx(p2)}}}
	b, _ := json.Marshal(m)
	if m.ManifestSeal, err = keys.SealManifest(b); err != nil { // as the worker does
		t.Fatal(err)
	}
	b, _ = json.Marshal(m)
	manifestPath = filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(manifestPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, path.Base(m.Object)), art, 0o644); err != nil {
		t.Fatal(err)
	}
	return manifestPath, keysFile
}

func runVerifyOut(args ...string) (string, error) {
	var out, errb bytes.Buffer
	err := run(append([]string{"verify"}, args...), &out, &errb)
	return out.String() + errb.String(), err
}

func TestVerify(t *testing.T) {
	mp, kf := writeSignedExport(t)
	out, err := runVerifyOut(mp, "--resume-keys-file", kf)
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	for _, want := range []string{"ok   decision seal: approve by steward@acme <steward@acme.example> via page", "ok   decision job:",
		"ok   decision scope: approved export of id, email of customers as csv for 'renewal mailing for Q3'", "ok   artifact:",
		"ok   manifest seal: every field", "ok   decision time: recorded at 2030-01-01T12:00:00Z by the worker (not bound by the decision seal"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// Without keys the seal cannot be checked: a failure, saying why.
	out, err = runVerifyOut(mp)
	if exitCode(err) != 1 || !strings.Contains(out, "FAIL decision seal: no resume keys") || !strings.Contains(out, "FAIL manifest seal: no resume keys") {
		t.Errorf("no keys: exit %d\n%s", exitCode(err), out)
	}

	orig, _ := os.ReadFile(mp)
	for name, c := range map[string]struct{ from, to, line string }{
		"email":    {"steward@acme.example", "stevard@acme.example", "FAIL decision seal: the record's email does not match the seal"},
		"comment":  {"fine for Q3", "fine for Q4", "FAIL decision seal: the record's comment does not match the seal"},
		"meaning":  {"**email**", "**emails*", "FAIL decision seal: the record's prompt (meaning) does not match the seal"},
		"decision": {`"decision":"approve"`, `"decision":"reject!"`, "FAIL decision seal: the record's decision"},
		"seal":     {`"seal":"jgr1.r1.`, `"seal":"jgr1.r1.A`, "FAIL decision seal: does not open"},
		"digest":   {`"sha256":"` + string(orig[strings.Index(string(orig), `"sha256":"`)+10]), `"sha256":"x`, "FAIL artifact:"},
		"purpose":  {`"purpose":"renewal mailing for Q3"`, `"purpose":"renewal mailing for Q4"`, "FAIL decision scope: the manifest's scope does not have the sealed scope_digest"},
		"columns":  {`"columns":["id","email"],"rows"`, `"columns":["id","emaik"],"rows"`, "FAIL decision scope: the artifact's columns or format are not the approved ones"},
		"job":      {`"object":"exports/runs/run-1/acme%2Fexport%2Fana%2Fq3/`, `"object":"exports/runs/run-1/acme%2Fexport%2Fana%2Fq4/`, "FAIL decision job:"},
	} {
		flipped := strings.Replace(string(orig), c.from, c.to, 1)
		if flipped == string(orig) {
			t.Fatalf("%s: nothing replaced", name)
		}
		if err := os.WriteFile(mp, []byte(flipped), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := runVerifyOut(mp, "--resume-keys-file", kf)
		// Each change fails the manifest seal and the check that looks at that field.
		if exitCode(err) != 1 || strings.Count(out, "FAIL") != 2 || !strings.Contains(out, c.line) || !strings.Contains(out, "FAIL manifest seal: does not verify") {
			t.Errorf("%s: exit %d, want 1 and lines %q and manifest seal:\n%s", name, exitCode(err), c.line, out)
		}
	}
	if err := os.WriteFile(mp, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	// A changed artifact byte fails the artifact check.
	art := filepath.Join(filepath.Dir(mp), "acme-export-ana-q3.csv.gz")
	b, _ := os.ReadFile(art)
	b[len(b)-1] ^= 1
	_ = os.WriteFile(art, b, 0o644)
	out, err = runVerifyOut("--artifact", art, mp, "--resume-keys-file", kf)
	if exitCode(err) != 1 || !strings.Contains(out, "FAIL artifact: part(s) 2 of") {
		t.Errorf("flipped artifact: exit %d\n%s", exitCode(err), out)
	}
}

// rewriteManifest applies edit to the manifest's JSON object and writes it to dir/manifest.json;
// reseal re-seals it with the test keys (as a worker would have written it).
func rewriteManifest(t *testing.T, src, dir string, reseal bool, edit func(map[string]any)) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	edit(v)
	if reseal {
		delete(v, "manifest_seal")
		keys, _ := handle.ParseKeyring(verifyKeys)
		b, _ = json.Marshal(v)
		if v["manifest_seal"], err = keys.SealManifest(b); err != nil {
			t.Fatal(err)
		}
	}
	b, _ = json.Marshal(v)
	p := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVerifySkipsAndMissingRecords: checks that cannot run are SKIP (exit 3), never "ok"; a
// removed decision record fails; a flipped digest with no artifact present fails on the
// manifest seal.
func TestVerifySkipsAndMissingRecords(t *testing.T) {
	mp, kf := writeSignedExport(t)
	for name, c := range map[string]struct {
		reseal bool
		edit   func(map[string]any)
		args   []string
		code   int
		lines  []string
	}{
		"no artifact": {reseal: false, edit: func(map[string]any) {}, code: 3,
			lines: []string{"SKIP artifact: not next to the manifest", "ok   manifest seal:"}},
		"no artifact, allowed": {reseal: false, edit: func(map[string]any) {}, args: []string{"--allow-skipped"}, code: 0,
			lines: []string{"SKIP artifact: not next to the manifest"}},
		"flipped sha256, no artifact": {edit: func(v map[string]any) {
			s := v["sha256"].(string)
			v["sha256"] = string(s[0]^1) + s[1:]
		}, code: 1, lines: []string{"FAIL manifest seal: does not verify", "SKIP artifact:"}},
		"old manifest": {edit: func(v map[string]any) {
			delete(v, "manifest_seal")
			delete(v, "scope")
			delete(v, "approval_required")
		}, code: 3, lines: []string{"SKIP manifest seal: not sealed (made before manifest seals", "SKIP decision scope:", "ok   decision seal:"}},
		"decision removed": {edit: func(v map[string]any) { delete(v, "decision") }, code: 1,
			lines: []string{"FAIL manifest seal: does not verify", "FAIL decision: the export required approval and the manifest carries no decision record"}},
		"decision and approval_required removed, resealed": {reseal: true, edit: func(v map[string]any) {
			delete(v, "decision")
			delete(v, "approval_required")
		}, code: 1, lines: []string{"ok   manifest seal:", "FAIL decision: none recorded (pass --allow-unapproved"}},
		"no approval needed, --allow-unapproved": {reseal: true, edit: func(v map[string]any) {
			delete(v, "decision")
			delete(v, "approval_required")
		}, args: []string{"--allow-unapproved", "--allow-skipped"}, code: 0, lines: []string{"ok   decision: none recorded and the manifest does not say approval was required"}},
		"required, --allow-unapproved": {reseal: true, edit: func(v map[string]any) { delete(v, "decision") },
			args: []string{"--allow-unapproved"}, code: 1, lines: []string{"FAIL decision: the export required approval"}},
	} {
		p := rewriteManifest(t, mp, t.TempDir(), c.reseal, c.edit) // a directory without the artifact
		out, err := runVerifyOut(append([]string{p, "--resume-keys-file", kf}, c.args...)...)
		code := 0
		if err != nil {
			code = exitCode(err)
		}
		if code != c.code {
			t.Errorf("%s: exit %d (%v), want %d:\n%s", name, code, err, c.code, out)
		}
		for _, l := range c.lines {
			if !strings.Contains(out, l) {
				t.Errorf("%s: output lacks %q:\n%s", name, l, out)
			}
		}
		if c.code != 1 && strings.Contains(out, "FAIL") {
			t.Errorf("%s: unexpected FAIL:\n%s", name, out)
		}
	}
}
