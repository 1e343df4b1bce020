package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// approvedExport runs an export of a sensitive column to the end, approved by the steward,
// on a real worker, and returns its bundle and the manifest.json the worker wrote.
func approvedExport(t *testing.T) (*testBundle, string) {
	t.Helper()
	b, csAna, v, w := exAwaiting(t, "csv", "id", "name", "email")
	mustView(t, exResume(t, b.session(steward, 1, ""), w, workflows.DecisionApprove))
	done := exWait(t, csAna, v.Handle, workflows.StatusSucceeded, 60*time.Second)
	return b, findManifest(t, b, done.JobID)
}

// copyExport copies the manifest's directory (manifest, artifact, keys file) to a fresh one, so
// a test can tamper with it, and returns the copy's manifest path.
func copyExport(t *testing.T, manifest string) string {
	t.Helper()
	dir := t.TempDir()
	ents, err := os.ReadDir(filepath.Dir(manifest))
	must(t, err)
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(manifest), e.Name()))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
	}
	return filepath.Join(dir, "manifest.json")
}

// editManifest rewrites the JSON object of the manifest at p with edit.
func editManifest(t *testing.T, p string, edit func(map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(p)
	must(t, err)
	var v map[string]any
	must(t, json.Unmarshal(raw, &v))
	edit(v)
	raw, err = json.Marshal(v)
	must(t, err)
	must(t, os.WriteFile(p, raw, 0o644))
}

// TestVerifySignedExport: a genuine export, approved and finished on a real worker, passes the
// built `jobgate verify` with only the public keys — from serve's well-known URL, or the keys
// file the worker wrote beside the manifest — and no resume keys; each tampering fails: the
// artifact's bytes, a part's digest, the decision record, the manifest's signature, the
// record's signature, and keys of another deployment (an unknown key ID).
func TestVerifySignedExport(t *testing.T) {
	testenv.Heavy(t, "runs the jobgate CLI binary")
	t.Parallel()
	jobgateBinary(t) // build while the export runs
	b, mp := approvedExport(t)
	keysURL := "http://" + b.frontends[1].Addr() + "/.well-known/jobgate-signing-keys"
	resp, err := http.Get(keysURL)
	must(t, err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("GET %s: %d %s", keysURL, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	genuine := func(out string) bool {
		return !strings.Contains(out, "FAIL") && !strings.Contains(out, "SKIP") &&
			strings.Contains(out, "ok   manifest signature: Ed25519, every field of the manifest is as the worker signed it (key s1)") &&
			strings.Contains(out, "ok   decision signature (Ed25519, key s1): approve by steward@acme via tool") &&
			strings.Contains(out, "ok   artifact: ") && strings.Contains(out, "ok   decision scope: approved export of id, name, email")
	}
	code, out := runVerify(t, mp, "--keys-url", keysURL)
	t.Logf("jobgate verify --keys-url:\n%s", out)
	if code != 0 || !genuine(out) || !strings.Contains(out, "from --keys-url "+keysURL) {
		t.Fatalf("genuine export, --keys-url: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(mp), "signing-keys.json")); err != nil {
		t.Fatalf("no keys file beside the manifest: %v", err)
	}
	code, out = runVerify(t, mp)
	if code != 0 || !genuine(out) || !strings.Contains(out, "(beside the manifest); whoever can write the artifact store can replace them") {
		t.Fatalf("genuine export, keys beside it: exit %d:\n%s", code, out)
	}

	other, err := handle.ParseSigningKeyring("s9:" + handle.GenerateSigningSeedHex())
	must(t, err)
	otherKeys := filepath.Join(t.TempDir(), "other.json")
	must(t, os.WriteFile(otherKeys, other.PublicJWKS(), 0o644))
	for name, c := range map[string]struct {
		tamper func(p string)
		args   []string
		lines  []string
	}{
		"artifact bytes": {tamper: func(p string) {
			var m struct {
				Object string `json:"object"`
			}
			raw, _ := os.ReadFile(p)
			must(t, json.Unmarshal(raw, &m))
			art := filepath.Join(filepath.Dir(p), path.Base(m.Object))
			ab, err := os.ReadFile(art)
			must(t, err)
			ab[len(ab)/2] ^= 0x01
			must(t, os.WriteFile(art, ab, 0o644))
		}, lines: []string{"FAIL artifact: part(s) 1 of"}},
		"a part digest": {tamper: func(p string) {
			editManifest(t, p, func(v map[string]any) {
				pt := v["parts"].([]any)[0].(map[string]any)
				pt["sha256"] = strings.Repeat("0", 64)
			})
		}, lines: []string{"FAIL manifest signature: does not verify", "FAIL artifact: part(s) 1 of"}},
		"the decision record": {tamper: func(p string) {
			editManifest(t, p, func(v map[string]any) { v["decision"].(map[string]any)["by"] = "ana" })
		}, lines: []string{"FAIL manifest signature: does not verify", "FAIL decision signature: the record's by does not match what was signed"}},
		"the manifest signature": {tamper: func(p string) {
			editManifest(t, p, func(v map[string]any) {
				s := v["manifest_signature"].(string)
				v["manifest_signature"] = s[:len(s)-2] + map[bool]string{true: "AA", false: "BA"}[strings.HasSuffix(s, "BA")]
			})
		}, lines: []string{"FAIL manifest signature: does not verify"}},
		"the record's signature": {tamper: func(p string) {
			editManifest(t, p, func(v map[string]any) {
				d := v["decision"].(map[string]any)
				s := d["signature"].(string)
				d["signature"] = s[:len(s)-2] + map[bool]string{true: "AA", false: "BA"}[strings.HasSuffix(s, "BA")]
			})
		}, lines: []string{"FAIL manifest signature: does not verify", "FAIL decision signature: does not verify"}},
		"an unknown key ID": {tamper: func(string) {}, args: []string{"--keys-file", otherKeys},
			lines: []string{"FAIL manifest signature: made with key s1, which the public keys do not hold", "FAIL decision signature: made with key s1"}},
	} {
		p := copyExport(t, mp)
		c.tamper(p)
		code, out := runVerify(t, append(append([]string{p}, c.args...), "--allow-skipped", "--allow-legacy")...)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1:\n%s", name, code, out)
		}
		for _, l := range c.lines {
			if !strings.Contains(out, l) {
				t.Errorf("%s: output lacks %q:\n%s", name, l, out)
			}
		}
	}
}

// TestVerifyExportDowngrade (finding 7 of issue 31): whoever can write the artifact store strips
// the manifest's seal or signature, swaps the artifact for other bytes and updates the digests;
// `jobgate verify --allow-skipped` passed every check. It must fail, --allow-skipped or not,
// also with approval_required removed. It uses only what verify had before signatures (the
// resume keys), so it runs against either.
func TestVerifyExportDowngrade(t *testing.T) {
	testenv.Heavy(t, "runs the jobgate CLI binary")
	t.Parallel()
	jobgateBinary(t)
	b, mp := approvedExport(t)
	keysFile := filepath.Join(t.TempDir(), "resume-keys")
	must(t, os.WriteFile(keysFile, []byte(b.resumeKeySpec+"\n"), 0o600))
	for name, edit := range map[string]func(map[string]any){
		"seal stripped, artifact swapped": func(map[string]any) {},
		"and approval_required removed":   func(v map[string]any) { delete(v, "approval_required") },
	} {
		p := copyExport(t, mp)
		evil := []byte("rows nobody approved")
		sum := sha256.Sum256(evil)
		editManifest(t, p, func(v map[string]any) {
			for _, f := range []string{"manifest_seal", "manifest_signature", "manifest_version"} {
				delete(v, f)
			}
			must(t, os.WriteFile(filepath.Join(filepath.Dir(p), path.Base(v["object"].(string))), evil, 0o644))
			v["bytes"], v["sha256"] = len(evil), hex.EncodeToString(sum[:])
			v["parts"] = []map[string]any{{"part": 1, "rows": 1, "bytes": len(evil), "sha256": hex.EncodeToString(sum[:])}}
			edit(v)
		})
		code, out := runVerify(t, p, "--resume-keys-file", keysFile, "--allow-skipped")
		t.Logf("jobgate verify (%s):\n%s", name, out)
		if code != 1 || !strings.Contains(out, "FAIL") {
			t.Errorf("%s: exit %d, want 1 with a FAIL: the downgraded manifest passed:\n%s", name, code, out)
		}
	}
}
