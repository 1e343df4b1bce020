package contract

import (
	"context"
	"errors"
	"io"
)

// ErrArtifactGone: the artifact or its manifest is not in the store (deleted after retention,
// or never finished).
var ErrArtifactGone = errors.New("export artifact is gone")

// ArtifactReader is the read side of the artifact store the workers write
// (activities.ArtifactStore): what the frontend serves downloads and episode listings from.
// The frontend holds this interface, not the store, so it links neither the activities
// package (and its SQL drivers) nor a blob driver; cmd opens the store and passes it in.
type ArtifactReader interface {
	// OpenArtifact opens the artifact a manifest names; ErrArtifactGone when missing. The
	// reader seeks, so it can feed http.ServeContent.
	OpenArtifact(ctx context.Context, m Manifest) (io.ReadSeekCloser, error)
	// OpenEpisodeLog opens an ended eval's whole episode log; ErrArtifactGone when missing.
	OpenEpisodeLog(ctx context.Context, jobID, firstRunID string) (io.ReadSeekCloser, error)
	// ReadEpisodeSegment reads segment n of an eval's episode log (EncodeEpisodes' bytes).
	ReadEpisodeSegment(ctx context.Context, jobID, firstRunID string, n int) ([]byte, error)
	// EpisodeSegments lists the written segments of an eval's episode log, in order.
	EpisodeSegments(ctx context.Context, jobID, firstRunID string) ([]int, error)
}
