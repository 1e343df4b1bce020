package activities

import (
	"context"
	"io"
	"sort"
	"testing"

	"gocloud.dev/blob"
)

// TestForgetTenantArtifacts deletes acme's exports (both layouts) and episode logs, and nothing
// of acme2's or globex's.
func TestForgetTenantArtifacts(t *testing.T) {
	ctx := context.Background()
	s, err := OpenArtifactStore(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keep := []string{
		ExportPrefix("acme2/export/ana/k", "run1") + "manifest.json",
		ExportPrefix("globex/export/gus/k", "run2") + "artifact.csv.gz",
		EpisodesPrefix("globex/eval/gus/k", "run3") + "episodes.jsonl",
	}
	gone := []string{
		ExportPrefix("acme/export/ana/k", "run4") + "manifest.json",
		ExportPrefix("acme/export/ana/k", "run4") + "artifact.csv.gz",
		ExportPrefix("acme/export/ana/old", "") + "manifest.json",
		EpisodesPrefix("acme/eval/ana/k", "run5") + "seg-000001.jsonl",
	}
	for _, k := range append(append([]string{}, keep...), gone...) {
		if err := s.b.WriteAll(ctx, k, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.ForgetTenant(ctx, "acme")
	if err != nil || n != len(gone) {
		t.Fatalf("ForgetTenant: %d %v", n, err)
	}
	var left []string
	it := s.b.List(&blob.ListOptions{})
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, o.Key)
	}
	sort.Strings(left)
	sort.Strings(keep)
	if len(left) != len(keep) {
		t.Fatalf("left %v, want %v", left, keep)
	}
	for i := range keep {
		if left[i] != keep[i] {
			t.Fatalf("left %v, want %v", left, keep)
		}
	}
}
