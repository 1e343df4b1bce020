package activities

import (
	"context"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

// TestPartDigests: every part reports the SHA-256 of its chunks, the one the manifest records;
// a part resumed from a heartbeat without the digest's state (a worker before it) reports none
// and finalize computes it; a chunk changed in the store after its part wrote it fails
// finalize instead of going into the artifact.
func TestPartDigests(t *testing.T) {
	be := sqliteBackend(t)
	h := newHarness(t, be.datasets)
	j := job{id: "acme/export/digests", tenant: "acme", dataset: "customers", format: contract.FormatCSV,
		columns: []string{"id", "name", "email"}, partRows: 700, pageRows: 128}
	plan, err := h.plan(j.planInput(h))
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Ranges) < 3 {
		t.Fatalf("plan: %d ranges, the test needs 3", len(plan.Ranges))
	}
	var parts []contract.PartResult
	for i, r := range plan.Ranges {
		p, err := h.part(j.partInput(h, i+1, r), nil)
		if err != nil {
			t.Fatal(err)
		}
		var all []byte
		for c := 0; c < p.Chunks; c++ {
			all = append(all, readObject(t, h, chunkKey(j.id, j.firstRun(), p.Part, c))...)
		}
		if p.SHA256 == "" || p.SHA256 != hexSum(all) {
			t.Fatalf("part %d: digest %q, its chunks hash to %s", p.Part, p.SHA256, hexSum(all))
		}
		parts = append(parts, p)
	}

	// Part 2 again, resumed after its first chunk from a heartbeat that has no digest state.
	keys := tenantKeys(t, be, "acme")
	hb := heartbeatAt(t, h, j.id, keys, 700, 128, 1)
	hb.Digest = nil
	p2, err := h.part(j.partInput(h, 2, plan.Ranges[1]), &hb)
	if err != nil {
		t.Fatal(err)
	}
	if p2.SHA256 != "" || p2.Rows != parts[1].Rows || p2.Bytes != parts[1].Bytes {
		t.Fatalf("resumed without a digest state: %+v, clean %+v", p2, parts[1])
	}
	legacy := append([]contract.PartResult{}, parts...)
	legacy[1] = p2
	m, err := h.finalize(j.finalizeInput(legacy))
	if err != nil {
		t.Fatal(err)
	}
	for i, mp := range m.Parts {
		if mp.SHA256 != parts[i].SHA256 {
			t.Fatalf("manifest part %d: %s, the part wrote %s", mp.Part, mp.SHA256, parts[i].SHA256)
		}
	}
	h.artifact(t, m) // its size and digests against the manifest

	// Another instance of the job: part 3's first chunk is replaced by other bytes of the same
	// length before finalize.
	j2 := j
	j2.id = "acme/export/digests-tampered"
	var parts2 []contract.PartResult
	for i, r := range plan.Ranges {
		p, err := h.part(j2.partInput(h, i+1, r), nil)
		if err != nil {
			t.Fatal(err)
		}
		parts2 = append(parts2, p)
	}
	key := chunkKey(j2.id, j2.firstRun(), 3, 0)
	b := readObject(t, h, key)
	b[len(b)-5] ^= 0xff // in the gzip trailer: still the same length
	writeObject(t, h, key, b)
	_, err = h.finalize(j2.finalizeInput(parts2))
	if err == nil || !strings.Contains(err.Error(), "part 3: its chunks' SHA-256") {
		t.Fatalf("finalize over a changed chunk: %v", err)
	}
	if ok, err := h.a.Artifacts.Bucket().Exists(context.Background(), ExportPrefix(j2.id, j2.firstRun())+"export.csv.gz"); ok || err != nil {
		t.Fatalf("an artifact was committed over a changed chunk: %v, %v", ok, err)
	}
}
