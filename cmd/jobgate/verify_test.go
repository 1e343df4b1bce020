package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities"
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
	scope := &activities.ApprovedScope{Tenant: "acme", Dataset: "customers", ConfigDigest: "sha256:" + strings.Repeat("c0", 32),
		Columns: []string{"id", "email"}, Format: "csv", Purpose: "renewal mailing for Q3"}
	sb, _ := json.Marshal(scope)
	d := &activities.DecisionRecord{WorkflowID: "acme/export/ana/q3", RunID: "run-2", InputID: "approve-0a1b2c3d4e5f",
		ScopeDigest: "sha256:" + hexSHA256(string(sb)), Decision: "approve", Tenant: "acme", By: "steward",
		Scopes: []string{"jobs:approve"}, At: at, Surface: "page", SignedInWith: "oidc-session",
		Identity: activities.Identity{Issuer: "https://idp.acme.example", Name: "Stew Ard", Email: "steward@acme.example",
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
	m := activities.Manifest{Object: activities.ExportPrefix(d.WorkflowID, "run-1") + "acme-export-ana-q3.csv.gz",
		FileName: "acme-export-ana-q3.csv.gz", Format: "csv", Columns: []string{"id", "email"}, Rows: 3,
		Bytes: int64(len(art)), SHA256: hx(art), RunID: "run-1", Decision: d, Scope: scope,
		Parts: []activities.ManifestPart{{Part: 1, Rows: 2, Bytes: int64(len(p1)), SHA256: hx(p1)}, {Part: 2, Rows: 1, Bytes: int64(len(p2)), SHA256: hx(p2)}}}
	b, _ := json.Marshal(m)
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
		"ok   decision scope: approved export of id, email of customers as csv for 'renewal mailing for Q3'", "ok   artifact:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// Without keys the seal cannot be checked: a failure, saying why.
	out, err = runVerifyOut(mp)
	if exitCode(err) != 1 || !strings.Contains(out, "FAIL decision seal: no resume keys") {
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
		if exitCode(err) != 1 || strings.Count(out, "FAIL") != 1 || !strings.Contains(out, c.line) {
			t.Errorf("%s: exit %d, want 1 and one line %q:\n%s", name, exitCode(err), c.line, out)
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

// TestVerifyTypesMatchWorker: verify's decoding types read every field of the worker's
// manifest and decision record (activities), so the two never drift apart unnoticed.
func TestVerifyTypesMatchWorker(t *testing.T) {
	mp, _ := writeSignedExport(t)
	b, _ := os.ReadFile(mp)
	var m verifyManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var am activities.Manifest
	_ = json.Unmarshal(b, &am)
	want, _ := json.Marshal(am.Decision)
	var wantMap, gotMap map[string]any
	_ = json.Unmarshal(want, &wantMap)
	got, _ := json.Marshal(m.Decision)
	_ = json.Unmarshal(got, &gotMap)
	for k, v := range wantMap {
		if !reflect.DeepEqual(gotMap[k], v) {
			t.Errorf("decision field %q: verify reads %v, the worker wrote %v", k, gotMap[k], v)
		}
	}
}
