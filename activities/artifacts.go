package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/jobgate/jobgate/activities/contract"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// artifact stores
	_ "gocloud.dev/blob/memblob"  // mem:// artifact stores (tests, ephemeral dev)
	"gocloud.dev/gcerrors"
)

// ArtifactStore keeps export artifacts: chunk objects while a job runs, then one gzip file
// and its manifest per job instance, all under ExportPrefix(jobID, firstRunID).
type ArtifactStore struct {
	b *blob.Bucket
	// w writes the export's own objects (chunks, the artifact): for file:// stores the same
	// directory opened with metadata=skip, so no ".attrs" sidecar is written beside each
	// object and no MD5 computed for it (fileblob hashes every byte it writes for the
	// sidecar); elsewhere b. The export's integrity check is its own SHA-256: every part's
	// digest is carried from the part to finalize, which checks the chunks against it.
	w *blob.Bucket
}

// OpenArtifactStore opens a gocloud.dev/blob bucket URL: file:///dir (the directory is
// created when missing) and mem://; s3://, gs:// and azblob:// once the binary links their
// drivers (cmd/app/blobdrivers.go does).
func OpenArtifactStore(ctx context.Context, urlstr string) (*ArtifactStore, error) {
	u, err := url.Parse(urlstr)
	if err != nil {
		return nil, fmt.Errorf("artifact store URL: %w", err)
	}
	if u.Scheme == "file" {
		q := u.Query()
		// A fresh data directory should just work.
		if !q.Has("create_dir") {
			q.Set("create_dir", "true")
		}
		// Temporary files next to the final ones: os.TempDir is often another filesystem
		// (a container's overlay vs. a mounted volume), where the final rename would fail.
		// A temp file stranded by a crash lies under the job's prefix, so DeleteExport
		// removes it with the rest.
		if !q.Has("no_tmp_dir") {
			q.Set("no_tmp_dir", "true")
		}
		u.RawQuery = q.Encode()
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("open artifact store: %w", err)
	}
	s := &ArtifactStore{b: b, w: b}
	if u.Scheme == "file" && !u.Query().Has("metadata") {
		q := u.Query()
		q.Set("metadata", "skip")
		u.RawQuery = q.Encode()
		if s.w, err = blob.OpenBucket(ctx, u.String()); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("open artifact store: %w", err)
		}
	}
	return s, nil
}

// Close closes the bucket.
func (s *ArtifactStore) Close() error {
	err := s.b.Close()
	if s.w != s.b {
		err = errors.Join(err, s.w.Close())
	}
	return err
}

// writeObject writes one export object (a chunk) in one go. On a file store it goes through
// w without WriteAll's ContentMD5: WriteAll hashes the bytes with MD5 once itself and once more
// in the Writer to check that sum, and fileblob a third time for its sidecar, none of which
// protects a local write; the part's SHA-256, checked by finalize, covers every byte. Other
// stores keep WriteAll, whose Content-MD5 the service itself checks on upload.
func (s *ArtifactStore) writeObject(ctx context.Context, key string, p []byte, contentType string) error {
	if s.w == s.b {
		return s.b.WriteAll(ctx, key, p, &blob.WriterOptions{ContentType: contentType})
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.w.NewWriter(wctx, key, &blob.WriterOptions{ContentType: contentType})
	if err != nil {
		return err
	}
	if _, err := w.Write(p); err != nil {
		cancel() // the partial object is discarded, never committed
		_ = w.Close()
		return err
	}
	return w.Close()
}

// Bucket is the underlying bucket.
func (s *ArtifactStore) Bucket() *blob.Bucket { return s.b }

// ExportPrefix is the key prefix of every object of one export job instance: the job ID and
// the job's first run ID (stable across retries, worker deaths and continue-as-new; unique per
// instance), each escaped into a single path segment. A workflow ID is reused once Temporal
// has purged a closed job (namespace retention) while its artifact may live on: scoping by
// the first run keeps a new job from ever meeting the old one's manifest, and the old one's
// retention from deleting the new one's objects.
//
// Run-scoped prefixes live under "exports/runs/", beside the legacy "exports/<job>/" prefix of
// jobs started before them (firstRunID ""), and never under it: a legacy prefix is one
// escaped workflow ID, which holds "%2F" (workflow IDs are "<tenant>/<kind>/<key>") and so is
// never "runs". No prefix is a prefix of another's.
func ExportPrefix(jobID, firstRunID string) string {
	if firstRunID == "" {
		return "exports/" + url.PathEscape(jobID) + "/"
	}
	return "exports/runs/" + url.PathEscape(firstRunID) + "/" + url.PathEscape(jobID) + "/"
}

func manifestKey(jobID, firstRunID string) string {
	return ExportPrefix(jobID, firstRunID) + "manifest.json"
}

// gone wraps a NotFound from the store as ErrArtifactGone and leaves other errors alone.
func gone(err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("%w: %w", contract.ErrArtifactGone, err)
	}
	return err
}

// ReadManifest reads a finished export's manifest. ErrArtifactGone when there is none.
func (s *ArtifactStore) ReadManifest(ctx context.Context, jobID, firstRunID string) (contract.Manifest, error) {
	b, err := s.b.ReadAll(ctx, manifestKey(jobID, firstRunID))
	if err != nil {
		return contract.Manifest{}, gone(err)
	}
	var m contract.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return contract.Manifest{}, fmt.Errorf("manifest of %s: %w", jobID, err)
	}
	return m, nil
}

// OpenArtifact opens the artifact a manifest names. The reader seeks, so it can feed
// http.ServeContent (ranges, If-Modified-Since). ErrArtifactGone when missing.
func (s *ArtifactStore) OpenArtifact(ctx context.Context, m contract.Manifest) (io.ReadSeekCloser, error) {
	// A manifest only ever names an object under exports/; refuse anything else rather than
	// serve an arbitrary key from the bucket.
	if !strings.HasPrefix(m.Object, "exports/") {
		return nil, fmt.Errorf("%w: manifest names no export object", contract.ErrArtifactGone)
	}
	r, err := s.b.NewReader(ctx, m.Object, nil)
	if err != nil {
		return nil, gone(err)
	}
	return r, nil
}

// The frontend reads the store through contract.ArtifactReader.
var _ contract.ArtifactReader = (*ArtifactStore)(nil)
