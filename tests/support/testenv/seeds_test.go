package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSeedCorpus(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "FuzzX")
	seeds := map[string]string{"a": "one", "b": "two\n\"quoted\""}
	SeedCorpus(t, dir, seeds, true, true) // writes
	r := &recorder{TB: t}
	SeedCorpus(r, dir, seeds, false, true)
	if len(r.calls) != 0 {
		t.Fatalf("fresh corpus: %v", r.calls)
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte(SeedFile("changed")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stray"), []byte(SeedFile("x")), 0o644); err != nil {
		t.Fatal(err)
	}
	r = &recorder{TB: t}
	SeedCorpus(r, dir, seeds, false, true)
	if len(r.calls) != 2 {
		t.Fatalf("stale and stray files: %d errors %v, want 2", len(r.calls), r.calls)
	}
	r = &recorder{TB: t}
	SeedCorpus(r, dir, seeds, false, false) // not exact: only the stale file
	if len(r.calls) != 1 {
		t.Fatalf("not exact: %v", r.calls)
	}
}
