package handle

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestManifestSeal: a manifest seal verifies over the same manifest whatever its key order,
// fails on any changed value or removed field, and is domain-separated from resume seals (the
// same MAC over the same bytes with the raw resume key is not accepted).
func TestManifestSeal(t *testing.T) {
	k, err := ParseKeyring("m1:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	m := []byte(`{"object":"exports/j/export.csv.gz","bytes":33,"sha256":"00ff","decision":{"by":"steward"},"approval_required":true}`)
	seal, err := k.SealManifest(m)
	if err != nil || !strings.HasPrefix(seal, "jgm1.m1.") {
		t.Fatalf("seal %q, %v", seal, err)
	}
	with := func(s string) []byte {
		var v map[string]any
		_ = json.Unmarshal([]byte(s), &v)
		v[ManifestSealField] = seal
		b, _ := json.Marshal(v)
		return b
	}
	if kid, found, err := k.OpenManifest(with(string(m))); err != nil || !found || kid != "m1" {
		t.Fatalf("open: %q %v %v", kid, found, err)
	}
	for _, bad := range []string{
		`{"object":"exports/j/export.csv.gz","bytes":33,"sha256":"01ff","decision":{"by":"steward"},"approval_required":true}`,
		`{"object":"exports/j/export.csv.gz","bytes":33,"sha256":"00ff","approval_required":true}`,
		`{"object":"exports/j/export.csv.gz","bytes":34,"sha256":"00ff","decision":{"by":"steward"},"approval_required":true}`,
	} {
		if _, _, err := k.OpenManifest(with(bad)); !errors.Is(err, ErrManifestSeal) {
			t.Errorf("%s: %v, want ErrManifestSeal", bad, err)
		}
	}
	if _, found, err := k.OpenManifest(m); found || err != nil {
		t.Errorf("unsealed manifest: found %v, %v", found, err)
	}
	// A resume seal is not a manifest seal, and other keys do not open it.
	other, _ := ParseKeyring("m1:" + strings.Repeat("cd", 32))
	if _, _, err := other.OpenManifest(with(string(m))); !errors.Is(err, ErrManifestSeal) {
		t.Errorf("other keys: %v", err)
	}
	seal = k.SealResume(Resume{WorkflowID: "j", Expiry: time.Now().Add(time.Minute)})
	if _, _, err := k.OpenManifest(with(string(m))); !errors.Is(err, ErrManifestSeal) {
		t.Errorf("resume seal accepted as a manifest seal: %v", err)
	}
}

// FuzzOpenManifest: any bytes give an error or a verdict, never a panic; a manifest that
// verifies still verifies after re-sealing its own bytes (the canonical form is stable).
func FuzzOpenManifest(f *testing.F) {
	k, err := ParseKeyring("m1:" + strings.Repeat("ab", 32))
	if err != nil {
		f.Fatal(err)
	}
	m := []byte(`{"object":"exports/j/export.csv.gz","bytes":33,"sha256":"00ff","parts":[{"part":1,"bytes":3}],"approval_required":true}`)
	seal, _ := k.SealManifest(m)
	f.Add([]byte(`{"manifest_seal":"` + seal + `",` + string(m[1:])))
	f.Add(m)
	f.Add([]byte(`{"manifest_seal":"jgm1.m1.AAAA","a":1,"a":2}`))
	f.Add([]byte(`{"manifest_seal":7}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"bytes":1e400}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		kid, found, err := k.OpenManifest(b)
		if err != nil || !found {
			return
		}
		if kid != "m1" {
			t.Fatalf("verified under kid %q", kid)
		}
		if _, err := k.SealManifest(b); err != nil {
			t.Fatalf("a verified manifest does not re-seal: %v", err)
		}
	})
}
