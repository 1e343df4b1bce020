package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// SeedFile is the corpus-file encoding (testdata/fuzz/<Target>/<name>) of one string seed.
func SeedFile(s string) string { return "go test fuzz v1\nstring(" + strconv.Quote(s) + ")\n" }

// SeedCorpus keeps a committed fuzz corpus dir equal to seeds, the test's own generated seeds by
// file name: with update it (re)writes them; otherwise each file must hold its seed, and with
// exact no other file may be in dir. Callers then check each seed's outcome themselves.
func SeedCorpus(t testing.TB, dir string, seeds map[string]string, update, exact bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range seeds {
		path := filepath.Join(dir, name)
		if update {
			if err := os.WriteFile(path, []byte(SeedFile(s)), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if got, err := os.ReadFile(path); err != nil || string(got) != SeedFile(s) {
			t.Errorf("%s is missing or stale (err %v): regenerate the corpus (see the test's comment)", path, err)
		}
	}
	if exact && !update {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if _, ok := seeds[e.Name()]; !ok {
				t.Errorf("%s: a seed file the test does not generate", filepath.Join(dir, e.Name()))
			}
		}
	}
}
