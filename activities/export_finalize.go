package activities

// FinalizeExport: concatenating the chunks into the artifact, writing its manifest, reusing
// a stored manifest on retry, and the download file name.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"go.temporal.io/sdk/activity"
	"gocloud.dev/blob"
)

// artifactFileName is the download name: the job ID with "/" as "-" and anything outside
// [A-Za-z0-9._-] as "_", so it needs no quoting care in Content-Disposition.
func artifactFileName(jobID, format string) string {
	var b strings.Builder
	for _, r := range jobID {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		case r == '/':
			b.WriteByte('-')
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 120 {
			break
		}
	}
	name := strings.Trim(b.String(), ".-_")
	if name == "" {
		name = "export"
	}
	return name + "." + format + ".gz"
}

// FinalizeExport concatenates the parts' chunks, in part and chunk order, into one gzip file
// (gzip members concatenate into a valid gzip stream), writes its manifest next to it and
// deletes the chunks. For csv the file starts with one member holding the header line; it
// belongs to no part, so part digests cover only their rows and the whole-file digest covers
// the header too. A jsonl export of zero rows is one empty member, so it still gunzips.
// A retry after success returns the stored manifest (the chunks may be gone by then), but only
// a manifest this very input wrote: same first run ID and input digest. Anything else stored
// there (an earlier instance's, under a legacy prefix) is never returned; it is overwritten.
func (a *Activities) FinalizeExport(ctx context.Context, in contract.FinalizeExportInput) (contract.Manifest, error) {
	store, err := a.store()
	if err != nil {
		return contract.Manifest{}, err
	}
	prefix := ExportPrefix(in.JobID, in.FirstRunID)
	digest, err := finalizeDigest(in)
	if err != nil {
		return contract.Manifest{}, err
	}
	if m, done, err := reuseManifest(ctx, store, in, digest); done || err != nil {
		return m, err
	}
	if err := checkFormat(in.Format); err != nil {
		return contract.Manifest{}, err
	}
	if len(in.Columns) == 0 {
		return contract.Manifest{}, invalid("no columns")
	}
	parts, chunks, err := partsInOrder(in.Parts)
	if err != nil {
		return contract.Manifest{}, err
	}
	started := activity.GetInfo(ctx).StartedTime
	if started.IsZero() {
		started = time.Now()
	}
	key := prefix + "export." + in.Format + ".gz"
	m := contract.Manifest{
		Object:      key,
		FileName:    artifactFileName(in.JobID, in.Format),
		Format:      in.Format,
		Columns:     slices.Clone(in.Columns),
		Parts:       make([]contract.ManifestPart, 0, len(parts)),
		CreatedAt:   started.UTC(),
		ExpiresAt:   in.ExpiresAt.UTC(),
		RunID:       in.FirstRunID,
		InputDigest: digest,
		Decision:    in.Decision,
		Scope:       in.Scope,
	}
	if err := concatParts(ctx, store, in, parts, chunks, &m); err != nil {
		return contract.Manifest{}, err
	}
	m.ApprovalRequired = in.ApprovalRequired
	if err := a.writeManifest(ctx, store, in, &m); err != nil {
		return contract.Manifest{}, err
	}
	if err := store.deletePrefix(ctx, prefix+"part-"); err != nil {
		return contract.Manifest{}, err
	}
	activity.GetLogger(ctx).Info("export finalized", "job_id", in.JobID, "first_run_id", in.FirstRunID, "rows", m.Rows, "bytes", m.Bytes, "parts", len(m.Parts))
	return m, nil
}

// reuseManifest is a retry's answer: done with the stored manifest when this very input wrote
// it (deleting the chunks an attempt that died before its cleanup left), not done when there
// is none or another instance's or input's (logged; it will be replaced).
func reuseManifest(ctx context.Context, store *ArtifactStore, in contract.FinalizeExportInput, digest string) (contract.Manifest, bool, error) {
	m, err := store.ReadManifest(ctx, in.JobID, in.FirstRunID)
	if errors.Is(err, contract.ErrArtifactGone) {
		return contract.Manifest{}, false, nil
	}
	if err != nil {
		return contract.Manifest{}, false, err
	}
	if m.RunID != in.FirstRunID || m.InputDigest != digest {
		activity.GetLogger(ctx).Warn("a stored manifest of another job instance or input is ignored and replaced",
			"job_id", in.JobID, "first_run_id", in.FirstRunID, "stored_run_id", m.RunID)
		return contract.Manifest{}, false, nil
	}
	// An attempt that died between the manifest and the cleanup left chunks behind.
	if err := store.deletePrefix(ctx, ExportPrefix(in.JobID, in.FirstRunID)+"part-"); err != nil {
		return contract.Manifest{}, false, err
	}
	return m, true, nil
}

// partsInOrder is the part results sorted by part number, refused if any is malformed or
// repeated, and their chunk count.
func partsInOrder(in []contract.PartResult) (parts []contract.PartResult, chunks int, err error) {
	parts = slices.Clone(in)
	slices.SortFunc(parts, func(x, y contract.PartResult) int { return x.Part - y.Part })
	for i, p := range parts {
		if p.Part < 1 || (i > 0 && parts[i-1].Part == p.Part) || p.Chunks < 0 || p.Rows < 0 || p.Bytes < 0 {
			return nil, 0, invalid("part %d: malformed or repeated part result", p.Part)
		}
		chunks += p.Chunks
	}
	return parts, chunks, nil
}

// concatParts writes the artifact m.Object: the lead member (csv's header, or an empty member
// for a jsonl export without chunks), then every part's chunks in order, each part checked
// against the bytes it reported. It fills in m's parts, rows, bytes and digest; on an error
// the partial object is discarded, never committed.
func concatParts(ctx context.Context, store *ArtifactStore, in contract.FinalizeExportInput, parts []contract.PartResult, chunks int, m *contract.Manifest) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := store.w.NewWriter(wctx, m.Object, &blob.WriterOptions{ContentType: "application/gzip"})
	if err != nil {
		return fmt.Errorf("write artifact: %w", err)
	}
	abort := func(err error) error {
		cancel() // before Close: the partial object is discarded, never committed
		_ = w.Close()
		return err
	}
	whole := sha256.New()
	var total int64
	out := io.MultiWriter(w, whole)
	var lead []byte
	switch {
	case in.Format == contract.FormatCSV:
		lead, err = csvHeader(in.Columns)
	case chunks == 0:
		lead, err = gzipMember(nil)
	}
	if err != nil {
		return abort(err)
	}
	if _, err := out.Write(lead); err != nil {
		return abort(fmt.Errorf("write artifact: %w", err))
	}
	total += int64(len(lead))
	for _, p := range parts {
		ph := sha256.New()
		var pb int64
		for c := 0; c < p.Chunks; c++ {
			n, err := store.copyObject(ctx, io.MultiWriter(out, ph), chunkKey(in.JobID, in.FirstRunID, p.Part, c))
			if err != nil {
				return abort(fmt.Errorf("part %d chunk %d: %w", p.Part, c, err))
			}
			pb += n
			activity.RecordHeartbeat(ctx, p.Part)
		}
		if pb != p.Bytes {
			return abort(fmt.Errorf("part %d: its chunks hold %d bytes, the part reported %d", p.Part, pb, p.Bytes))
		}
		sum := hex.EncodeToString(ph.Sum(nil))
		if p.SHA256 != "" && sum != p.SHA256 {
			// The store gave back other bytes than the part wrote: the artifact's integrity
			// check end to end (its writes carry no per-write checksum on a file store).
			return abort(fmt.Errorf("part %d: its chunks' SHA-256 is %s, the part wrote %s", p.Part, sum, p.SHA256))
		}
		total += pb
		m.Rows += p.Rows
		m.Parts = append(m.Parts, contract.ManifestPart{Part: p.Part, Rows: p.Rows, Bytes: pb, SHA256: sum})
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write artifact: %w", err)
	}
	m.Bytes = total
	m.SHA256 = hex.EncodeToString(whole.Sum(nil))
	return nil
}

// writeManifest stamps m, last, over everything above (the artifact's and parts' digests, the
// decision record, the scope, approval_required and the version), so none of it can be
// rewritten or removed by whoever can write the artifact store alone: with a ManifestSigner an
// Ed25519 signature (its public keys are written first: a manifest found in the store always
// has its keys beside it), else with a ManifestSealer a legacy HMAC seal, else nothing. Then it
// writes m next to the artifact.
func (a *Activities) writeManifest(ctx context.Context, store *ArtifactStore, in contract.FinalizeExportInput, m *contract.Manifest) error {
	var stamp func(mb []byte) error
	switch {
	case a.ManifestSigner != nil:
		m.Version = contract.ManifestVersionSigned
		m.ManifestSeal, m.ManifestSignature = "", ""
		stamp = func(mb []byte) (err error) {
			if m.ManifestSignature, err = a.ManifestSigner.SignManifest(mb); err != nil {
				return fmt.Errorf("sign manifest: %w", err)
			}
			return nil
		}
	case a.ManifestSealer != nil:
		stamp = func(mb []byte) (err error) {
			if m.ManifestSeal, err = a.ManifestSealer.SealManifest(mb); err != nil {
				return fmt.Errorf("seal manifest: %w", err)
			}
			return nil
		}
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if stamp != nil {
		if err := stamp(mb); err != nil {
			return err
		}
		if mb, err = json.Marshal(m); err != nil {
			return err
		}
	}
	if a.ManifestSigner != nil {
		if err := store.b.WriteAll(ctx, ExportPrefix(in.JobID, in.FirstRunID)+contract.SigningKeysObject, a.ManifestSigner.PublicJWKS(),
			&blob.WriterOptions{ContentType: "application/jwk-set+json"}); err != nil {
			return fmt.Errorf("write signing keys: %w", err)
		}
	}
	if err := store.b.WriteAll(ctx, manifestKey(in.JobID, in.FirstRunID), mb, &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}

// finalizeDigest is "sha256:<hex>" of the canonical JSON of a finalize input: what a stored
// manifest must have been written for to be reused.
func finalizeDigest(in contract.FinalizeExportInput) (string, error) {
	in.ExpiresAt = in.ExpiresAt.UTC()
	return contract.JSONDigest(in)
}

// copyObject copies one object into w.
func (s *ArtifactStore) copyObject(ctx context.Context, w io.Writer, key string) (int64, error) {
	r, err := s.b.NewReader(ctx, key, nil)
	if err != nil {
		return 0, gone(err)
	}
	defer r.Close()
	return io.Copy(w, r)
}
