package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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

const (
	verifyKeys = "r1:" + "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
	// signKeys is the test deployment's Ed25519 signing ring: s2 signs, s1 (retired) verifies.
	signKeys = "s2:" + "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a," +
		"s1:" + "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5"
)

// writeSignedExport writes, in a fresh directory, an export's artifact, its manifest.json and
// the public keys beside it as a worker with signing keys does (activities types), with a
// decision record sealed and signed as a frontend does; it returns the manifest's path and the
// resume keys file.
func writeSignedExport(t *testing.T) (manifestPath, keysFile string) { return writeExport(t, true) }

// writeExport is writeSignedExport, or with signed false a legacy export: the record with the
// HMAC resume seal only, the manifest HMAC-sealed, no keys beside it.
func writeExport(t *testing.T, signed bool) (manifestPath, keysFile string) {
	t.Helper()
	dir := t.TempDir()
	keys, err := handle.ParseKeyring(verifyKeys)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := handle.ParseSigningKeyring(signKeys)
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
	r := handle.Resume{WorkflowID: d.WorkflowID, RunID: d.RunID, InputID: d.InputID,
		ScopeDigest: d.ScopeDigest, Tenant: d.Tenant, Subject: d.By, Scopes: d.Scopes, Decision: d.Decision,
		CommentDigest: hexSHA256(d.Comment), Surface: d.Surface, SignedInWith: d.SignedInWith, Issuer: d.Issuer,
		Name: d.Name, Email: d.Email, AuthTime: d.AuthTime, AMR: d.AMR, ACR: d.ACR, MeaningDigest: hexSHA256(d.Prompt),
		Expiry: at.Add(5 * time.Minute)}
	d.Seal = keys.SealResume(r)
	if signed {
		d.Signature = sk.SignDecision(r) // as jobcore.ResumeJob does, beside the seal
	}
	if d.Seal == "" || (signed && d.Signature == "") {
		t.Fatal("not sealed")
	}
	lead, p1, p2 := []byte("lead-member"), []byte("part one bytes"), []byte("part two")
	art := append(append(append([]byte{}, lead...), p1...), p2...)
	hx := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	m := contract.Manifest{Object: activities.ExportPrefix(d.WorkflowID, "run-1") + "acme-export-ana-q3.csv.gz",
		FileName: "acme-export-ana-q3.csv.gz", Format: "csv", Columns: []string{"id", "email"}, Rows: 3,
		Bytes: int64(len(art)), SHA256: hx(art), RunID: "run-1", Decision: d, Scope: scope, ApprovalRequired: true,
		Parts: []contract.ManifestPart{{Part: 1, Rows: 2, Bytes: int64(len(p1)), SHA256: hx(p1)}, {Part: 2, Rows: 1, Bytes: int64(len(p2)), SHA256: hx(p2)}}}
	if signed { // as the worker does (activities.writeSignedManifest)
		m.Version = contract.ManifestVersionSigned
		b, _ := json.Marshal(m)
		if m.ManifestSignature, err = sk.SignManifest(b); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, contract.SigningKeysObject), sk.PublicJWKS(), 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		b, _ := json.Marshal(m)
		if m.ManifestSeal, err = keys.SealManifest(b); err != nil { // as the worker did before signatures
			t.Fatal(err)
		}
	}
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

// verifyExit is the exit code run's error means (0 for none).
func verifyExit(err error) int {
	if err == nil {
		return 0
	}
	return exitCode(err)
}

func runVerifyOut(args ...string) (string, error) {
	var out, errb bytes.Buffer
	err := run(append([]string{"verify"}, args...), &out, &errb)
	return out.String() + errb.String(), err
}

// TestVerify: a signed export passes with only the public keys beside it (no resume keys);
// every changed field of the record or the manifest fails the manifest signature and the
// check that looks at that field.
func TestVerify(t *testing.T) {
	mp, _ := writeSignedExport(t)
	out, err := runVerifyOut(mp)
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	for _, want := range []string{"ok   decision signature (Ed25519, key s2): approve by steward@acme <steward@acme.example> via page", "ok   decision job:",
		"ok   decision scope: approved export of id, email of customers as csv for 'renewal mailing for Q3'", "ok   artifact:",
		"ok   manifest signature: Ed25519, every field", "ok   public keys: s1 (thumbprint ", "beside the manifest",
		"ok   decision time: recorded at 2030-01-01T12:00:00Z by the worker (not bound by the decision's own signature"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAIL") || strings.Contains(out, "SKIP") {
		t.Errorf("genuine export:\n%s", out)
	}

	// Without any public keys the signatures cannot be checked: a failure, saying why.
	bare := t.TempDir()
	orig, _ := os.ReadFile(mp)
	_ = os.WriteFile(filepath.Join(bare, "manifest.json"), orig, 0o644)
	out, err = runVerifyOut(filepath.Join(bare, "manifest.json"))
	if verifyExit(err) != 1 || !strings.Contains(out, "FAIL decision signature: no public keys") || !strings.Contains(out, "FAIL manifest signature: no public keys") {
		t.Errorf("no keys: exit %d\n%s", verifyExit(err), out)
	}

	sig := func(field string) string { // the first character of a signature's last segment
		i := strings.Index(string(orig), `"`+field+`":"`)
		v := string(orig[i+len(field)+4:])
		v = v[:strings.IndexByte(v, '"')]
		return v[:strings.LastIndexByte(v, '.')+1]
	}
	for name, c := range map[string]struct{ from, to, line string }{
		"email":    {"steward@acme.example", "stevard@acme.example", "FAIL decision signature: the record's email does not match what was signed"},
		"comment":  {"fine for Q3", "fine for Q4", "FAIL decision signature: the record's comment does not match"},
		"meaning":  {"**email**", "**emails*", "FAIL decision signature: the record's prompt (meaning) does not match"},
		"decision": {`"decision":"approve"`, `"decision":"reject!"`, "FAIL decision signature: the record's decision"},
		"record signature": {`"signature":"` + sig("signature"), `"signature":"` + sig("signature") + "A",
			"FAIL decision signature: does not verify with these public keys"},
		"digest":  {`"sha256":"` + string(orig[strings.Index(string(orig), `"sha256":"`)+10]), `"sha256":"x`, "FAIL artifact:"},
		"purpose": {`"purpose":"renewal mailing for Q3"`, `"purpose":"renewal mailing for Q4"`, "FAIL decision scope: the manifest's scope does not have the signed scope_digest"},
		"columns": {`"columns":["id","email"],"rows"`, `"columns":["id","emaik"],"rows"`, "FAIL decision scope: the artifact's columns or format are not the approved ones"},
		"job":     {`"object":"exports/runs/run-1/acme%2Fexport%2Fana%2Fq3/`, `"object":"exports/runs/run-1/acme%2Fexport%2Fana%2Fq4/`, "FAIL decision job:"},
	} {
		flipped := strings.Replace(string(orig), c.from, c.to, 1)
		if flipped == string(orig) {
			t.Fatalf("%s: nothing replaced", name)
		}
		if err := os.WriteFile(mp, []byte(flipped), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := runVerifyOut(mp)
		// Each change fails the manifest signature and the check that looks at that field.
		if verifyExit(err) != 1 || strings.Count(out, "FAIL") != 2 || !strings.Contains(out, c.line) || !strings.Contains(out, "FAIL manifest signature: does not verify") {
			t.Errorf("%s: exit %d, want 1 and lines %q and manifest signature:\n%s", name, verifyExit(err), c.line, out)
		}
	}
	// The manifest's own signature altered: that check alone fails.
	ms := sig("manifest_signature")
	for name, to := range map[string]string{"one character": ms + "A", "other key ID": strings.Replace(ms, ".s2.", ".s9.", 1)} {
		_ = os.WriteFile(mp, []byte(strings.Replace(string(orig), `"manifest_signature":"`+ms, `"manifest_signature":"`+to, 1)), 0o644)
		out, err := runVerifyOut(mp)
		if verifyExit(err) != 1 || strings.Count(out, "FAIL") != 1 || !strings.Contains(out, "FAIL manifest signature: ") {
			t.Errorf("manifest signature, %s: exit %d:\n%s", name, verifyExit(err), out)
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
	out, err = runVerifyOut("--artifact", art, mp)
	if verifyExit(err) != 1 || !strings.Contains(out, "FAIL artifact: part(s) 2 of") {
		t.Errorf("flipped artifact: exit %d\n%s", verifyExit(err), out)
	}
}

// TestVerifyPinnedKeys: --keys-file and --keys-url are used instead of the keys beside the
// manifest; keys of another deployment (an unknown key ID, or the same ID with another key)
// fail both signatures.
func TestVerifyPinnedKeys(t *testing.T) {
	mp, _ := writeSignedExport(t)
	good, _ := handle.ParseSigningKeyring(signKeys)
	other, _ := handle.ParseSigningKeyring("s9:" + strings.Repeat("77", 32))
	sameKID, _ := handle.ParseSigningKeyring("s2:" + strings.Repeat("77", 32))
	dir := t.TempDir()
	write := func(name string, k *handle.SigningKeyring) string {
		p := filepath.Join(dir, name)
		_ = os.WriteFile(p, k.PublicJWKS(), 0o644)
		return p
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(good.PublicJWKS()) }))
	defer srv.Close()
	for name, c := range map[string]struct {
		args  []string
		code  int
		lines []string
	}{
		"file":     {[]string{"--keys-file", write("good.json", good)}, 0, []string{"ok   manifest signature:", "good.json"}},
		"url":      {[]string{"--keys-url", srv.URL + "/.well-known/jobgate-signing-keys"}, 0, []string{"ok   manifest signature:", "--keys-url http"}},
		"unknown":  {[]string{"--keys-file", write("other.json", other)}, 1, []string{"FAIL manifest signature: made with key s2, which the public keys do not hold", "FAIL decision signature: made with key s2"}},
		"same kid": {[]string{"--keys-file", write("same.json", sameKID)}, 1, []string{"FAIL manifest signature: does not verify", "FAIL decision signature: does not verify"}},
	} {
		out, err := runVerifyOut(append([]string{mp}, c.args...)...)
		if verifyExit(err) != c.code {
			t.Errorf("%s: exit %d, want %d:\n%s", name, verifyExit(err), c.code, out)
		}
		for _, l := range c.lines {
			if !strings.Contains(out, l) {
				t.Errorf("%s: output lacks %q:\n%s", name, l, out)
			}
		}
	}
}

// TestVerifyLegacy: an HMAC-sealed manifest (before signatures) fails without --allow-legacy,
// and passes with it and the resume keys, labelled a legacy HMAC seal; --allow-skipped alone
// never accepts it.
func TestVerifyLegacy(t *testing.T) {
	mp, kf := writeExport(t, false)
	out, err := runVerifyOut(mp, "--resume-keys-file", kf, "--allow-skipped")
	if verifyExit(err) != 1 || !strings.Contains(out, "FAIL manifest signature: none; the manifest has a legacy HMAC seal only") ||
		!strings.Contains(out, "FAIL decision signature: none; the record has only a legacy HMAC seal") {
		t.Errorf("legacy without --allow-legacy: exit %d:\n%s", verifyExit(err), out)
	}
	out, err = runVerifyOut(mp, "--resume-keys-file", kf, "--allow-legacy")
	if verifyExit(err) != 0 || !strings.Contains(out, "ok   legacy HMAC seal: every field of the manifest is as the worker wrote it (key r1; accepted: --allow-legacy") ||
		!strings.Contains(out, "ok   legacy HMAC seal (decision, key r1; accepted: --allow-legacy): approve by steward@acme") {
		t.Errorf("legacy with --allow-legacy: exit %d:\n%s", verifyExit(err), out)
	}
	out, err = runVerifyOut(mp, "--allow-legacy")
	if verifyExit(err) != 1 || !strings.Contains(out, "FAIL legacy HMAC seal: no resume keys") {
		t.Errorf("legacy without resume keys: exit %d:\n%s", verifyExit(err), out)
	}
	// A legacy manifest whose seal was altered fails, --allow-legacy or not.
	p := rewriteManifest(t, mp, filepath.Dir(mp), false, func(v map[string]any) { v["rows"] = 4 })
	out, err = runVerifyOut(p, "--resume-keys-file", kf, "--allow-legacy")
	if verifyExit(err) != 1 || !strings.Contains(out, "FAIL legacy HMAC seal: does not verify") {
		t.Errorf("altered legacy: exit %d:\n%s", verifyExit(err), out)
	}
}

// rewriteManifest applies edit to the manifest's JSON object and writes it to dir/manifest.json;
// resign re-signs it with the test signing keys (as a worker would have written it) and puts
// their public keys beside it.
func rewriteManifest(t *testing.T, src, dir string, resign bool, edit func(map[string]any)) string {
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
	if resign {
		delete(v, "manifest_signature")
		keys, _ := handle.ParseSigningKeyring(signKeys)
		b, _ = json.Marshal(v)
		if v["manifest_signature"], err = keys.SignManifest(b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, contract.SigningKeysObject)); err != nil {
		if kb, err := os.ReadFile(filepath.Join(filepath.Dir(src), contract.SigningKeysObject)); err == nil {
			_ = os.WriteFile(filepath.Join(dir, contract.SigningKeysObject), kb, 0o644)
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
// manifest signature; a stripped signature is never a SKIP.
func TestVerifySkipsAndMissingRecords(t *testing.T) {
	mp, _ := writeSignedExport(t)
	for name, c := range map[string]struct {
		resign bool
		edit   func(map[string]any)
		args   []string
		code   int
		lines  []string
	}{
		"no artifact": {edit: func(map[string]any) {}, code: 3,
			lines: []string{"SKIP artifact: not next to the manifest", "ok   manifest signature:"}},
		"no artifact, allowed": {edit: func(map[string]any) {}, args: []string{"--allow-skipped"}, code: 0,
			lines: []string{"SKIP artifact: not next to the manifest"}},
		"flipped sha256, no artifact": {edit: func(v map[string]any) {
			s := v["sha256"].(string)
			v["sha256"] = string(s[0]^1) + s[1:]
		}, code: 1, lines: []string{"FAIL manifest signature: does not verify", "SKIP artifact:"}},
		"signature stripped": {edit: func(v map[string]any) { delete(v, "manifest_signature") }, args: []string{"--allow-skipped", "--allow-legacy"},
			code: 1, lines: []string{"FAIL manifest signature: missing, though the manifest says it is signed (manifest_version 2)"}},
		"signature and version stripped": {edit: func(v map[string]any) {
			delete(v, "manifest_signature")
			delete(v, "manifest_version")
			delete(v, "scope")
		}, args: []string{"--allow-skipped", "--allow-legacy"}, code: 1,
			lines: []string{"FAIL manifest signature: none, and the manifest carries an approval", "SKIP decision scope:", "ok   decision signature"}},
		"decision removed": {edit: func(v map[string]any) { delete(v, "decision") }, code: 1,
			lines: []string{"FAIL manifest signature: does not verify", "FAIL decision: the export required approval and the manifest carries no decision record"}},
		"decision and approval_required removed, resigned": {resign: true, edit: func(v map[string]any) {
			delete(v, "decision")
			delete(v, "approval_required")
		}, code: 1, lines: []string{"ok   manifest signature:", "FAIL decision: none recorded (pass --allow-unapproved"}},
		"no approval needed, --allow-unapproved": {resign: true, edit: func(v map[string]any) {
			delete(v, "decision")
			delete(v, "approval_required")
		}, args: []string{"--allow-unapproved", "--allow-skipped"}, code: 0, lines: []string{"ok   decision: none recorded and the manifest does not say approval was required"}},
		"required, --allow-unapproved": {resign: true, edit: func(v map[string]any) { delete(v, "decision") },
			args: []string{"--allow-unapproved"}, code: 1, lines: []string{"FAIL decision: the export required approval"}},
	} {
		p := rewriteManifest(t, mp, t.TempDir(), c.resign, c.edit) // a directory without the artifact
		out, err := runVerifyOut(append([]string{p}, c.args...)...)
		if verifyExit(err) != c.code {
			t.Errorf("%s: exit %d (%v), want %d:\n%s", name, verifyExit(err), err, c.code, out)
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

// downgrade rewrites the manifest at mp as whoever can write the artifact store alone would
// (finding 7 of issue 31): every seal and signature removed, the artifact swapped for other
// bytes, and the digests, size and parts updated to match them. edit changes more fields.
func downgrade(t *testing.T, mp string, edit func(map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	evil := []byte("someone else's rows, not the approved export")
	sum := sha256.Sum256(evil)
	p := rewriteManifest(t, mp, dir, false, func(v map[string]any) {
		for _, f := range []string{"manifest_seal", "manifest_signature", "manifest_version"} {
			delete(v, f)
		}
		v["bytes"] = len(evil)
		v["sha256"] = hex.EncodeToString(sum[:])
		v["parts"] = []map[string]any{{"part": 1, "rows": 1, "bytes": len(evil), "sha256": hex.EncodeToString(sum[:])}}
		if edit != nil {
			edit(v)
		}
	})
	var m struct {
		Object string `json:"object"`
	}
	b, _ := os.ReadFile(p)
	_ = json.Unmarshal(b, &m)
	if err := os.WriteFile(filepath.Join(dir, path.Base(m.Object)), evil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVerifyDowngrade: a manifest stripped of its seal or signature, with the artifact swapped
// and the digests updated, must fail however verify is asked, --allow-skipped included (it
// passed every check before: finding 7 of issue 31). Also with approval_required removed, and
// with the whole decision record removed too, short of --allow-legacy. Both a legacy
// (HMAC-sealed) and a signed export are downgraded.
func TestVerifyDowngrade(t *testing.T) {
	for _, signed := range []bool{false, true} {
		mp, kf := writeExport(t, signed)
		for name, edit := range map[string]func(map[string]any){
			"seal stripped, artifact swapped": nil,
			"and approval_required removed":   func(v map[string]any) { delete(v, "approval_required") },
			"and the decision removed": func(v map[string]any) {
				delete(v, "approval_required")
				delete(v, "decision")
				delete(v, "scope")
			},
		} {
			p := downgrade(t, mp, edit)
			for _, args := range [][]string{{"--allow-skipped"}, {"--allow-skipped", "--allow-unapproved"}} {
				out, err := runVerifyOut(append([]string{p, "--resume-keys-file", kf}, args...)...)
				if verifyExit(err) != 1 || !strings.Contains(out, "FAIL") {
					t.Errorf("signed %v, %s %v: exit %d, want 1 (a FAIL): the downgraded manifest passed:\n%s", signed, name, args, verifyExit(err), out)
				}
			}
		}
	}
}
