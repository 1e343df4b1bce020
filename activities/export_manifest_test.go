package activities

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

// fakeStamp seals and signs a manifest's JSON as its length, so a test can check that the
// stamp covers the manifest written, minus the stamp itself.
type fakeStamp struct{}

func (fakeStamp) SealManifest(b []byte) (string, error) { return "seal-" + itoa(len(b)), nil }
func (fakeStamp) SignManifest(b []byte) (string, error) { return "sig-" + itoa(len(b)), nil }
func (fakeStamp) PublicJWKS() []byte                    { return []byte(`{"keys":[]}`) }

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestWriteManifestStamps: writeManifest signs (version 2, public keys beside it) with a
// signer, seals with only a sealer, and writes an unstamped manifest with neither; the stamp
// covers the manifest's JSON without it.
func TestWriteManifestStamps(t *testing.T) {
	ctx := context.Background()
	in := contract.FinalizeExportInput{JobID: "acme/export/k", FirstRunID: firstRunTest}
	for _, c := range []struct {
		name       string
		signer     ManifestSigner
		sealer     ManifestSealer
		seal, sign bool
	}{
		{"signed", fakeStamp{}, fakeStamp{}, false, true},
		{"sealed", nil, fakeStamp{}, true, false},
		{"plain", nil, nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			store, err := OpenArtifactStore(ctx, "mem://")
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			m := contract.Manifest{Rows: 3, SHA256: "ab"}
			a := &Activities{ManifestSigner: c.signer, ManifestSealer: c.sealer}
			if err := a.writeManifest(ctx, store, in, &m); err != nil {
				t.Fatal(err)
			}
			got, err := store.ReadManifest(ctx, in.JobID, in.FirstRunID)
			if err != nil {
				t.Fatal(err)
			}
			unstamped := got
			unstamped.ManifestSeal, unstamped.ManifestSignature = "", ""
			b, _ := json.Marshal(unstamped)
			want := "-" + itoa(len(b))
			switch {
			case got.Rows != 3 || got.SHA256 != "ab":
				t.Fatalf("manifest %+v", got)
			case c.sign && (got.ManifestSignature != "sig"+want || got.ManifestSeal != "" || got.Version != contract.ManifestVersionSigned):
				t.Fatalf("signed: %+v, want signature sig%s", got, want)
			case c.seal && (got.ManifestSeal != "seal"+want || got.ManifestSignature != ""):
				t.Fatalf("sealed: %+v, want seal seal%s", got, want)
			case !c.seal && !c.sign && (got.ManifestSeal != "" || got.ManifestSignature != ""):
				t.Fatalf("plain: %+v", got)
			}
			keys, err := store.b.Exists(ctx, ExportPrefix(in.JobID, in.FirstRunID)+contract.SigningKeysObject)
			if err != nil || keys != c.sign {
				t.Fatalf("signing keys beside the manifest: %v (%v), want %v", keys, err, c.sign)
			}
		})
	}
}
